"""Fuzzed config files: load_settings gives Settings or a ConfigError naming file:key, only."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config.load import load_settings
from pipeline.config.settings import Settings
from pipeline.core.errors import ConfigError

# More examples for the long campaign (scripts/reliability --long).
EXAMPLES = 300 * (10 if os.environ.get("PIPELINE_RELIABILITY_LONG") == "1" else 1)

TOP_KEYS = [
    "database_url",
    "volume",
    "log_level",
    "log_format",
    "max_concurrency",
    "max_queue_depth",
    "poll_interval_s",
    "run_migrations",
    "bogus",
]
SECTIONS = {
    "scheduler": [
        "lease_s",
        "heartbeat_s",
        "sweep_interval_s",
        "claim_interval_s",
        "max_attempts",
        "max_recoveries",
        "backoff_base_s",
        "run_timeout_s",
        "nope",
    ],
    "http": ["listen", "api_token_env", "api_token_file", "api_token"],
    "workspace": ["fetch_debounce_s", "high_watermark", "low_watermark", "capacity_bytes"],
    "notify": ["urls_env", "notify_success", "retries"],
}
NAMED = {
    "trackers": [
        "kind",
        "base_url",
        "token_env",
        "webhook_secret_env",
        "trusted_actors",
        "ready_label",
        "poll_interval_s",
        "token",
    ],
    "agents": [
        "kind",
        "command",
        "model",
        "max_turns",
        "max_budget_usd",
        "api_key_env",
        "idle_timeout_s",
        "env",
        "extra_args",
        "allowed_tools",
    ],
    "repos": [
        "tracker",
        "slug",
        "remote_url",
        "default_branch",
        "test_command",
        "agent",
        "workspace",
        "keep_dirs",
        "max_fix_forwards",
        "push",
        "ci",
        "deploy",
        "copy_files",
        "run_timeout_s",
    ],
}
PLAUSIBLE = st.sampled_from(
    [
        "local",
        "github",
        "gitlab",
        "gitea",
        "command",
        "claude",
        "codex",
        "none",
        "http",
        "127.0.0.1:8080",
        "sqlite:///x.db",
        "postgresql://u@h/db",
        "https://example.invalid",
        "o/r",
        "main",
        "{prompt_file}",
        "{oops}",
        "worktree",
        "clone",
        "GITHUB_TOKEN",
        "1bad",
        "",
        " ",
        "../../etc",
        "-rf",
        "foo..bar",
    ]
)
SCALAR = st.one_of(
    PLAUSIBLE,
    st.text(max_size=20),
    st.integers(-(10**12), 10**12),
    st.floats(),
    st.booleans(),
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from([*TOP_KEYS, *NAMED["repos"], "kind", "url", "command"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


def _table(values: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in values.items())


@st.composite
def documents(draw: st.DrawFn) -> str:
    """A TOML document over the config's real keys, with any values."""
    text = _table(draw(st.dictionaries(st.sampled_from(TOP_KEYS), VALUE, max_size=4)))
    for name, keys in SECTIONS.items():
        if draw(st.booleans()):
            text += f"[{name}]\n" + _table(
                draw(st.dictionaries(st.sampled_from(keys), VALUE, max_size=4))
            )
    for group, keys in NAMED.items():
        for item in draw(st.lists(st.sampled_from(["a", "b", "x y", ""]), max_size=2, unique=True)):
            text += f"[{group}.{json.dumps(item)}]\n" + _table(
                draw(st.dictionaries(st.sampled_from(keys), VALUE, max_size=6))
            )
    return text


def _load(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pipeline.toml"
        path.write_text(text, encoding="utf-8")
        try:
            loaded = load_settings(path, {})
        except ConfigError as exc:
            assert exc.problems, "a ConfigError with no problem listed"
            for problem in exc.problems:
                assert problem.startswith(f"{path}:"), problem
                assert "Traceback" not in problem
            return
        assert isinstance(loaded, Settings)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=documents())
def test_structured_config_gives_settings_or_config_error(text: str) -> None:
    """A config over the real keys with any values: Settings, or file:key problems."""
    _load(text)


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(text=st.text(max_size=300))
def test_any_text_gives_settings_or_config_error(text: str) -> None:
    """Arbitrary text as a config file: Settings, or a ConfigError naming the file."""
    _load(text)
