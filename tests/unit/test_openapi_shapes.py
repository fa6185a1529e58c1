"""The OpenAPI description follows the handlers: their routes and their JSON shapes."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import get_type_hints

import pytest
from starlette.routing import Route

from pipeline.config.settings import Settings
from pipeline.http.app import routes
from pipeline.http.common import event_json, repo_json, run_json
from pipeline.http.openapi import openapi_description
from pipeline.http.shapes import EventJson, RepoJson, RunJson, schema_of, type_schema
from pipeline.store import Repo, Run, RunEvent

API_PREFIXES = ("/api/", "/webhooks/", "/health", "/metrics")
WHEN = datetime(2026, 1, 1, 12, 0, 0)


def _api_routes() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for route in routes(Settings(database_url="sqlite://", volume=Path("."))):
        if isinstance(route, Route) and route.path.startswith(API_PREFIXES):
            path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
            found[path] = {m.lower() for m in (route.methods or ()) if m != "HEAD"}
    return found


def test_every_api_route_and_method_is_described() -> None:
    """Each JSON route the app serves, /webhooks/{tracker} included, is in the description."""
    paths = openapi_description()["paths"]
    for path, methods in _api_routes().items():
        assert path in paths, f"{path} is served but not described"
        assert set(paths[path]) == methods, path
    assert set(paths) == set(_api_routes())


def _keys(shape: type) -> set[str]:
    return set(get_type_hints(shape))


def test_run_json_has_exactly_the_described_fields() -> None:
    """A run's JSON carries the fields of RunJson, no more and no fewer (a new Run field fails)."""
    run = Run(1, 2, "issue", "queued", 0, 0, 0, 0, 3, WHEN, WHEN, WHEN, repo_name="alpha")
    assert set(run_json(run)) == _keys(RunJson)


def test_event_and_repo_json_have_the_described_fields() -> None:
    """Events and repos answer with the fields of EventJson and RepoJson."""
    event = RunEvent(1, 2, 1, WHEN, "state", "queued", {"state": "queued"})
    assert set(event_json(event)) == _keys(EventJson)
    repo = Repo(1, "alpha", "gh", "org/alpha", "main", "active")
    assert set(repo_json(repo, 0)) == _keys(RepoJson) - RepoJson.__optional_keys__


def test_components_are_generated_from_the_shapes() -> None:
    """The Run schema in the document is the one generated from RunJson."""
    schemas = openapi_description()["components"]["schemas"]
    generated = schema_of(RunJson)
    assert schemas["Run"]["required"] == generated["required"]
    assert set(schemas["Run"]["properties"]) == set(generated["properties"])
    assert schemas["Repo"]["properties"]["changed"] == {"type": "boolean"}
    assert "changed" not in schemas["Repo"]["required"]
    assert schemas["Run"]["properties"]["finished_at"] == {
        "type": "string",
        "format": "date-time",
        "nullable": True,
    }


def test_an_undescribable_type_is_refused() -> None:
    """A shape field of a type the generator cannot describe is an error, not a guess."""
    with pytest.raises(TypeError, match="no schema"):
        type_schema(set[int])
    with pytest.raises(TypeError, match="unions"):
        type_schema(int | str)


def test_no_described_query_parameter_admits_a_control_character() -> None:
    """The server refuses control characters in every query parameter, so the description
    must too: a value it calls valid is one the server takes (the fuzz test sends them)."""
    patterns = {
        (path, param["name"]): param["schema"]["pattern"]
        for path, item in openapi_description()["paths"].items()
        for op in item.values()
        for param in op.get("parameters", [])
        if param["in"] == "query" and "pattern" in param.get("schema", {})
    }
    assert ("/api/runs", "text") in patterns
    for where, pattern in patterns.items():
        assert not re.search(pattern, "a\nb"), where
