"""How a dry run reads in a terminal: the totals, each figure with its assumption, then the warnings."""

from __future__ import annotations

from typing import Any

import typer


def _figure(name: str, figure: dict[str, Any], fmt: str) -> str:
    value = figure.get("value")
    shown = fmt.format(value) if value is not None else "unknown"
    return f"{name:<14} {shown:<14} ({figure.get('assumption', '')})"


def print_estimate(e: dict[str, Any]) -> None:
    """An estimate as ``jobs.estimate.Estimate`` or the API's ``EstimateOut`` gives it (as a dict)."""
    typer.echo(f"dry run: {e['items']} items, nothing stored")
    typer.echo(f"{'visual tokens':<14} {e['visual_tokens']:<14} ({e['tokens']})")
    typer.echo(f"{'text tokens':<14} {e['text_tokens']}")
    typer.echo(_figure("engine time", e["engine_seconds"], "{:.2f} s"))
    typer.echo(_figure("energy", e["wh"], "{:.3f} Wh"))
    typer.echo(_figure("cost", e["cost"], "{:.4f}"))
    finish = e.get("expected_finish_at") or e.get("expected_finish")
    if finish is not None:
        typer.echo(f"{'finish':<14} {finish}")
    for warning in e.get("warnings", []):
        typer.echo(f"warning: {warning}")


def estimate_dict(e: Any) -> dict[str, Any]:
    """A ``jobs.estimate.Estimate`` as the API's answer shows it."""
    from dataclasses import asdict

    out = asdict(e)
    out["expected_finish_at"] = e.expected_finish.isoformat(timespec="seconds") if e.expected_finish else None
    return out
