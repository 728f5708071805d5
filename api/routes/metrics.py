"""``GET /metrics``: the latest chip readings and engine occupancy of every worker, in the Prometheus text
format (0.0.4).

Workers store their samples in the DB (``device_telemetry``, ``engine_samples``); this route shows the newest
per worker (and chip) from the last ``STALE_AFTER``, so a stopped worker drops out instead of reporting its
last value forever.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse
from sqlalchemy import func, select

from api.deps import SessionDep, require_metrics_reader
from vlbatch.db.models import DeviceSample, EngineSample

router = APIRouter(tags=["metrics"])

STALE_AFTER = timedelta(minutes=5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MB = 1024 * 1024

# name, help, how to get the value from a sample
GAUGES = (
    ("vlbatch_device_temperature_celsius", "Chip temperature.", lambda s: s.temp_c),
    ("vlbatch_device_power_watts", "Card power (310P: shared by the card's two chips).", lambda s: s.power_w),
    ("vlbatch_device_memory_used_bytes", "Device memory in use.", lambda s: _mb(s.memory_used_mb)),
    ("vlbatch_device_memory_total_bytes", "Device memory total.", lambda s: _mb(s.memory_total_mb)),
    ("vlbatch_device_aicore_utilization_percent", "AI Core utilisation.", lambda s: s.aicore_pct),
    ("vlbatch_device_sample_timestamp_seconds", "When the sample was taken.", lambda s: _ts(s.sampled_at)),
)


ENGINE_GAUGES = (
    (
        "vlbatch_engine_running_requests",
        "Mean running requests per engine step over the last interval.",
        lambda s: s.mean_running,
    ),
    ("vlbatch_engine_max_num_seqs", "The engine's max_num_seqs (occupancy = running / this).", lambda s: s.capacity),
    ("vlbatch_engine_backlog_requests", "Prepared requests waiting outside the engine.", lambda s: s.backlog),
    ("vlbatch_engine_items_done_total", "Items this worker finished since it started.", lambda s: s.items_done),
    ("vlbatch_engine_output_tokens_total", "Output tokens since the worker started.", lambda s: s.output_tokens),
    ("vlbatch_engine_steps_total", "Engine steps since the worker started.", lambda s: s.steps),
)


def _mb(v: int | None) -> int | None:
    return None if v is None else v * MB


def _ts(at: datetime) -> float:
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def _num(value: float) -> str:
    v = float(value)
    # Whole numbers print as integers; others with repr's shortest round-trip digits (timestamps keep their ms).
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(samples: list[DeviceSample]) -> str:
    lines: list[str] = []
    for name, help_text, get in GAUGES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for s in samples:
            value = get(s)
            if value is None:
                continue
            # No job label: one series per worker and chip keeps the series count fixed as jobs come and go.
            labels = f'worker="{_label(s.worker)}",device="{s.device_id}",npu="{s.npu_id}"'
            lines.append(f"{name}{{{labels}}} {_num(value)}")
    return "\n".join(lines) + "\n"


def render_engines(samples: list[EngineSample]) -> str:
    lines: list[str] = []
    for name, help_text, get in ENGINE_GAUGES:
        kind = "counter" if name.endswith("_total") else "gauge"
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for s in samples:
            value = get(s)
            if value is not None:
                lines.append(f'{name}{{worker="{_label(s.worker)}"}} {_num(value)}')
    return "\n".join(lines) + "\n"


@router.get("/metrics", response_class=PlainTextResponse, dependencies=[Depends(require_metrics_reader)])
def metrics(session: SessionDep) -> PlainTextResponse:
    cutoff = datetime.now(UTC) - STALE_AFTER
    newest = (
        select(func.max(DeviceSample.id))
        .where(DeviceSample.sampled_at >= cutoff)
        .group_by(DeviceSample.worker, DeviceSample.device_id)
    )
    rows = session.scalars(
        select(DeviceSample).where(DeviceSample.id.in_(newest)).order_by(DeviceSample.worker, DeviceSample.device_id)
    ).all()
    newest_engine = (
        select(func.max(EngineSample.id)).where(EngineSample.sampled_at >= cutoff).group_by(EngineSample.worker)
    )
    engines = session.scalars(
        select(EngineSample).where(EngineSample.id.in_(newest_engine)).order_by(EngineSample.worker)
    ).all()
    return PlainTextResponse(render(list(rows)) + render_engines(list(engines)), media_type=CONTENT_TYPE)
