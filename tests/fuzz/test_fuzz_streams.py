"""Fuzzed agent stream lines: the Claude and Codex parsers never raise, whatever arrives."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.agents.claude import ClaudeStreamParser
from pipeline.agents.codex import CodexStreamParser
from pipeline.core.proc import CommandResult

# More examples for the long campaign (scripts/reliability --long).
EXAMPLES = 250 * (10 if os.environ.get("PIPELINE_RELIABILITY_LONG") == "1" else 1)

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
CLAUDE_TYPES = st.sampled_from(["system", "assistant", "user", "result", "stream_event", "x"])
CODEX_TYPES = st.sampled_from(
    [
        "thread.started",
        "turn.started",
        "turn.completed",
        "turn.failed",
        "item.started",
        "item.updated",
        "item.completed",
        "error",
        "x",
    ]
)
KEYS = st.sampled_from(
    [
        "type",
        "subtype",
        "session_id",
        "message",
        "content",
        "result",
        "usage",
        "is_error",
        "num_turns",
        "total_cost_usd",
        "api_error_status",
        "errors",
        "permission_denials",
        "item",
        "thread_id",
        "error",
        "text",
        "command",
        "status",
        "input_tokens",
        "output_tokens",
        "name",
        "input",
        "id",
        "changes",
        "path",
    ]
)


def _event(types: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects shaped like stream events, with hostile values where fields belong."""
    nested = st.recursive(
        SCALARS | st.dictionaries(KEYS, SCALARS, max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=5),
        max_leaves=15,
    )
    return st.builds(
        lambda t, rest: {**rest, "type": t}, types, st.dictionaries(KEYS, nested, max_size=6)
    )


def _lines(types: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    line = st.one_of(
        _event(types).map(json.dumps),
        JSON.map(json.dumps),
        st.text(max_size=200),
        st.binary(max_size=100).map(lambda b: b.decode("utf-8", errors="replace")),
    )
    return st.lists(line, max_size=12)


def _sink(events: list[str]) -> Any:
    def sink(kind: str, message: str, data: Mapping[str, object] | None = None) -> None:
        assert isinstance(message, str)
        events.append(message)

    return sink


def _finish(parser: Any, returncode: int) -> None:
    result = parser.result(CommandResult(returncode=returncode, output_tail="", duration_s=0.1))
    if result is not None:
        assert isinstance(result.result_text, str)
        assert isinstance(result.tokens_in, int) and isinstance(result.cost_usd, float)


@settings(max_examples=EXAMPLES, deadline=None)
@given(lines=_lines(CLAUDE_TYPES), returncode=st.sampled_from([0, 1, -9]))
def test_claude_parser_never_raises(lines: list[str], returncode: int) -> None:
    """Any sequence of lines, JSON or not, is parsed or skipped; the result never raises."""
    events: list[str] = []
    parser = ClaudeStreamParser(events=_sink(events))
    for line in lines:
        parser.feed(line)
    _finish(parser, returncode)


@settings(max_examples=EXAMPLES, deadline=None)
@given(lines=_lines(CODEX_TYPES), returncode=st.sampled_from([0, 1, -9]))
def test_codex_parser_never_raises(lines: list[str], returncode: int) -> None:
    """Any sequence of lines, JSON or not, is parsed or skipped; the result never raises."""
    events: list[str] = []
    parser = CodexStreamParser(events=_sink(events))
    for line in lines:
        parser.feed(line)
    _finish(parser, returncode)
