"""The codex agent: recorded ``codex exec --json`` streams, usage, prices and budgets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pipeline.agents import AgentRequest, AgentResult, classify_result
from pipeline.agents.codex import CodexAgent, UsageLedger, usage_cost
from pipeline.agents.codex_stream import (
    MAX_ERRORS,
    MAX_OPEN_ITEMS,
    CodexStreamParser,
    CodexUsage,
    shell_command,
)
from pipeline.config.settings import AgentPreset
from pipeline.core.errors import EscalationError, FatalError, RetryableError
from pipeline.core.proc import CommandResult
from pipeline.testing.sinks import RecordingSink

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"
WORKDIR = Path("/tmp/afk-codex-fixtures/exec_success/project")  # where they were recorded
EXITED = CommandResult(returncode=0, output_tail="", duration_s=1.0)
PRICED = AgentPreset(
    name="codex",
    kind="codex",
    price_input_usd_per_mtok=2.0,
    price_cached_input_usd_per_mtok=0.5,
    price_output_usd_per_mtok=8.0,
)


def _parse(name: str) -> tuple[AgentResult, CodexStreamParser, RecordingSink]:
    sink = RecordingSink()
    parser = CodexStreamParser(sink, WORKDIR)
    for line in (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        parser.feed(line)
    result = parser.result(EXITED)
    assert result is not None and parser.done.is_set()
    return result, parser, sink


def _thread(name: str) -> str:
    first = (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()[0]
    return str(json.loads(first)["thread_id"])


def test_recorded_success_gives_thread_tools_message_and_usage() -> None:
    """The recorded test-first run: its thread, four tool calls, the message, the usage."""
    result, parser, sink = _parse("exec_success")
    assert result.session_id == _thread("exec_success")
    assert (result.subtype, result.is_error, result.num_turns) == ("success", False, 1)
    assert parser.usage == CodexUsage(input=600, cached=360, output=200)
    assert (result.tokens_in, result.tokens_out, result.cost_usd) == (600, 200, 0.0)
    assert [message for _, message, _ in sink.of_kind("tool")] == [
        "Patch add test_calc.py",
        "Shell python3 -m unittest -q",
        "Patch update calc.py",
        "Shell python3 -m unittest -q",
    ]
    assert result.tool_calls == 4 and result.blocked_reason is None
    assert result.result_text.startswith("Added a failing test for add()")
    agent = [message for _, message, _ in sink.of_kind("agent")]
    assert "codex: First a failing test." in agent


def test_recorded_resume_reports_the_sessions_running_total() -> None:
    """``exec resume`` keeps the thread id; its usage includes the first invocation's."""
    result, parser, _ = _parse("exec_resume")
    assert result.session_id == _thread("exec_success")
    assert parser.usage == CodexUsage(input=1200, cached=810, output=280)


def test_ledger_turns_running_totals_into_each_invocations_usage() -> None:
    """Recorded first run, then its resumption: the second counts only its own tokens."""
    ledger = UsageLedger()
    session = _thread("exec_success")
    first = ledger.spent(session, None, _parse("exec_success")[1].usage)
    second = ledger.spent(session, session, _parse("exec_resume")[1].usage)
    assert first == CodexUsage(600, 360, 200) and second == CodexUsage(600, 450, 80)


def test_a_rewritten_session_record_cannot_hide_spend() -> None:
    """A resumed total below the remembered one (the agent edited its record) counts in full."""
    ledger = UsageLedger()
    ledger.spent("s1", None, CodexUsage(5000, 0, 900))
    assert ledger.spent("s1", "s1", CodexUsage(300, 0, 40)) == CodexUsage(300, 0, 40)
    assert ledger.spent("s2", "unknown", CodexUsage(700, 0, 70)) == CodexUsage(700, 0, 70)


def test_ledger_forgets_the_oldest_sessions_beyond_its_limit() -> None:
    """The ledger stays bounded; a forgotten session's next total counts in full."""
    ledger = UsageLedger(limit=2)
    for session in ("a", "b", "c"):
        ledger.spent(session, None, CodexUsage(10, 0, 1))
    assert not ledger.known("a") and ledger.known("b") and ledger.known("c")
    assert ledger.spent("a", "a", CodexUsage(20, 0, 2)) == CodexUsage(20, 0, 2)


