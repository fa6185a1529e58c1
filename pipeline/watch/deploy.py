"""Deploy probes and the analysis that calls a deploy healthy, broken or inconclusive.

The analysis follows Argo Rollouts' AnalysisRun: wait ``initial_delay_s``, then
take ``count`` measurements ``interval_s`` apart; a measurement fails when any
probe fails; more than ``failure_limit`` failed measurements make the deploy
``broken``. One refinement: a measurement whose only fault is that a probe's
``json_field`` still reports another version is *not rolled out yet* — it is
retried without counting, because an old version still serving is no evidence
that the new commit is broken; a version that is a later commit holding the pushed
one (someone pushed on top of it meanwhile) is rolled out, since the commit is live.
When ``progress_deadline_s`` passes before enough measurements are in, the verdict
is ``inconclusive`` (a human looks; only ``broken`` leads to a fix-forward).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from pipeline.config.settings import DeploySettings, ProbeSettings
from pipeline.core.errors import PipelineError
from pipeline.core.events import EventSink
from pipeline.core.masking import mask
from pipeline.core.proc import StopToken, run_command
from pipeline.core.states import VerdictState
from pipeline.watch.pacing import Pacing

ProbeStatus = Literal["ok", "failed", "not_rolled_out"]
OUTPUT_LIMIT = 1000
SHA_VAR = "AFK_PUSHED_SHA"


@dataclass(frozen=True)
class ProbeResult:
    status: ProbeStatus
    output: str  # bounded: what a human or a fix-forward prompt needs to see

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class DeployOutcome:
    verdict: VerdictState
    evidence: str
    measurements: int = 0
    failures: int = 0


ProbeRunner = Callable[[ProbeSettings, str], ProbeResult]
# Whether the commit a deploy reports as its version holds the pushed SHA (a later commit
# on the default branch, a colleague's say, pushed on top of it while it was watched).
Holds = Callable[[str], bool]


@dataclass
class DescendantVersions:
    """``holds(version)`` asked of the repo once per reported version; a look-up that
    fails (the remote unreachable just now) is asked again at the next measurement."""

    ask: Holds
    answers: dict[str, bool] = field(default_factory=dict)

    def __call__(self, version: str) -> bool:
        if version not in self.answers:
            try:
                self.answers[version] = self.ask(version)
            except PipelineError:
                return False
        return self.answers[version]


def _bounded(text: str, limit: int = OUTPUT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 20] + " ...[truncated]"


def _dig(document: object, dotted: str) -> object:
    """``a.b.0.c`` inside parsed JSON; raises KeyError when the path is absent."""
    current = document
    for part in dotted.split("."):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            raise KeyError(dotted)
    return current


def version_matches(reported: object, sha: str) -> bool:
    """The reported version is the SHA, or an abbreviation of it (7+ hex digits)."""
    text = str(reported).strip()
    return text == sha or (len(text) >= 7 and sha.startswith(text))


def _judge_http(
    probe: ProbeSettings, sha: str, response: httpx.Response, holds: Holds | None = None
) -> ProbeResult:
    line = f"GET {probe.url} -> {response.status_code}: {_bounded(response.text, 500)}"
    if response.status_code != probe.expect_status:
        return ProbeResult("failed", f"{line} (expected {probe.expect_status})")
    if probe.body_regex and not re.search(probe.body_regex, response.text):
        return ProbeResult("failed", f"{line} (body does not match /{probe.body_regex}/)")
    if probe.json_field:
        try:
            reported = _dig(response.json(), probe.json_field)
        except (ValueError, KeyError):
            return ProbeResult("failed", f"{line} (no JSON field {probe.json_field})")
        if version_matches(reported, sha):
            return ProbeResult("ok", line)
        version = str(reported).strip()
        if holds is None or not holds(version):
            return ProbeResult(
                "not_rolled_out", f"{line} ({probe.json_field}={reported!s:.60}, want {sha[:12]})"
            )
        line += f" ({probe.json_field}={version:.12}, a later commit holding {sha[:12]})"
    return ProbeResult("ok", line)


def http_probe(probe: ProbeSettings, sha: str, holds: Holds | None = None) -> ProbeResult:
    """GET the probe's URL and judge status, body regex and version field (the pushed SHA,
    or with ``holds`` a commit that holds it)."""
    if not probe.url:
        return ProbeResult("failed", "http probe has no url")
    try:
        with httpx.Client(timeout=probe.timeout_s, follow_redirects=True) as client:
            response = client.get(probe.url)
    except httpx.HTTPError as exc:
        return ProbeResult("failed", f"GET {probe.url} -> {type(exc).__name__}: {exc}")
    return _judge_http(probe, sha, response, holds)


def command_probe(
    probe: ProbeSettings,
    sha: str,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stop: StopToken | None = None,
) -> ProbeResult:
    """Run the probe's argv; exit 0 is healthy. The SHA is in ``$AFK_PUSHED_SHA``."""
    if not probe.command:
        return ProbeResult("failed", "command probe has no command")
    run_env = probe_env(os.environ if env is None else env)
    run_env[SHA_VAR] = sha
    try:
        result = run_command(
            list(probe.command),
            cwd=cwd or Path.cwd(),
            env=run_env,
            timeout_s=probe.timeout_s,
            stop=stop,
            tail_lines=30,
        )
    except OSError as exc:
        return ProbeResult("failed", f"{probe.command[0]}: {exc}")
    verdict = "timed out" if result.timed_out else f"exit {result.returncode}"
    output = mask(f"$ {' '.join(probe.command)} -> {verdict}\n{_bounded(result.output_tail)}")
    return ProbeResult("ok" if result.ok else "failed", output.strip())


