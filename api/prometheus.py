"""What ``GET /metrics`` exposes, built with ``prometheus-client`` from the database at scrape time.

The DB is the one source: workers store their samples there (``device_telemetry``, ``engine_samples``) and the
ledger holds the items, so any API process answers for the whole deployment and a restart loses nothing. A
collector reads the newest sample per worker (and chip) from the last ``STALE_AFTER``, so a stopped worker
drops out instead of reporting its last value forever, and the items of unfinished jobs by queue and state
(an index-only count over ``ix_items_job_status``).

Series carry worker, device and queue labels, never a job id: the series count stays fixed as jobs come and
go. A queue label names its model only for the models a worker served within ``MODEL_LABEL_WINDOW`` (their engine
samples) and the API's configured model (``VLBATCH_MODEL_NAME``); any other model's jobs count under
``other.<priority>`` (no queue name starts so), since a client may name as many models as it likes. Rates
(tokens/s, items/s, preprocessing ms per image) are PromQL over the counters, e.g.
``rate(vlbatch_engine_output_tokens_total[1m])``; ``deploy/grafana-dashboard.json`` draws them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from jobs.publisher import queue_name
from vlbatch.db import engine_states, metrics, retention
from vlbatch.db.deadlines import DeadlineStatus, deadline_view
from vlbatch.db.models import DeviceSample, EngineSample, ItemStatus
from vlbatch.db.queues import served_models

__all__ = ["CONTENT_TYPE", "STALE_AFTER", "LedgerCollector", "exposition"]

STALE_AFTER = timedelta(minutes=5)
MODEL_LABEL_WINDOW = timedelta(hours=1)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MB = 1024 * 1024

Getter = Callable[[DeviceSample], float | None]
EngineGetter = Callable[[EngineSample], float | None]


def _mb(v: int | None) -> int | None:
    return None if v is None else v * MB


def _ts(at: datetime) -> float:
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


DEVICE_GAUGES: tuple[tuple[str, str, Getter], ...] = (
    ("vlbatch_device_temperature_celsius", "Chip temperature.", lambda s: s.temp_c),
    ("vlbatch_device_power_watts", "Card power (310P: shared by the card's two chips).", lambda s: s.power_w),
    ("vlbatch_device_memory_used_bytes", "Device memory in use.", lambda s: _mb(s.memory_used_mb)),
    ("vlbatch_device_memory_total_bytes", "Device memory total.", lambda s: _mb(s.memory_total_mb)),
    ("vlbatch_device_aicore_utilization_percent", "AI Core utilisation.", lambda s: s.aicore_pct),
    ("vlbatch_device_sample_timestamp_seconds", "When the sample was taken.", lambda s: _ts(s.sampled_at)),
)
ENGINE_GAUGES: tuple[tuple[str, str, EngineGetter], ...] = (
    ("vlbatch_engine_running_requests", "Mean running requests per engine step over the last interval.",
     lambda s: s.mean_running),
    ("vlbatch_engine_max_num_seqs", "The engine's max_num_seqs (occupancy = running / this).", lambda s: s.capacity),
    ("vlbatch_engine_backlog_requests", "Prepared requests waiting outside the engine.", lambda s: s.backlog),
)  # fmt: skip
# Counters since the worker started; the family name takes "_total" on exposition.
ENGINE_COUNTERS: tuple[tuple[str, str, EngineGetter], ...] = (
    ("vlbatch_engine_items_done", "Items this worker finished.", lambda s: s.items_done),
    ("vlbatch_engine_output_tokens", "Output tokens the engine produced.", lambda s: s.output_tokens),
    ("vlbatch_engine_steps", "Engine steps.", lambda s: s.steps),
    ("vlbatch_preprocess_images", "Images decoded and resized for the engine.", lambda s: s.prep_images),
    ("vlbatch_preprocess_seconds", "Seconds spent preprocessing images.", lambda s: s.prep_seconds),
    ("vlbatch_db_write_items", "Items whose results were written.", lambda s: s.db_items),
    ("vlbatch_db_write_seconds", "Seconds spent writing results and finishing chunks.", lambda s: s.db_seconds),
    ("vlbatch_db_claims", "Claims made, those that leased no chunk included.", lambda s: s.claims),
    ("vlbatch_db_claim_seconds", "Seconds spent claiming chunks.", lambda s: s.claim_seconds),
)


STORAGE_GAUGES: tuple[tuple[str, str, Callable[[retention.Storage], int]], ...] = (
    ("vlbatch_tenant_jobs", "Jobs a tenant holds (any state).", lambda r: r.jobs),
    ("vlbatch_tenant_items", "Items of a tenant's jobs.", lambda r: r.items),
    ("vlbatch_tenant_files", "Files a tenant holds (uploads and batch output).", lambda r: r.files),
    ("vlbatch_tenant_file_bytes", "Bytes of a tenant's files on disk.", lambda r: r.file_bytes),
)


class LedgerCollector(Collector):
    """One scrape's worth of metrics, read through ``session``."""

    def __init__(
        self,
        session: Session,
        *,
        now: datetime | None = None,
        configured: Collection[str] = (),
        weights: Mapping[str, float] | None = None,
    ) -> None:
        self.session = session
        self.weights = weights
        self.now = now or datetime.now(UTC)
        self.cutoff = self.now - STALE_AFTER
        self.models = set(served_models(session, since=self.now - MODEL_LABEL_WINDOW)) | set(configured)

    def queue(self, model: str, priority: str) -> str:
        """The queue label: the broker's queue name for a known model, ``other.<priority>`` for any other."""
        return queue_name(model, priority) if model in self.models else f"other.{priority}"

    def collect(self) -> Iterator[Metric]:
        yield from self._devices()
        yield from self._engines()
        yield from self._items()
        yield from self._deadlines()
        yield from self._storage()

    def _storage(self) -> Iterator[Metric]:
        """What each tenant holds, so an operator sees retention at work (``vlbatch.db.retention``): from the jobs
        and files tables only, no scan of items or results. A tenant label per tenant: tenants are made by an
        admin (``vlbatch keys``), not by clients, so their number stays bounded."""
        rows = retention.storage_by_tenant(self.session)
        for name, help_text, get in STORAGE_GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=["tenant"])
            for row in rows:
                family.add_metric([row.tenant], get(row))
            yield family

    def _deadlines(self) -> Iterator[Metric]:
        """Unfinished jobs with a deadline, per queue and verdict (``vlbatch.db.deadlines``)."""
        family = GaugeMetricFamily(
            "vlbatch_jobs_deadline",
            "Unfinished jobs with a deadline, by queue and verdict (on_track, at_risk, late).",
            labels=["queue", "status"],
        )
        counts: Counter[tuple[str, str]] = Counter()
        for job in metrics.jobs_with_deadline(self.session):
            view = deadline_view(self.session, job, now=self.now, weights=self.weights)
            if view is not None:
                counts[(self.queue(job.model, job.priority), view.status.value)] += 1
        for queue in sorted({q for q, _ in counts}):
            for status in DeadlineStatus:
                family.add_metric([queue, status.value], counts[(queue, status.value)])
        yield family

    def _devices(self) -> Iterator[Metric]:
        rows = metrics.newest_device_samples(self.session, since=self.cutoff)
        for name, help_text, get in DEVICE_GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=["worker", "device", "npu"])
            for s in rows:
                value = get(s)
                if value is not None:
                    family.add_metric([s.worker, str(s.device_id), str(s.npu_id)], float(value))
            yield family

    def _engines(self) -> Iterator[Metric]:
        rows = metrics.newest_engine_samples(self.session, since=self.cutoff)
        families: list[tuple[GaugeMetricFamily | CounterMetricFamily, EngineGetter]] = [
            (GaugeMetricFamily(name, help_text, labels=["worker"]), get) for name, help_text, get in ENGINE_GAUGES
        ]
        families += [
            (CounterMetricFamily(name, help_text, labels=["worker"]), get) for name, help_text, get in ENGINE_COUNTERS
        ]
        for family, get in families:
            for s in rows:
                value = get(s)
                if value is not None:
                    family.add_metric([s.worker], float(value))
            yield family

    def _items(self) -> Iterator[Metric]:
        items = GaugeMetricFamily(
            "vlbatch_items", "Items of unfinished jobs, by queue and state.", labels=["queue", "state"]
        )
        waiting: dict[str, int] = {}
        by_state: Counter[tuple[str, str]] = Counter()
        for model, priority, status, n in metrics.item_counts(self.session):
            queue = self.queue(model, priority)
            by_state[(queue, status)] += n
            if status == ItemStatus.QUEUED:
                waiting[queue] = waiting.get(queue, 0) + n
        for (queue, status), n in sorted(by_state.items()):
            items.add_metric([queue, status], n)
        yield items
        depth = GaugeMetricFamily(
            "vlbatch_queue_depth_items", "Items waiting to be claimed, per queue.", labels=["queue"]
        )
        for queue, n in sorted(waiting.items()):
            depth.add_metric([queue], n)
        yield depth
        paused = GaugeMetricFamily(
            "vlbatch_queue_paused", "1 for a paused queue (no chunk of its jobs is claimed).", labels=["queue"]
        )
        paused_queues = {self.queue(model, priority) for model, priority in metrics.paused_queues(self.session)}
        for queue in sorted(paused_queues):
            paused.add_metric([queue], 1)
        yield paused
        breaker = GaugeMetricFamily(
            "vlbatch_engine_breaker_open",
            "1 for a worker whose engine breaker is open: its canary fails, or it crashed on several items in a row,"
            " or its restart budget is spent; it claims nothing (engine_canary_failed).",
            labels=["worker", "model"],
        )
        for b in engine_states.open_breakers(self.session):
            breaker.add_metric([b.owner, b.model], 1)
        yield breaker


def exposition(
    session: Session,
    *,
    now: datetime | None = None,
    configured: Collection[str] = (),
    weights: Mapping[str, float] | None = None,
) -> bytes:
    """The Prometheus text format (0.0.4) of everything above, read now; ``configured``: models named in queue
    labels beside those the workers serve; ``weights``: the tenants' shares, for the deadline verdicts."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(session, now=now, configured=configured, weights=weights))
    return generate_latest(registry)
