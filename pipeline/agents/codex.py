"""The OpenAI Codex CLI, headless: ``codex exec --json`` (checked against Codex CLI 0.169.0).

The command line is ``codex exec --json --dangerously-bypass-approvals-and-sandbox
--skip-git-repo-check -c shell_environment_policy.ignore_default_excludes=false
[--model M] [extra_args] [resume <thread_id>] -``: the prompt goes in on stdin
(``-``), and options placed before ``resume`` apply to the resumed session too
(its requests carry that model and sandbox mode). The stream is parsed by
``codex_stream.CodexStreamParser``.

Codex's own sandbox is off. The daemon runs the agent inside its own sandbox;
Codex's (Landlock and seccomp, or bubblewrap) nested inside that one would
fail or duplicate it, and its ``-s``/``--sandbox`` option is not accepted by
``exec resume``. ``--dangerously-bypass-approvals-and-sandbox`` turns off both
its sandbox and its approval prompts, on ``exec`` and ``exec resume`` alike;
Codex documents it for environments that are sandboxed from outside. Outside
the daemon's sandbox the agent has every right of the user the daemon runs as.

Codex reads ``$CODEX_HOME/config.toml`` (default ``$HOME/.codex``; ``HOME`` is
the per-repo home, so sessions stay with the repo and can be resumed). The
key reaches the CLI as ``api_key_var``: ``codex exec`` reads OpenAI's from
``CODEX_API_KEY``; a ``[model_providers.NAME]`` table there (``base_url``,
``env_key``, ``wire_api = "responses"``) reads the variable its ``env_key``
names. Codex hands the commands it runs its whole environment unless told
otherwise, so the ``-c`` above keeps variables named like ``*KEY*``,
``*SECRET*`` and ``*TOKEN*`` (the key among them) out of them.

Codex reports tokens, not cost. The cost of an invocation is its tokens times
the preset's prices per million tokens: ``(input - cached) *
price_input_usd_per_mtok + cached * price_cached_input_usd_per_mtok (default:
the input price) + output * price_output_usd_per_mtok``. Without prices the
cost is 0 and budgets cannot be enforced (an event says so when one is set).
Usage arrives only when the invocation ends, so a run can overrun its budget
by what one invocation spends; it then escalates ``budget``.

The usage Codex reports is the session's running total, a resumed session's
included. ``UsageLedger`` remembers the last total of each session this
process saw, and a result carries the difference: what this invocation used.
The session's record lives in ``$CODEX_HOME``, which the agent can write; a
total below the remembered one (a rewritten record) counts in full.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict

from pipeline.agents.base import (
    AgentRequest,
    AgentResult,
    effective_budget,
    outcome_words,
    result_data,
)
from pipeline.agents.codex_stream import CodexStreamParser, CodexUsage
from pipeline.agents.streams import RedactingSink, run_stream
from pipeline.config.settings import AgentPreset
from pipeline.core.events import EventSink
from pipeline.core.proc import StopToken

MAX_LEDGER_SESSIONS = 4096
_PER_TOKEN = 1_000_000


def codex_argv(preset: AgentPreset, request: AgentRequest) -> list[str]:
    """``codex exec --json`` without Codex's sandbox; the prompt comes from stdin."""
    argv = [*(preset.command or ("codex",)), "exec", "--json"]
    argv += ["--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check"]
    # Keep the API key (and any *KEY*, *SECRET*, *TOKEN* variable) out of the commands
    # Codex runs: by default it hands them its whole environment.
    argv += ["-c", "shell_environment_policy.ignore_default_excludes=false"]
    if preset.model:
        argv += ["--model", preset.model]
    argv += list(preset.extra_args)
    if request.resume_session:
        argv += ["resume", request.resume_session]
    return [*argv, "-"]


def priced(preset: AgentPreset) -> bool:
    """True when the preset names at least one token price."""
    prices = (
        preset.price_input_usd_per_mtok,
        preset.price_cached_input_usd_per_mtok,
        preset.price_output_usd_per_mtok,
    )
    return any(price is not None for price in prices)


