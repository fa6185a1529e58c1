"""`pipeline escalations`: what waits for a human, with its next step, and `ack`.

Through the real entry point (``python -m pipeline``) on a real store, SQLite
and PostgreSQL alike.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.store import Store

from .test_cli_cockpit import pipeline
from .test_cli_words import local_alpha_config

UNFREEZE_BETA = 'pipeline repos unfreeze beta --note "what you found and fixed"'


@pytest.fixture
def world(
    store: Store, database_url: str, tmp_path: Path
) -> Iterator[tuple[Path, Store, dict[str, str]]]:
    """Three open escalations: a blocked run's (1), a budget's (2), a frozen repo's (3)."""
    store.ensure_repo("alpha", tracker="local", slug="org/alpha")
    store.ensure_repo("beta", tracker="local", slug="org/beta")
    run = store.enqueue("alpha").run
    store.add_escalation("alpha", "blocked", "The agent asks: which colour?", run.id)
    store.add_escalation("alpha", "daily_budget", "alpha spent $5.00 today, over its budget")
    store.freeze_repo("beta", "deploy broken", "carol", escalation="frozen by carol: deploy")
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TZ": "UTC"}
    env.update(LOGNAME="alice", USER="alice")
    env.pop("PIPELINE_DATABASE_URL", None)
    yield local_alpha_config(tmp_path, database_url), store, env