def probe_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables that hold one of the daemon's own secrets.

    A probe's output becomes run evidence (events, the database, frozen
    manifests), so the pipeline's credentials must not be there to print.
    """
    return {name: value for name, value in env.items() if mask(value) == value}


def default_probe_runner(
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stop: StopToken | None = None,
    holds: Holds | None = None,
) -> ProbeRunner:
    def run(probe: ProbeSettings, sha: str) -> ProbeResult:
        if probe.kind == "http":
            return http_probe(probe, sha, holds)
        if probe.kind == "command":
            return command_probe(probe, sha, cwd=cwd, env=env, stop=stop)
        return ProbeResult("failed", f"unknown probe kind {probe.kind!r}")

    return run


def measure(
    probes: tuple[ProbeSettings, ...], sha: str, runner: ProbeRunner
) -> tuple[ProbeStatus, str]:
    """One measurement over every probe: failed beats not rolled out beats ok."""
    results = [runner(probe, sha) for probe in probes]
    output = _bounded("\n".join(result.output for result in results), 2 * OUTPUT_LIMIT)
    statuses = {result.status for result in results}
    order: tuple[ProbeStatus, ...] = ("failed", "not_rolled_out")
    for status in order:
        if status in statuses:
            return status, output
    return "ok", output


@dataclass
class _Analysis:
    deploy: DeploySettings
    sha: str
    events: EventSink
    stop: StopToken | None
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    runner: ProbeRunner
    started: float = field(init=False)
    attempts: int = 0  # measurements recorded, those of a deploy not rolled out yet too
    taken: int = 0
    failures: int = 0
    last_output: str = ""

    def __post_init__(self) -> None:
        self.started = self.clock()

    def past_deadline(self) -> bool:
        return self.clock() - self.started >= self.deploy.progress_deadline_s

    def stopped(self) -> bool:
        return self.stop is not None and self.stop.stopped

    def observe(self) -> bool:
        """Take one measurement; False when a stop came while it was taken: not counted,
        since a command probe the stop killed says nothing about the deploy."""
        status, output = measure(self.deploy.probes, self.sha, self.runner)
        if self.stopped():
            return False
        self.attempts += 1
        self.last_output = output
        if status != "not_rolled_out":
            self.taken += 1
            self.failures += status == "failed"
        self.events(
            "deploy",
            f"measurement {self.attempts}: {status}",
            {
                "status": status,
                "measurement": self.taken,
                "failures": self.failures,
                "output": output,
            },
        )
        return True

    def outcome(self, verdict: VerdictState, why: str) -> DeployOutcome:
        evidence = f"{why}\nlast probe output:\n{self.last_output}".strip()
        self.events("deploy", f"deploy {verdict}: {why}", {"verdict": verdict})
        return DeployOutcome(verdict, evidence, self.taken, self.failures)

    def run(self) -> DeployOutcome:
        deploy = self.deploy
        if not deploy.probes:
            return self.outcome(
                VerdictState.HEALTHY, "no deploy probes configured; nothing to watch"
            )
        if deploy.initial_delay_s > 0:
            self.sleep(deploy.initial_delay_s)
        while not self.stopped() and self.observe():
            if self.failures > deploy.failure_limit:
                return self.outcome(
                    VerdictState.BROKEN,
                    f"{self.failures} of {self.taken} measurements "
                    f"failed (failure_limit {deploy.failure_limit})",
                )
            if self.taken >= deploy.count:
                return self.outcome(
                    VerdictState.HEALTHY, f"{self.taken} measurements, {self.failures} failed"
                )
            if self.past_deadline():
                break
            self.sleep(deploy.interval_s)
        why = "stopped" if self.stopped() else "progress deadline passed"
        return self.outcome(
            VerdictState.INCONCLUSIVE,
            f"{why} after {self.taken} of {deploy.count} "
            f"measurements ({self.failures} failed, "
            f"{self.attempts - self.taken} not rolled out yet)",
        )


def watch_deploy(
    deploy: DeploySettings,
    sha: str,
    events: EventSink,
    stop: StopToken | None,
    pacing: Pacing | None = None,
    probe_runner: ProbeRunner | None = None,
) -> DeployOutcome:
    """Watch the deploy of ``sha`` with the repo's probes; never raises for a bad deploy."""
    pacing = pacing or Pacing()
    runner = probe_runner or default_probe_runner(stop=stop)
    return _Analysis(deploy, sha, events, stop, pacing.clock, pacing.pause(stop), runner).run()


def probe_summary(probe: ProbeSettings) -> str:
    """One line naming a probe, for messages."""
    if probe.kind == "http":
        return f"http {probe.url} expect {probe.expect_status}"
    return f"command {json.dumps(list(probe.command))}"