def usage_cost(preset: AgentPreset, usage: CodexUsage) -> float:
    """The USD cost of ``usage`` at the preset's prices (0 without prices)."""
    price_in = preset.price_input_usd_per_mtok or 0.0
    price_cached = preset.price_cached_input_usd_per_mtok
    if price_cached is None:
        price_cached = price_in
    price_out = preset.price_output_usd_per_mtok or 0.0
    cached = min(usage.cached, usage.input)
    total = (usage.input - cached) * price_in + cached * price_cached + usage.output * price_out
    return total / _PER_TOKEN


class UsageLedger:
    """The last usage total of each Codex session seen by this process (bounded, thread-safe)."""

    def __init__(self, limit: int = MAX_LEDGER_SESSIONS) -> None:
        self.limit = limit
        self._totals: OrderedDict[str, CodexUsage] = OrderedDict()
        self._lock = threading.Lock()

    def known(self, session: str) -> bool:
        with self._lock:
            return session in self._totals

    def spent(self, session: str | None, resumed: str | None, total: CodexUsage) -> CodexUsage:
        """What one invocation used of ``total``; ``total`` is remembered for ``session``."""
        with self._lock:
            earlier = self._totals.get(resumed) if resumed else None
            if session:
                self._totals[session] = total
                self._totals.move_to_end(session)
                while len(self._totals) > self.limit:
                    self._totals.popitem(last=False)
        if earlier is None or not total.covers(earlier):
            return total
        return total.minus(earlier)


LEDGER = UsageLedger()


class CodexAgent:
    """The ``codex`` preset."""

    def __init__(self, preset: AgentPreset, ledger: UsageLedger = LEDGER) -> None:
        self.preset = preset
        self.name = preset.name
        self.ledger = ledger

    def run(
        self, request: AgentRequest, *, events: EventSink, stop: StopToken | None
    ) -> AgentResult:
        events = RedactingSink(events, self.preset)
        resumed = request.resume_session
        if resumed and not self.ledger.known(resumed):
            events(
                "agent",
                f"codex: no earlier usage known for session {resumed}; "
                "its whole reported usage counts for this invocation",
            )
        result, parser = run_stream(
            self.preset,
            codex_argv(self.preset, request),
            request,
            lambda timeline: CodexStreamParser(timeline, request.workdir),
            events=events,
            stop=stop,
        )
        result = self._account(result, parser.usage, request, events)
        events(
            "agent",
            f"codex finished: {outcome_words(result)}, {result.tokens_in} in / {result.tokens_out} "
            f"out tokens, ${result.cost_usd:.4f}",
            result_data(result),
        )
        return result

    def _account(
        self,
        result: AgentResult,
        total: CodexUsage | None,
        request: AgentRequest,
        events: EventSink,
    ) -> AgentResult:
        """The result with this invocation's tokens and cost; over budget, an error.

        A failed turn reports no usage: it counts as none, and the session's
        remembered total stays, so a resumption counts what it used.
        """
        spent = (
            CodexUsage()
            if total is None
            else self.ledger.spent(result.session_id, request.resume_session, total)
        )
        cost = usage_cost(self.preset, spent)
        result = dataclasses.replace(
            result, tokens_in=spent.input, tokens_out=spent.output, cost_usd=cost
        )
        budget = effective_budget(self.preset.max_budget_usd, request.max_budget_usd)
        if budget is None or cost <= budget:
            if budget is not None and not priced(self.preset):
                events(
                    "agent",
                    f"codex reports no cost and agents.{self.name} sets no "
                    f"price_*_usd_per_mtok: the budget of ${budget:.4f} is not enforced",
                )
            return result
        return over_budget(result, spent, budget)


def over_budget(result: AgentResult, spent: CodexUsage, budget: float) -> AgentResult:
    """``result`` as the failure a spend over ``budget`` is (it escalates ``budget``)."""
    return dataclasses.replace(
        result,
        subtype="error_max_budget_usd",
        is_error=True,
        errors=(
            *result.errors,
            f"{spent.input} in / {spent.output} out tokens cost ${result.cost_usd:.4f}, "
            f"over the budget of ${budget:.4f}",
        ),
    )