def run(world: tuple[Path, Store, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    config, _, env = world
    return pipeline(config, env, *args)


def listed(world: tuple[Path, Store, dict[str, str]], *args: str) -> list[dict[str, object]]:
    proc = run(world, "escalations", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    shown: list[dict[str, object]] = json.loads(proc.stdout)
    return shown


def test_lists_what_waits_with_the_next_step(world: tuple[Path, Store, dict[str, str]]) -> None:
    proc = run(world, "escalations")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["ID", "REPO", "RUN", "REASON", "AGE", "WHAT"]
    assert lines[1].split()[:4] == ["1", "alpha", "1", "blocked"]
    assert lines[2].split()[:4] == ["2", "alpha", "-", "daily_budget"]
    assert lines[3].split()[:4] == ["3", "beta", "-", "frozen"]
    assert "3 waiting for a human; next steps:" in proc.stdout
    assert "  1: pipeline runs retry 1\n" in proc.stdout
    assert '  2: fix the cause its detail names, then pipeline escalations ack 2 --note "' in (
        proc.stdout
    )
    assert "\n     alpha spent $5.00 today, over its budget\n" in proc.stdout  # no run to show
    assert f"  3: {UNFREEZE_BETA}\n" in proc.stdout
    steps = {e["id"]: e["next_step"] for e in listed(world)}
    assert steps[1] == "pipeline runs retry 1" and steps[3] == UNFREEZE_BETA


def test_ack_records_who_and_leaves_the_list(world: tuple[Path, Store, dict[str, str]]) -> None:
    proc = run(world, "escalations", "ack", "1", "2", "--note", "answered on the issue")
    assert proc.returncode == 0, proc.stderr
    assert "escalation 1 (alpha, blocked) acknowledged" in proc.stdout
    assert "escalation 2 (alpha, daily_budget) acknowledged" in proc.stdout
    assert [e["id"] for e in listed(world)] == [3]
    every = {e["id"]: e for e in listed(world, "--all")}
    assert every[1]["acknowledged_by"] == "alice: answered on the issue"
    assert every[1]["acknowledged_at"] and every[1]["next_step"] is None
    assert every[3]["acknowledged_by"] is None
    table = run(world, "escalations", "--all").stdout
    assert "ACKNOWLEDGED" in table and "alice: answered on the issue at " in table
    timeline = run(world, "runs", "show", "1").stdout
    assert "escalation 1 (blocked) acknowledged by alice: answered on the issue" in timeline


def test_a_frozen_repos_escalation_is_answered_by_its_unfreeze(
    world: tuple[Path, Store, dict[str, str]],
) -> None:
    proc = run(world, "escalations", "ack", "2", "3", "--note", "done")
    assert proc.returncode == 2
    assert "escalation 3: repo beta is still frozen; unfreeze it instead" in proc.stderr
    assert UNFREEZE_BETA in proc.stderr and "nothing was acknowledged" in proc.stderr
    assert [e["id"] for e in listed(world)] == [1, 2, 3]  # all or none: 2 is still open
    assert run(world, "repos", "unfreeze", "beta", "--note", "deploy fixed").returncode == 0
    assert [e["id"] for e in listed(world)] == [1, 2]
    assert run(world, "escalations", "ack", "1", "2", "--note", "ok").returncode == 0
    proc = run(world, "escalations")
    assert proc.returncode == 0 and proc.stdout == "no escalation waits for a human\n"


@pytest.mark.parametrize(
    ("ids", "problem"),
    [
        (("99",), "escalation 99: no such escalation"),
        (("1", "99", "98"), "escalation 99: no such escalation\nescalation 98: no such"),
        (("abc",), "argument ID: must be an id from 1 to 2147483647, got 'abc'"),
        (("0",), "must be an id from 1 to"),
        (("99999999999",), "must be an id from 1 to"),
    ],
)
def test_bad_ids_exit_2_and_acknowledge_nothing(
    world: tuple[Path, Store, dict[str, str]], ids: tuple[str, ...], problem: str
) -> None:
    proc = run(world, "escalations", "ack", *ids, "--note", "x")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert problem in proc.stderr and "Traceback" not in proc.stderr
    assert [e["id"] for e in listed(world)] == [1, 2, 3]


def test_acknowledged_twice_names_who_did_it(world: tuple[Path, Store, dict[str, str]]) -> None:
    assert run(world, "escalations", "ack", "2", "--note", "raised the budget").returncode == 0
    proc = run(world, "escalations", "ack", "2", "--note", "again")
    assert proc.returncode == 2
    assert "escalation 2: already acknowledged by alice: raised the budget at " in proc.stderr
    proc = run(world, "escalations", "ack", "1", "--note", "  ")
    assert proc.returncode == 2 and "--note: say what you did" in proc.stderr


def test_a_note_too_long_for_its_record_is_refused_with_the_limit(
    world: tuple[Path, Store, dict[str, str]],
) -> None:
    """`acknowledged_by` holds "alice: NOTE" in 200 characters: a longer note (an unfreeze's
    too) is refused naming the limit, nothing recorded; one that fits is kept whole."""
    note = "checked the deploy, the token and the budget; " * 10
    for args in (("repos", "unfreeze", "beta"), ("escalations", "ack", "1")):
        proc = run(world, *args, "--note", note)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"--note: at most 193 characters, got {len(note.strip())}" in proc.stderr
    assert [e["id"] for e in listed(world)] == [1, 2, 3]
    record = world[1].get_repo("beta")
    assert record is not None and record.frozen
    fits = "x" * 193
    assert run(world, "escalations", "ack", "1", "--note", fits).returncode == 0
    assert run(world, "repos", "unfreeze", "beta", "--note", fits).returncode == 0
    every = {e["id"]: str(e["acknowledged_by"]) for e in listed(world, "--all")}
    assert every[1] == every[3] == f"alice: {fits}"


def test_options_before_ack_are_kept(world: tuple[Path, Store, dict[str, str]]) -> None:
    """`escalations --json ack` prints JSON and `--database-url` before `ack` is the one
    used: the subcommand's own defaults used to reset them silently."""
    proc = run(world, "escalations", "--json", "ack", "2", "--note", "raised the budget")
    assert proc.returncode == 0, proc.stderr
    assert [e["id"] for e in json.loads(proc.stdout)] == [2]
    elsewhere = f"sqlite:///{world[0].parent / 'elsewhere.db'}"
    proc = run(world, "escalations", "--database-url", elsewhere, "ack", "1", "--note", "x")
    assert proc.returncode == 2 and "elsewhere.db" in proc.stderr, proc.stdout + proc.stderr
    proc = run(world, "escalations", "--all", "ack", "1", "--note", "x")
    assert proc.returncode == 2 and "--all lists acknowledged escalations" in proc.stderr
    assert [e["id"] for e in listed(world)] == [1, 3]


def test_help_shows_the_list_needs_no_subcommand(
    world: tuple[Path, Store, dict[str, str]],
) -> None:
    proc = run(world, "escalations", "--help")
    assert proc.returncode == 0, proc.stderr
    usage = proc.stdout.split("\n\n")[0].splitlines()
    assert usage[0].startswith("usage: pipeline escalations [-h]")
    assert usage[0].endswith("[--all] [--json]")  # the listing alone is a whole command
    assert usage[1].split() == [
        "pipeline",
        "escalations",
        "ack",
        "ID",
        "[ID",
        "...]",
        "--note",
        "NOTE",
    ]
    # The usage is written by hand: every option the listing takes must be in it.
    listed = re.findall(r"^  (-[-\w]+(?: [A-Z_]+)?)", proc.stdout.split("options:")[1], re.M)
    assert len(listed) >= 5, proc.stdout
    assert [o for o in listed if f"[{o}]" not in usage[0]] == []
