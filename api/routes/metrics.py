"""``GET /metrics``: the latest chip readings of every worker, in the Prometheus text format (0.0.4).

Workers store their samples in the DB (``device_telemetry``); this route shows the newest per worker and
chip from the last ``STALE_AFTER``, so a stopped worker drops out instead of reporting its last value forever.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from sqlalchemy import func, select

from api.deps import SessionDep
from vlbatch.db.models import DeviceSample

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


@router.get("/metrics", response_class=PlainTextResponse)
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
    return PlainTextResponse(render(list(rows)), media_type=CONTENT_TYPE)
