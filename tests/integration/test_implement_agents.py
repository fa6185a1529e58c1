"""Agent processes and the hang rules: a stand-in CLI that speaks ``stream-json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.agents import Agent, AgentRequest, build_agent
from pipeline.agents.codex import codex_argv
from pipeline.config.settings import AgentPreset, SecretRef
from pipeline.core.errors import CancelRequested, FatalError, RetryableError
from pipeline.core.proc import StopToken
from pipeline.testing.sinks import RecordingSink

_FAKE_CLI = """\
import json, os, sys, time
mode = os.environ["FAKE_MODE"]
prompt = sys.stdin.read()
open(os.environ["FAKE_OUT"] + ".pid", "w").write(str(os.getpid()))
open(os.environ["FAKE_OUT"], "w").write(json.dumps({"argv": sys.argv[1:], "prompt": prompt}))
def emit(event):
    print(json.dumps(event), flush=True)
emit({"type": "system", "subtype": "init", "session_id": "fake-1"})
if mode == "crash":
    sys.exit(3)
if mode == "idle":
    time.sleep(60)
    open(os.environ["FAKE_OUT"] + ".outlived", "w").close()
print("this line is not JSON", flush=True)
emit({"type": "assistant", "message": {"content": [
    {"type": "tool_use", "id": "t1", "name": "Bash",
     "input": {"command": "make test " + os.environ.get("ANTHROPIC_API_KEY", "")}}]}})
emit({"type": "result", "subtype": "success", "is_error": False, "num_turns": 2,
      "total_cost_usd": 0.25, "result": "All done",
      "usage": {"input_tokens": 10, "output_tokens": 3}})
if mode == "linger":
    time.sleep(60)
    open(os.environ["FAKE_OUT"] + ".outlived", "w").close()
"""


def _agent(tmp_path: Path, mode: str, **preset: object) -> tuple[Agent, Path]:
    script = tmp_path / "fake_cli.py"
    script.write_text(_FAKE_CLI)
    out = tmp_path / "seen.json"
    settings: dict[str, object] = {
        "name": "claude",
        "kind": "claude",
        "command": (sys.executable, str(script)),
        "env": (("FAKE_MODE", mode), ("FAKE_OUT", str(out))),
        "idle_timeout_s": 30.0,
        "exit_grace_s": 0.5,
    }
    settings.update(preset)
    return build_agent(AgentPreset(**settings)), out  # type: ignore[arg-type]


def _killed_before_its_sleep_ended(out: Path) -> bool:
    """The fake CLI is no longer running and never got past its long sleep."""
    pid = int(Path(f"{out}.pid").read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    return state in ("gone", "Z") and not Path(f"{out}.outlived").exists()


def _request(tmp_path: Path, prompt: str = "fix it; $(touch /tmp/x) `id`") -> AgentRequest:
    return AgentRequest(prompt, tmp_path, {"PATH": "/usr/bin:/bin"}, tmp_path / "home")


def test_result_is_parsed_and_the_prompt_arrives_on_stdin(tmp_path: Path) -> None:
    """The prompt reaches stdin verbatim (not argv); garbage is skipped; figures are kept."""
    agent, out = _agent(tmp_path, "ok")
    sink = RecordingSink()
    result = agent.run(_request(tmp_path), events=sink, stop=None)
    seen = json.loads(out.read_text())
    assert seen["prompt"] == "fix it; $(touch /tmp/x) `id`"
    assert not any("fix it" in arg for arg in seen["argv"])
    assert (result.session_id, result.cost_usd, result.tool_calls) == ("fake-1", 0.25, 1)
    assert sink.of_kind("tool")[0][1] == "Bash make test" and len(sink.of_kind("log")) == 1


def test_process_lingering_after_its_result_is_killed_and_the_result_kept(
    tmp_path: Path,
) -> None:
    """A CLI still alive ``exit_grace_s`` after its result is killed; the run goes on."""
    agent, out = _agent(tmp_path, "linger")
    sink = RecordingSink()
    result = agent.run(_request(tmp_path), events=sink, stop=None)
    assert _killed_before_its_sleep_ended(out)
    assert result.lingered and result.result_text == "All done"
    assert any("killed" in message for _, message, _ in sink.of_kind("agent"))


def test_silent_process_is_killed_as_idle(tmp_path: Path) -> None:
    """No output for ``idle_timeout_s`` kills the agent: retryable ``idle_timeout``."""
    agent, out = _agent(tmp_path, "idle", idle_timeout_s=0.5)
    with pytest.raises(RetryableError) as caught:
        agent.run(_request(tmp_path), events=RecordingSink(), stop=None)
    assert caught.value.kind == "idle_timeout" and _killed_before_its_sleep_ended(out)


def test_process_exiting_without_result_is_a_crash(tmp_path: Path) -> None:
    """An agent that exits before its result event is retryable ``agent_crash``."""
    agent, _ = _agent(tmp_path, "crash")
    with pytest.raises(RetryableError) as caught:
        agent.run(_request(tmp_path), events=RecordingSink(), stop=None)
    assert caught.value.kind == "agent_crash" and "code 3" in str(caught.value)


def test_stop_token_ends_the_agent_as_cancelled(tmp_path: Path) -> None:
    """A stop requested by the worker kills the agent and raises CancelRequested."""
    agent, _ = _agent(tmp_path, "idle")
    stop = StopToken()
    stop.stop("cancel")
    with pytest.raises(CancelRequested, match="cancel"):
        agent.run(_request(tmp_path), events=RecordingSink(), stop=stop)


def test_missing_configured_key_is_fatal(tmp_path: Path) -> None:
    """A configured API key that is not set is a fatal error naming where it was looked for."""
    agent, _ = _agent(tmp_path, "ok", api_key=SecretRef(env="AFK_ABSENT_API_KEY"))
    with pytest.raises(FatalError, match="AFK_ABSENT_API_KEY"):
        agent.run(_request(tmp_path), events=RecordingSink(), stop=None)


def test_the_agents_key_is_masked_in_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool call that echoes the agent's key shows it masked in the timeline."""
    monkeypatch.setenv("AFK_TEST_MODEL_API_KEY", "sk-very-secret-value")
    agent, _ = _agent(tmp_path, "ok", api_key=SecretRef(env="AFK_TEST_MODEL_API_KEY"))
    sink = RecordingSink()
    agent.run(_request(tmp_path), events=sink, stop=None)
    assert sink.of_kind("tool")[0][1] == "Bash make test ***"
    assert "sk-very-secret-value" not in repr(sink.events)


