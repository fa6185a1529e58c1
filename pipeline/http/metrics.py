"""Prometheus metrics: the store read at scrape time, plus counters the daemon bumps.

Each app has its own ``CollectorRegistry`` (so tests and several apps in one
process never share series). Gauges and totals that live in the database are
read by ``StoreCollector`` on every scrape, and only on the replica that holds
the metrics lead, so they are exported once however many replicas share the
database; events that leave no row behind (a failed poll, a rejected webhook)
are counted in process by ``Metrics``, on every replica.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pipeline.core.states import ALL_STATES
from pipeline.store.outbox import NotificationCounts
from pipeline.store.records import Repo, Stats
from pipeline.store.totals import Histogram, RepoSpend

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RUN_STATES = ALL_STATES
# Seconds of execution: a run takes minutes to an hour or two.
DURATION_BUCKETS = (30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0)


class MetricsSource(Protocol):
    """The store verbs the collector reads (``pipeline.store.Store`` has them)."""

    def stats(self) -> Stats: ...

    def list_repos(self) -> list[Repo]: ...

    def duration_histograms(self, bounds: Sequence[float]) -> dict[str, Histogram]: ...

    def spend_by_repo(self) -> list[RepoSpend]: ...

    def escalation_counts(self) -> dict[tuple[str, str], int]: ...

    def notification_counts(self) -> NotificationCounts: ...

    def hold_metrics_lead(self) -> bool: ...


@dataclass(frozen=True)
class Snapshot:
    """Everything the database-wide families show, read in one scrape."""

    stats: Stats
    repos: list[Repo]
    durations: dict[str, Histogram]
    spend: list[RepoSpend]
    escalations: dict[tuple[str, str], int]
    notifications: NotificationCounts

    @classmethod
    def read(cls, source: MetricsSource) -> Snapshot:
        repos = source.list_repos()
        durations = source.duration_histograms(DURATION_BUCKETS)
        for repo in repos:  # a repo with no finished run yet shows an empty histogram
            durations.setdefault(repo.name, Histogram([0] * len(DURATION_BUCKETS), 0, 0.0))
        return cls(
            stats=source.stats(),
            repos=repos,
            durations=durations,
            spend=source.spend_by_repo(),
            escalations=source.escalation_counts(),
            notifications=source.notification_counts(),
        )


class Metrics:
    """The app's registry and the in-process counters the daemon increments."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._poll_errors = Counter(
            "pipeline_poll_errors",
            "Tracker polls that failed, by tracker.",
            ["tracker"],
            registry=self.registry,
        )
        self._webhooks_rejected = Counter(
            "pipeline_webhooks_rejected",
            "Webhook deliveries refused (bad signature, untrusted actor, malformed...).",
            ["tracker", "reason"],
            registry=self.registry,
        )

    def poll_error(self, tracker: str) -> None:
        """Count one failed poll of ``tracker``."""
        self._poll_errors.labels(tracker=tracker).inc()

    def webhook_rejected(self, tracker: str, reason: str) -> None:
        """Count one refused webhook delivery for ``tracker`` with a short ``reason``."""
        self._webhooks_rejected.labels(tracker=tracker, reason=reason).inc()

    def know_trackers(self, names: Iterable[str]) -> None:
        """Show a zero poll-error count for each tracker before its first error."""
        for name in names:
            self._poll_errors.labels(tracker=name)

    def watch_store(self, source: MetricsSource, capacity: int) -> None:
        """Report the store's runs, queues, durations and agent spend on every scrape."""
        self.registry.register(StoreCollector(source, capacity))

    def render(self) -> bytes:
        """The text exposition format of every metric in the registry."""
        return generate_latest(self.registry)


class StoreCollector(Collector):
    """Reads the store when Prometheus scrapes; one bounded set of queries each time.

    ``pipeline_database_up``, ``pipeline_capacity`` and ``pipeline_metrics_leader``
    describe this replica. Every other family here describes the whole database,
    so only the replica holding the metrics lead (``store/leader.py``) fills it:
    ``sum()`` over replicas counts each run once. The others show the families
    empty.
    """

    def __init__(self, source: MetricsSource, capacity: int) -> None:
        self.source = source
        self.capacity = capacity

    def describe(self) -> Iterable[Metric]:
        # Names only, so registering does not query the database.
        return [*_replica_families(None, None), *_database_families(None)]

    def collect(self) -> Iterable[Metric]:
        try:
            leads = self.source.hold_metrics_lead()
            snapshot = Snapshot.read(self.source) if leads else None
        except Exception as exc:  # any database failure: say so, do not fail the scrape
            log.warning("metrics: cannot read the store: %s", exc)
            up = GaugeMetricFamily("pipeline_database_up", "1 when the database answered.")
            up.add_metric([], 0.0)
            return [up]
        return [*_replica_families(self.capacity, leads), *_database_families(snapshot)]


