"""``pipeline run`` stopped right after a run ended still writes the run's final progress.

The progress comment's last edit waits out its pacing after the run ends; a
daemon stopped meanwhile (SIGTERM, a deploy of the daemon itself) writes it
before its process exits, so the issue never shows a run as still at work.
"""

from __future__ import annotations

from pathlib import Path

from .forge_world import SLUG, forge_world

PROGRESS = "<!-- afk-progress run={run} -->"


def test_a_daemon_stopped_after_an_ending_writes_the_final_progress(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SIGTERM as soon as the run escalated: the progress comment says escalated all the same."""
    with forge_world(tmp_path, cli_env, "gitea") as world:
        world.start()
        number = world.issue("Pick a port", body="afk-block")
        world.wait("the run escalated", lambda: [r.state for r in world.runs()] == ["escalated"])
        assert world.stop() == 0, world.log.read_text()[-3000:]
        [run] = world.runs()
        with world.fake.lock:
            bodies = [c.body for c in world.fake.issue(SLUG, number).comments]
    [progress] = [body for body in bodies if PROGRESS.format(run=run.id) in body]
    assert progress.startswith(f"**afk-pipeline run {run.id}: escalated**"), progress
