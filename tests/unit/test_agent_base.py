"""The agent protocol's pure parts: environment, BLOCKED, classification, argv, presets."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.agents import AgentRequest, AgentResult, build_agent, classify_result
from pipeline.agents.base import blocked_reason, check_process, outcome_words, summarise
from pipeline.agents.claude import ClaudeAgent, claude_argv, tool_summary
from pipeline.agents.codex import CodexAgent, codex_argv
from pipeline.agents.command import CommandAgent, command_argv
from pipeline.agents.streams import agent_env
from pipeline.config.settings import AgentPreset, SecretRef
from pipeline.core.errors import (
    CancelRequested,
    ConfigError,
    EscalationError,
    FatalError,
    RetryableError,
)
from pipeline.core.masking import register_secret
from pipeline.core.proc import CommandResult

SECRET_ENV = {
    "GITHUB_TOKEN": "s1",
    "GH_TOKEN": "s2",
    "GITLAB_URL_TOKENISH": "s3",
    "GITEA_ADMIN": "s4",
    "PIPELINE_WEBHOOK_SECRET": "s5",
    "HOOK_SECRET": "s6",
    "DB_PASSWORD": "s7",
    "SSH_AUTH_SOCK": "/tmp/agent.sock",
    "GIT_ASKPASS": "/bin/askpass",
    "OPENAI_API_KEY": "s8",
    "ANTHROPIC_API_KEY": "s9",
    "FORGE_TOKEN": "s10",
}


def _request(tmp_path: Path, **kwargs: object) -> AgentRequest:
    return AgentRequest("do it", tmp_path, {}, tmp_path / "home", **kwargs)  # type: ignore[arg-type]


def test_agent_env_passes_only_the_list_and_the_agent_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forge tokens, daemon secrets and agent sockets stay out; PATH and the own key go in."""
    monkeypatch.setenv("AFK_TEST_KEY", "mine")
    host = {**SECRET_ENV, "PATH": "/usr/bin", "LANG": "C.UTF-8", "RANDOM_TOOL_SETTING": "x"}
    preset = AgentPreset(
        name="c",
        kind="claude",
        api_key=SecretRef(env="AFK_TEST_KEY"),
        env=(("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),),
    )
    env = agent_env(preset, AgentRequest("p", tmp_path, host, tmp_path / "home"))
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "HOME": str(tmp_path / "home"),
        "TMPDIR": "/tmp",
        "ANTHROPIC_API_KEY": "mine",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def test_agent_env_has_a_path_when_the_host_has_none(tmp_path: Path) -> None:
    """A daemon started without PATH still gives its agent a working one."""
    env = agent_env(
        AgentPreset(name="c", kind="command", command=("x",)),
        AgentRequest("p", tmp_path, {}, tmp_path / "home"),
    )
    assert "/usr/bin" in env["PATH"].split(":")


def test_agent_env_passes_the_presets_extra_variables(tmp_path: Path) -> None:
    """``pass_env`` adds named host variables, and only those."""
    preset = AgentPreset(name="c", kind="command", command=("x",), pass_env=("TOOL_HOME",))
    host = {"TOOL_HOME": "/opt/tool", "OTHER": "no"}
    env = agent_env(preset, AgentRequest("p", tmp_path, host, tmp_path / "home"))
    assert env["TOOL_HOME"] == "/opt/tool" and "OTHER" not in env


def test_blocked_reason_takes_the_last_blocked_line() -> None:
    """A ``BLOCKED:`` line anywhere in the text gives the reason; none gives None."""
    text = "thinking\nBLOCKED: no access to the API  \nbye"
    assert blocked_reason(text) == "no access to the API"
    assert blocked_reason("all good, nothing BLOCKED here") is None


def test_a_blocked_line_without_a_reason_gives_none_and_never_borrows_the_next_line() -> None:
    """``BLOCKED:`` alone is no reason: neither blanks nor the line after it become one."""
    assert blocked_reason("BLOCKED:   \nrm -rf everything") is None
    assert blocked_reason("BLOCKED: real reason\nBLOCKED:\t \n") == "real reason"


def test_summarise_bounds_and_flattens() -> None:
    """Summaries are one line of bounded length."""
    text = summarise("a\nb " + "x" * 500)
    assert "\n" not in text and len(text) == 200 and text.startswith("a b ")


@pytest.mark.parametrize(
    ("status", "kind"),
    [(529, "agent_overloaded"), (500, "agent_overloaded"), (429, "agent_rate_limited")],
)
def test_api_errors_are_retryable(status: int, kind: str) -> None:
    """Overloaded, 5xx and rate-limit results are retryable with their kind."""
    result = AgentResult(is_error=True, subtype="success", api_error_status=status)
    with pytest.raises(RetryableError) as caught:
        classify_result("claude", result, None)
    assert caught.value.kind == kind


def test_network_text_is_retryable() -> None:
    """An error result whose text says network trouble is retryable ``network``."""
    result = AgentResult(is_error=True, result_text="API Error: Connection error. ECONNREFUSED")
    with pytest.raises(RetryableError) as caught:
        classify_result("claude", result, None)
    assert caught.value.kind == "network"


def test_auth_errors_are_fatal() -> None:
    """A refused key cannot be fixed by retrying."""
    with pytest.raises(FatalError):
        classify_result("claude", AgentResult(is_error=True, api_error_status=401), None)


def test_max_turns_and_budget_escalate() -> None:
    """Turn and budget limits escalate with their reason codes."""
    with pytest.raises(EscalationError) as turns:
        classify_result("claude", AgentResult(is_error=True, subtype="error_max_turns"), None)
    assert turns.value.reason == "max_turns"
    budget_result = AgentResult(is_error=True, subtype="error_max_budget_usd", cost_usd=2.0)
    with pytest.raises(EscalationError) as budget:
        classify_result("claude", budget_result, None)
    assert budget.value.reason == "budget"


def test_cost_over_budget_escalates_even_on_success() -> None:
    """The budget is enforced from the reported cost, not only the agent's own check."""
    with pytest.raises(EscalationError) as caught:
        classify_result("claude", AgentResult(cost_usd=1.5), 1.0)
    assert caught.value.reason == "budget"
    classify_result("claude", AgentResult(cost_usd=0.5), 1.0)


def test_process_outcomes_are_classified() -> None:
    """Stop, idle timeout and a missing result map to cancel, idle_timeout and agent_crash."""
    with pytest.raises(CancelRequested):
        check_process("a", CommandResult(None, "", 1.0, stopped="cancel"), None)
    with pytest.raises(RetryableError) as idle:
        check_process("a", CommandResult(None, "", 1.0, idle_timed_out=True), None)
    assert idle.value.kind == "idle_timeout"
    with pytest.raises(RetryableError) as crash:
        check_process("a", CommandResult(3, "Segfault", 1.0), None)
    assert crash.value.kind == "agent_crash" and "Segfault" in str(crash.value)


def test_claude_argv_carries_every_configured_option(tmp_path: Path) -> None:
    """The argv has the fixed flags, the options in use and the resumed session."""
    preset = AgentPreset(
        name="claude",
        kind="claude",
        command=("/opt/claude",),
        model="m1",
        allowed_tools=("Read", "Bash"),
        append_system_prompt="be brief",
        max_turns=7,
        max_budget_usd=2.0,
        mcp_config=tmp_path / "mcp.json",
        extra_args=("--x",),
    )
    argv = claude_argv(preset, _request(tmp_path, resume_session="s-1", max_budget_usd=1.5))
    assert argv[:10] == [
        "/opt/claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Read,Bash",
        "--append-system-prompt",
    ]
    joined = " ".join(argv)
    assert "--model m1" in joined and "--max-turns 7" in joined
    assert "--max-budget-usd 1.5000" in joined  # the tighter of preset and request
    assert f"--mcp-config {tmp_path / 'mcp.json'}" in joined
    assert argv[-3:] == ["--resume", "s-1", "--x"]
    assert "do it" not in argv  # the prompt goes to stdin


def test_codex_argv_reads_the_prompt_from_stdin_and_resumes(tmp_path: Path) -> None:
    """``codex exec --json`` without Codex's sandbox; ``resume <thread>`` before the ``-``."""
    preset = AgentPreset(name="codex", kind="codex", model="gpt-x", extra_args=("--x",))
    assert codex_argv(preset, _request(tmp_path)) == [
        "codex",
        "exec",
        "--json",
        "--dangerously-bypass-approvals-and-sandbox",
        "--skip-git-repo-check",
        "-c",
        "shell_environment_policy.ignore_default_excludes=false",
        "--model",
        "gpt-x",
        "--x",
        "-",
    ]
    assert codex_argv(preset, _request(tmp_path, resume_session="th-1"))[-4:] == [
        "--x",
        "resume",
        "th-1",
        "-",
    ]


def test_command_argv_substitutes_per_element_without_a_shell(tmp_path: Path) -> None:
    """Placeholders are replaced inside each element; shell syntax stays literal."""
    argv = command_argv(
        ("agent", "--prompt={prompt_file}", "{workdir}", "$(rm -rf /)"),
        tmp_path / "p.md",
        tmp_path / "wt",
    )
    assert argv == ["agent", f"--prompt={tmp_path / 'p.md'}", str(tmp_path / "wt"), "$(rm -rf /)"]


def test_build_agent_picks_the_kind_and_applies_overrides() -> None:
    """Each kind builds its agent; overrides replace preset fields; unknown ones are errors."""
    claude = build_agent(AgentPreset(name="c", kind="claude"), (("max_turns", 3),))
    assert isinstance(claude, ClaudeAgent) and claude.preset.max_turns == 3
    assert isinstance(build_agent(AgentPreset(name="x", kind="codex")), CodexAgent)
    command = build_agent(AgentPreset(name="k", kind="command", command=("a",)))
    assert isinstance(command, CommandAgent)
    with pytest.raises(ConfigError, match=r"agent_overrides\.colour"):
        build_agent(AgentPreset(name="c", kind="claude"), (("colour", "red"),))
    with pytest.raises(ConfigError, match=r"agents\.z\.kind"):
        build_agent(AgentPreset(name="z", kind="aider"))
    with pytest.raises(ConfigError, match="needs an argv"):
        build_agent(AgentPreset(name="k", kind="command"))


def test_tool_summary_names_the_tool_and_its_target(tmp_path: Path) -> None:
    """Paths inside the worktree are shown relative; commands are shown as run."""
    written = tool_summary("Write", {"file_path": f"{tmp_path}/src/a.py"}, tmp_path)
    assert written == "Write src/a.py"
    assert tool_summary("Bash", {"command": "pytest -q"}) == "Bash pytest -q"
    assert tool_summary("Odd", {"k": "v"}) == "Odd {'k': 'v'}"


def test_request_repr_hides_the_environment(tmp_path: Path) -> None:
    """A request printed in a log never shows the env it carries."""
    request = AgentRequest("p", tmp_path, {"ANTHROPIC_API_KEY": "sk-secret"}, tmp_path)
    assert "sk-secret" not in repr(request)


def test_an_api_error_is_never_told_as_success() -> None:
    """A 529 result whose subtype says "success" is described as the API error it is."""
    overloaded = AgentResult(subtype="success", is_error=True, api_error_status=529)
    assert outcome_words(overloaded) == "API error 529 (success)"
    assert outcome_words(AgentResult(subtype="error_exit", is_error=True)) == "error (error_exit)"
    assert outcome_words(AgentResult(subtype="success")) == "success"


def test_a_summary_and_a_blocked_reason_mask_a_key_before_cutting_it() -> None:
    """Cut inside a key, a summary would show its first characters (under the 4 that
    ``mask`` recognises before a ``…``), a blocked reason all that precede the cut."""
    key = "sntl-agent-key-7Qx9vLp2"
    register_secret(key)
    for shown in range(1, len(key)):
        line = "y" * (199 - shown) + key + " more"
        assert key[:shown] + "…" not in summarise(line), shown
        reason = blocked_reason("BLOCKED: " + "y" * (500 - shown) + key + " more")
        assert reason is not None and not reason.endswith(key[:shown]), shown