def _replica_families(capacity: int | None, leads: bool | None) -> Iterator[Metric]:
    up = GaugeMetricFamily("pipeline_database_up", "1 when the database answered.")
    gauge = GaugeMetricFamily("pipeline_capacity", "max_concurrency: runs allowed at once.")
    leader = GaugeMetricFamily(
        "pipeline_metrics_leader",
        "1 on the one replica that exports the database-wide metrics, 0 on the others.",
    )
    if capacity is not None and leads is not None:
        up.add_metric([], 1.0)
        gauge.add_metric([], float(capacity))
        leader.add_metric([], 1.0 if leads else 0.0)
    yield from (up, gauge, leader)


def _database_families(snapshot: Snapshot | None) -> Iterator[Metric]:
    stats = snapshot.stats if snapshot else None
    yield from _run_families(stats, snapshot.repos if snapshot else [])
    yield _duration_family(snapshot.durations if snapshot else None)
    yield from _spend_families(snapshot.spend if snapshot else None)
    yield _escalation_family(snapshot.escalations if snapshot else None)
    yield from _notification_families(snapshot.notifications if snapshot else None)


def _run_families(stats: Stats | None, repos: list[Repo]) -> Iterator[Metric]:
    runs = GaugeMetricFamily("pipeline_runs", "Runs in the history by state.", labels=["state"])
    kinds = GaugeMetricFamily("pipeline_runs_by_kind", "Runs by kind.", labels=["kind"])
    active = GaugeMetricFamily("pipeline_active_runs", "Runs past queued and not ended.")
    depth = GaugeMetricFamily(
        "pipeline_queue_depth", "Runs waiting (queued or retry_wait) per repo.", labels=["repo"]
    )
    frozen = GaugeMetricFamily(
        "pipeline_repo_frozen", "1 when the repo is frozen.", labels=["repo"]
    )
    if stats is not None:
        for state in sorted(set(RUN_STATES) | set(stats.runs_by_state)):
            runs.add_metric([state], float(stats.runs_by_state.get(state, 0)))
        for kind, count in sorted(stats.runs_by_kind.items()):
            kinds.add_metric([kind], float(count))
        active.add_metric([], float(stats.active))
        for repo in repos:
            depth.add_metric([repo.name], float(stats.queued_by_repo.get(repo.name, 0)))
            frozen.add_metric([repo.name], 1.0 if repo.frozen else 0.0)
    yield from (runs, kinds, active, depth, frozen)


def _duration_family(histograms: dict[str, Histogram] | None) -> Metric:
    family = HistogramMetricFamily(
        "pipeline_run_duration_seconds",
        "Execution time of finished runs (queue wait excluded), per repo.",
        labels=["repo"],
    )
    for repo, histogram in sorted((histograms or {}).items()):
        pairs = zip(DURATION_BUCKETS, histogram.cumulative, strict=True)
        buckets = [(_bound(b), float(c)) for b, c in pairs]
        buckets.append(("+Inf", float(histogram.count)))
        family.add_metric([repo], buckets, histogram.sum_s)
    return family


def _spend_families(spend: list[RepoSpend] | None) -> Iterator[Metric]:
    cost = CounterMetricFamily(
        "pipeline_agent_cost_usd", "Agent cost of every run, in USD, per repo.", labels=["repo"]
    )
    tokens = CounterMetricFamily(
        "pipeline_agent_tokens",
        "Agent tokens of every run, per repo.",
        labels=["repo", "direction"],
    )
    for repo in spend or []:
        cost.add_metric([repo.repo], repo.cost_usd)
        tokens.add_metric([repo.repo, "in"], float(repo.tokens_in))
        tokens.add_metric([repo.repo, "out"], float(repo.tokens_out))
    yield cost
    yield tokens


def _escalation_family(counts: dict[tuple[str, str], int] | None) -> Metric:
    family = CounterMetricFamily(
        "pipeline_escalations",
        "Escalations raised (a human is needed), per repo and reason.",
        labels=["repo", "reason"],
    )
    for (repo, reason), count in sorted((counts or {}).items()):
        family.add_metric([repo, reason], float(count))
    return family


def _notification_families(counts: NotificationCounts | None) -> Iterator[Metric]:
    failed = CounterMetricFamily(
        "pipeline_notifications_failed",
        "Notification delivery attempts that failed (each is retried with backoff).",
    )
    undelivered = GaugeMetricFamily(
        "pipeline_notifications_undelivered",
        "Notifications not delivered yet (pending) or given up (abandoned).",
    )
    abandoned = CounterMetricFamily(
        "pipeline_notifications_abandoned",
        "Notifications given up after retrying for a day: never delivered.",
    )
    if counts is not None:
        failed.add_metric([], float(counts.failed_attempts))
        undelivered.add_metric([], float(counts.undelivered))
        abandoned.add_metric([], float(counts.abandoned))
    yield from (failed, undelivered, abandoned)


def _bound(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)
