"""A run with more than ten thousand events: every review surface shows all of it, newest too."""

from __future__ import annotations

import io
import json
from pathlib import Path

from sqlalchemy import insert

from pipeline.cli.main import main
from pipeline.store import EnqueueOptions, Store
from pipeline.store.models import RunEventRow
from tests.integration.api_harness import running_api

EVENTS = 10_050


def long_run(store: Store) -> int:
    """A queued run of alpha with EVENTS tool events after its queued event, the last one marked."""
    run = store.enqueue("alpha", EnqueueOptions()).run
    now = store.now()
    rows = [
        {"run_id": run.id, "attempt": 1, "ts": now, "kind": "tool", "message": f"tool call {n}"}
        for n in range(EVENTS)
    ]
    rows[-1]["message"] = "the very last event"
    with store.engine.begin() as conn:
        conn.execute(insert(RunEventRow), rows)
    return run.id


def test_every_surface_shows_the_whole_timeline(database_url: str, tmp_path: Path) -> None:
    """Store, API, plain-text log, run page and `runs show --json` hold the newest event too."""
    with running_api(database_url, tmp_path) as api:
        run_id = long_run(api.store)
        events = api.store.run_events(run_id)
        assert len(events) == EVENTS + 1 and events[-1].message == "the very last event"
        body = api.client.get(f"/api/runs/{run_id}").json()
        assert len(body["events"]) == EVENTS + 1
        assert body["events"][-1]["message"] == "the very last event"
        assert api.client.get(f"/api/runs/{run_id}/log").text.endswith("the very last event\n")
        assert "the very last event" in api.client.get(f"/runs/{run_id}").text
        out = io.StringIO()
        argv = ["runs", "show", str(run_id), "--json", "--database-url", database_url]
        assert main(argv, out, io.StringIO()) == 0
        assert json.loads(out.getvalue())["events"][-1]["message"] == "the very last event"