def test_blocked_message_gives_the_reason() -> None:
    """A ``BLOCKED:`` line in the recorded message is the blocked reason."""
    result, _, _ = _parse("exec_blocked")
    assert result.blocked_reason == "the issue does not say which endpoint to change"


@pytest.mark.parametrize(
    ("name", "error", "kind", "status"),
    [
        ("exec_rate_limited", RetryableError, "agent_rate_limited", 429),
        ("exec_overloaded", RetryableError, "agent_overloaded", None),
        ("exec_stream_failed", RetryableError, "network", None),
        ("exec_unauthorized", FatalError, "agent_auth", 401),
    ],
)
def test_recorded_failures_classify(
    name: str, error: type[Exception], kind: str, status: int | None
) -> None:
    """Each recorded API failure is a failed result that classifies as it should."""
    result, _, _ = _parse(name)
    assert result.is_error and result.subtype == "error_during_execution"
    assert result.api_error_status == status and result.errors
    with pytest.raises(error) as caught:
        classify_result("codex", result, None)
    assert getattr(caught.value, "kind", None) == kind


def test_a_failed_turn_counts_no_usage_and_keeps_the_sessions_total(tmp_path: Path) -> None:
    """No usage after ``turn.failed``: zero tokens, and the remembered total is kept."""
    failed, parser, _ = _parse("exec_stream_failed")
    assert parser.usage is None and (failed.tokens_in, failed.tokens_out) == (0, 0)
    ledger = UsageLedger()
    ledger.spent("s-1", None, CodexUsage(600, 0, 200))
    agent = CodexAgent(PRICED, ledger)
    request = AgentRequest("p", tmp_path, {}, tmp_path, "s-1")
    result = agent._account(
        dataclasses.replace(failed, session_id="s-1"), None, request, RecordingSink()
    )
    assert result.cost_usd == 0.0 and result.tokens_in == 0
    assert ledger.spent("s-1", "s-1", CodexUsage(900, 0, 260)) == CodexUsage(300, 0, 60)


def test_reconnect_notices_reach_the_timeline_as_log_events() -> None:
    """Codex's ``Reconnecting... 1/1`` notice is logged, not taken for the final error."""
    result, _, sink = _parse("exec_overloaded")
    assert any("Reconnecting... 1/1" in message for _, message, _ in sink.of_kind("log"))
    assert not any("Reconnecting" in error for error in result.errors)


def test_a_stream_without_turn_end_gives_no_result() -> None:
    """Cut before ``turn.completed``: no result (the caller calls it a crash)."""
    parser = CodexStreamParser(RecordingSink())
    lines = (FIXTURES / "exec_success.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines[:-1]:
        parser.feed(line)
    assert parser.result(EXITED) is None and not parser.done.is_set()


@pytest.mark.parametrize("thread", ["t" * 10_000, "--dangerously-bypass-approvals-and-sandbox"])
def test_a_thread_id_that_is_not_one_is_not_kept(thread: str) -> None:
    """A thread id too long for the history, or one ``codex exec resume`` would read as
    an option: the result has no session (a resume starts afresh) and the timeline says so."""
    sink = RecordingSink()
    parser = CodexStreamParser(sink)
    lines = (FIXTURES / "exec_success.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines:
        event = json.loads(line)
        if event.get("type") == "thread.started":
            event["thread_id"] = thread
        parser.feed(json.dumps(event))
    result = parser.result(EXITED)
    assert result is not None and result.session_id is None
    assert any("is not a session id" in message for _, message, _ in sink.events), sink.events


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("/bin/bash -lc 'python3 -m unittest -q'", "python3 -m unittest -q"),
        ("/bin/bash -lc 'echo '\"'\"'hi'\"'\"' && ls'", "echo 'hi' && ls"),
        ("/usr/bin/zsh -c true", "true"),
        ("make test", "make test"),
        ("/bin/bash -lc 'unterminated", "/bin/bash -lc 'unterminated"),
    ],
)
def test_shell_commands_are_shown_without_codexs_wrapper(command: str, shown: str) -> None:
    """``/bin/bash -lc '<cmd>'`` shows as ``<cmd>``; anything else as it came."""
    assert shell_command(command) == shown