def test_codex_preset_runs_and_parses_a_stand_in(tmp_path: Path) -> None:
    """The codex preset runs its argv with the prompt on stdin and reads ``exec --json``."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "codex" / "exec_success.jsonl"
    script, seen = tmp_path / "fake_codex.py", tmp_path / "seen.json"
    script.write_text(
        "import json, sys\n"
        f"json.dump([sys.argv[1:], sys.stdin.read()], open({str(seen)!r}, 'w'))\n"
        f"sys.stdout.write(open({str(fixture)!r}).read())\n"
    )
    preset = AgentPreset(name="codex", kind="codex", command=(sys.executable, str(script)))
    request = _request(tmp_path)
    result = build_agent(preset).run(request, events=RecordingSink(), stop=None)
    assert result.session_id and result.tool_calls == 4 and result.tokens_in == 600
    argv, stdin = json.loads(seen.read_text())
    assert argv == codex_argv(preset, request)[2:] and stdin == request.prompt


_CHATTY = """\
import os, sys
print("x" * 1000 + " " + os.environ["CHATTY_KEY"], flush=True)
print("", flush=True)
for n in range(int(sys.argv[1])):
    print(f"line {n}", flush=True)
print("key: " + "y" * 190 + os.environ["CHATTY_KEY"], flush=True)
"""


def _chatty(tmp_path: Path, lines: int) -> Agent:
    script = tmp_path / "chatty.py"
    script.write_text(_CHATTY)
    preset = AgentPreset(
        name="chatty",
        kind="command",
        command=(sys.executable, str(script), str(lines)),
        api_key=SecretRef(env="AFK_TEST_MODEL_API_KEY"),
        api_key_var="CHATTY_KEY",
    )
    return build_agent(preset)


def test_command_output_reaches_the_timeline_bounded_and_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Output lines become agent events: 200 at most, each cut short, key masked, rest counted."""
    monkeypatch.setenv("AFK_TEST_MODEL_API_KEY", "sk-very-secret-value")
    sink = RecordingSink()
    result = _chatty(tmp_path, 250).run(_request(tmp_path), events=sink, stop=None)
    messages = [message for _, message, _ in sink.of_kind("agent")]
    assert result.exit_code == 0 and len(messages) == 202
    assert messages[0].startswith("xxx") and len(messages[0]) <= 200
    assert messages[1:3] == ["line 0", "line 1"] and messages[199] == "line 198"
    assert messages[200] == "... 52 more output line(s) not shown"
    assert messages[201] == "chatty exited with code 0"
    assert "sk-very" not in repr(sink.events) and "sk-ve" not in repr(sink.events)


def test_short_command_output_is_forwarded_whole_and_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few lines are all forwarded in order, with no count event; a key near the cut too."""
    monkeypatch.setenv("AFK_TEST_MODEL_API_KEY", "sk-very-secret-value")
    sink = RecordingSink()
    _chatty(tmp_path, 2).run(_request(tmp_path), events=sink, stop=None)
    messages = [message for _, message, _ in sink.of_kind("agent")]
    assert messages[1:3] == ["line 0", "line 1"] and len(messages) == 5
    assert messages[3].startswith("key: yyy") and messages[3].endswith("y***")
    assert "sk-" not in repr(sink.events)
