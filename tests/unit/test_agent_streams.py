"""Stream parsing: Claude ``stream-json`` lines (Codex: ``test_codex_agent.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.agents.claude import ClaudeStreamParser
from pipeline.agents.codex import CodexStreamParser
from pipeline.agents.streams import MAX_GARBAGE_EVENTS, RedactingSink
from pipeline.config.settings import AgentPreset, SecretRef
from pipeline.core.masking import register_secret
from pipeline.core.proc import CommandResult
from pipeline.testing.sinks import RecordingSink

EXITED = CommandResult(returncode=0, output_tail="", duration_s=1.0)

CLAUDE_LINES = [
    {"type": "system", "subtype": "init", "session_id": "sess-1", "tools": ["Bash"]},
    {
        "type": "assistant",
        "session_id": "sess-1",
        "message": {
            "content": [
                {"type": "text", "text": "Writing the test first."},
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "Write",
                    "input": {"file_path": "/wt/test_a.py", "content": "x" * 5000},
                },
                {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "pytest"}},
            ]
        },
    },
    {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1"}]}},
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "num_turns": 3,
        "session_id": "sess-1",
        "total_cost_usd": 0.0123,
        "result": "Done.\nBLOCKED: needs a database",
        "usage": {
            "input_tokens": 100,
            "cache_creation_input_tokens": 20,
            "cache_read_input_tokens": 5,
            "output_tokens": 50,
        },
        "permission_denials": [
            {"tool_name": "Bash", "tool_use_id": "t9", "tool_input": {"command": "rm -rf /"}}
        ],
        "api_error_status": None,
    },
]


def _feed(parser: ClaudeStreamParser | CodexStreamParser, lines: list[str]) -> None:
    for line in lines:
        parser.feed(line)


def test_claude_stream_gives_session_tools_usage_and_denials() -> None:
    """Each field of the final result and each tool call is recorded."""
    sink = RecordingSink()
    parser = ClaudeStreamParser(sink, Path("/wt"))
    _feed(parser, [json.dumps(line) for line in CLAUDE_LINES])
    assert parser.done.is_set()
    result = parser.result(EXITED)
    assert result is not None
    assert (result.session_id, result.subtype, result.num_turns) == ("sess-1", "success", 3)
    assert (result.tokens_in, result.tokens_out, result.cost_usd) == (125, 50, 0.0123)
    assert result.tool_calls == 2 and result.blocked_reason == "needs a database"
    assert result.permission_denials == ("Bash rm -rf /",)
    assert [message for _, message, _ in sink.of_kind("tool")] == ["Write test_a.py", "Bash pytest"]
    assert any("permission denied" in message for _, message, _ in sink.events)


def test_claude_garbage_lines_are_logged_boundedly_and_skipped() -> None:
    """Non-JSON lines never stop parsing; only the first few are logged, each bounded."""
    sink = RecordingSink()
    parser = ClaudeStreamParser(sink)
    _feed(parser, ["<html>oops " + "y" * 1000, "[1, 2]", ""] * 30)
    _feed(parser, [json.dumps(CLAUDE_LINES[0]), json.dumps(CLAUDE_LINES[-1])])
    logs = sink.of_kind("log")
    assert len(logs) == MAX_GARBAGE_EVENTS and all(len(m) < 300 for _, m, _ in logs)
    result = parser.result(EXITED)
    assert result is not None and result.session_id == "sess-1"


def test_claude_absurd_usage_reads_as_zero() -> None:
    """``output_tokens: 1e308`` or a negative cost is a broken report, stored as 0, no traceback."""
    final = dict(CLAUDE_LINES[-1])
    final["usage"] = {"input_tokens": -5, "output_tokens": 1e308}
    final["total_cost_usd"] = float("inf")
    parser = ClaudeStreamParser(RecordingSink())
    _feed(parser, [json.dumps(CLAUDE_LINES[0]), json.dumps(final)])
    result = parser.result(EXITED)
    assert result is not None
    assert (result.tokens_in, result.tokens_out, result.cost_usd) == (0, 0, 0.0)


def test_claude_without_result_gives_none() -> None:
    """A stream cut before its result yields no result (the caller calls it a crash)."""
    parser = ClaudeStreamParser(RecordingSink())
    _feed(parser, [json.dumps(CLAUDE_LINES[0])])
    assert parser.result(EXITED) is None and not parser.done.is_set()


def test_redacting_sink_masks_a_key_cut_short_by_a_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key whole or cut off at a summary's end never reaches the timeline, even in part."""
    monkeypatch.setenv("AFK_TEST_MODEL_API_KEY", "sk-very-secret-value")
    preset = AgentPreset(name="c", kind="claude", api_key=SecretRef(env="AFK_TEST_MODEL_API_KEY"))
    sink = RecordingSink()
    redacting = RedactingSink(sink, preset)
    redacting("tool", "Bash echo sk-very-secret-value")
    redacting("tool", "Bash " + "y" * 189 + "sk-very-…")
    redacting("tool", "Bash echo sk-other…")
    assert [message for _, message, _ in sink.events] == [
        "Bash echo ***",
        "Bash " + "y" * 189 + "***…",
        "Bash echo sk-other…",
    ]


def test_redacting_sink_masks_every_registered_secret_in_message_and_data() -> None:
    """Not only the agent's key: a push token the agent found is masked, in its data too."""
    register_secret("SNTL-stream-push-token-3d")
    sink = RecordingSink()
    preset = AgentPreset(name="c", kind="command", command=("true",))
    RedactingSink(sink, preset)(
        "tool",
        "cat token: SNTL-stream-push-token-3d",
        {"input": {"command": "echo SNTL-stream-push-token-3d"}},
    )
    assert sink.events == [("tool", "cat token: ***", {"input": {"command": "echo ***"}})]


def test_a_key_in_a_skipped_non_json_line_is_masked_before_the_summary_cuts_it() -> None:
    """The summary of a skipped line cuts it with a ``…``: masked after the cut, the first
    characters of a key just before the cut would show; masked first, none do."""
    key = "sntl-agent-key-7Qx9vLp2"
    register_secret(key)
    for shown in range(1, 9):
        sink = RecordingSink()
        parser = ClaudeStreamParser(RedactingSink(sink, AgentPreset(name="c", kind="claude")))
        parser.feed("y" * (199 - shown) + key + " and on")
        [(_, message, _)] = sink.events
        assert key[:shown] + "…" not in message, shown