def test_cost_is_tokens_times_prices() -> None:
    """Uncached input, cached input and output at their prices per million tokens."""
    usage = CodexUsage(input=1_000_000, cached=400_000, output=100_000)
    assert usage_cost(PRICED, usage) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)
    no_cached_price = AgentPreset(name="c", kind="codex", price_input_usd_per_mtok=2.0)
    assert usage_cost(no_cached_price, usage) == pytest.approx(2.0)
    assert usage_cost(AgentPreset(name="c", kind="codex"), usage) == 0.0


def _account(
    preset: AgentPreset, total: CodexUsage, tmp_path: Path, budget: float | None = None
) -> tuple[AgentResult, RecordingSink]:
    sink = RecordingSink()
    request = AgentRequest("p", tmp_path, {}, tmp_path, None, budget)
    result = AgentResult(session_id="s-1", subtype="success")
    agent = CodexAgent(preset, UsageLedger())
    return agent._account(result, total, request, sink), sink


def test_an_invocation_over_its_budget_escalates(tmp_path: Path) -> None:
    """Tokens times prices over the budget: ``error_max_budget_usd``, which escalates ``budget``."""
    result, _ = _account(PRICED, CodexUsage(400_000, 0, 20_000), tmp_path, budget=0.5)
    assert result.cost_usd == pytest.approx(0.96)
    assert (result.subtype, result.is_error) == ("error_max_budget_usd", True)
    with pytest.raises(EscalationError) as caught:
        classify_result("codex", result, None)
    assert caught.value.reason == "budget"
    within, _ = _account(PRICED, CodexUsage(100_000, 0, 1_000), tmp_path, budget=0.5)
    assert within.subtype == "success" and within.cost_usd == pytest.approx(0.208)


def test_the_presets_own_budget_applies_too(tmp_path: Path) -> None:
    """``agents.NAME.max_budget_usd`` bounds an invocation like the run's budget does."""
    preset = dataclasses.replace(PRICED, max_budget_usd=0.1)
    result, _ = _account(preset, CodexUsage(100_000, 0, 1_000), tmp_path)
    assert result.subtype == "error_max_budget_usd"


def test_a_budget_without_prices_is_reported_as_not_enforced(tmp_path: Path) -> None:
    """No prices: cost 0, the result stands, and an event says the budget is not enforced."""
    preset = AgentPreset(name="codex", kind="codex")
    result, sink = _account(preset, CodexUsage(9_000_000, 0, 900_000), tmp_path, budget=0.5)
    assert result.subtype == "success" and result.cost_usd == 0.0
    assert result.tokens_in == 9_000_000
    assert any("is not enforced" in message for _, message, _ in sink.of_kind("agent"))


def _tool_item(kind: str, item_id: str) -> str:
    item = {"id": item_id, "type": "command_execution", "command": "true", "status": "completed"}
    return json.dumps({"type": kind, "item": item})


def test_a_flood_of_tool_items_is_counted_once_each_in_bounded_memory() -> None:
    """Each tool item is counted once though reported started and completed; a stream
    of items that never complete (a hostile or broken agent) is remembered boundedly,
    and so are repeated failures."""
    parser = CodexStreamParser(RecordingSink(), WORKDIR)
    for number in range(3000):
        parser.feed(_tool_item("item.started", f"pair_{number}"))
        parser.feed(_tool_item("item.completed", f"pair_{number}"))
    for number in range(3 * MAX_OPEN_ITEMS):
        parser.feed(_tool_item("item.started", f"open_{number}"))
    for _ in range(5 * MAX_ERRORS):
        parser.feed(json.dumps({"type": "turn.failed", "error": {"message": "boom"}}))
    assert parser.tool_calls == 3000 + 3 * MAX_OPEN_ITEMS
    assert len(parser.open_items) == MAX_OPEN_ITEMS
    assert len(parser.errors) == MAX_ERRORS
