"""`pipeline runs export`: a window of runs for audits, streamed, secrets masked."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert

from pipeline.cli import retention as cli_retention
from pipeline.cli.main import main
from pipeline.store import Store
from pipeline.store import retention as store_retention
from pipeline.store.models import RunEventRow, RunRow
from pipeline.testing.configs import write_config

SECRET = "audit-secret-0123456789abcdef"
AGES_H = (240, 48, 30, 1)  # the seeded runs' ages in hours, ids 1..4


@pytest.fixture
def store(store: Store) -> Store:
    """The shared store with alpha enrolled and four runs of 3 events each, one leaking a secret."""
    store.ensure_repo("alpha")
    now = store.now()
    repo_id = store.list_repos()[0].id
    with store.engine.begin() as conn:
        for run_id, hours in enumerate(AGES_H, start=1):
            created = now - timedelta(hours=hours)
            conn.execute(
                insert(RunRow).values(
                    id=run_id,
                    repo_id=repo_id,
                    state="failed",
                    run_after=created,
                    created_at=created,
                    updated_at=created,
                    finished_at=created,
                    error=f"push refused for token {SECRET}",
                )
            )
            for i in range(3):
                conn.execute(
                    insert(RunEventRow).values(
                        run_id=run_id,
                        ts=created,
                        kind="agent",
                        message=f"step {i} with {SECRET}",
                        data_json=json.dumps({"token": SECRET}),
                    )
                )
    return store


def export(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str, str]:
    """`pipeline runs export ARGS` with a config whose tracker token is SECRET."""
    monkeypatch.setenv("AUDIT_TOKEN", SECRET)
    config = write_config(
        tmp_path / "pipeline.toml",
        {"trackers": {"gh": {"kind": "github", "token_env": "AUDIT_TOKEN"}}},
    )
    out, err = io.StringIO(), io.StringIO()
    argv = ["runs", "export", "--config", str(config), "--database-url", store.url, *args]
    return main(argv, out, err), out.getvalue(), err.getvalue()


def test_jsonl_holds_each_run_with_its_events_in_the_window_masked(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JSON lines, oldest run first, each with all its events; pages of 2 lose nothing."""
    monkeypatch.setattr(store_retention, "EXPORT_PAGE", 2)
    monkeypatch.setattr(cli_retention, "EVENTS_PAGE", 2)
    code, out, _ = export(store, tmp_path, monkeypatch, "--since", "3d", "--until", "2h")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["run"]["id"] for line in lines] == [2, 3]
    assert [[e["message"] for e in line["events"]] for line in lines] == [
        ["step 0 with ***", "step 1 with ***", "step 2 with ***"]
    ] * 2
    assert lines[0]["run"]["created_at"].endswith("+00:00")
    assert lines[0]["events"][0]["data"] == {"token": "***"}
    assert SECRET not in out and lines[0]["run"]["error"] == "push refused for token ***"


def test_csv_is_one_row_per_run_masked(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CSV: a header, then one row per run created since --since, secrets masked."""
    code, out, _ = export(store, tmp_path, monkeypatch, "--since", "3d", "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [row["id"] for row in rows] == ["2", "3", "4"]
    assert {row["state"] for row in rows} == {"failed"} and rows[0]["repo_name"] == "alpha"
    assert SECRET not in out and rows[0]["error"] == "push refused for token ***"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--since", "yesterday"), "--since: expected an ISO time like 2026-01-31T08:00:00Z"),
        (("--since", "2d", "--until", "soon"), "--until: expected an ISO time like"),
        (("--since", "2d", "--until", "soon"), "an age like 30m, 24h, 7d or 2w, or today"),
        (("--since", "1d", "--until", "2d"), "--until 2d: must be later than --since 1d"),
    ],
)
def test_bad_window_exits_2_naming_the_valid_formats(
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    named: str,
) -> None:
    """A --since or --until that is neither an ISO time nor an age exits 2 and prints nothing."""
    code, out, err = export(store, tmp_path, monkeypatch, *args)
    assert (code, out) == (2, "") and named in err
