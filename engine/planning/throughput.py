"""The planner's throughput for a job's items, for dry runs before any worker has measured a rate: the roofline of
``plan`` for the model on a card, at the planner's assumed efficiency with the platform's host costs added (on
CPU; ``engine.planning.host_costs``), over every engine the cards hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.planning.host_costs import describe
from engine.planning.planner import PlanError, plan
from engine.planning.request import PlanRequest
from engine.planning.shapes import ModelConfigError, read_model_config


@dataclass(frozen=True)
class PlannedThroughput:
    items_per_s: float
    power_w: float | None  # every card at its data-sheet power; None when that is not a checked figure
    assumption: str


def planned_throughput(
    model_dir: Path,
    *,
    card: str,
    cards: int = 1,
    visual_tokens_per_image: int,
    images_per_prompt: int,
    text_tokens: int,
    output_tokens: int,
    expected_output_tokens: int | None = None,
    expected_from: str = "",
) -> PlannedThroughput | None:
    """Items per second the planner expects of ``cards`` ``card``s for items of this size; None when the model or
    the card cannot be planned (the reason is logged by the caller's fallback as unknown). Answers are planned at
    ``expected_output_tokens`` where known (``expected_from`` says how), else at their budget ``output_tokens``;
    the context is sized for the budget either way."""
    answer = min(expected_output_tokens, output_tokens) if expected_output_tokens else output_tokens
    answers = "answers at their full max_tokens"
    if expected_output_tokens:
        answers = f"answers of {answer} tokens ({expected_from})"
    try:
        shape = read_model_config(model_dir)
        req = PlanRequest(
            card=card,
            cards=cards,
            visual_tokens_per_image=visual_tokens_per_image,
            images_per_prompt=images_per_prompt,
            prompt_text_tokens=max(1, text_tokens),
            output_tokens=max(1, answer),
            max_model_len=max(2048, text_tokens + images_per_prompt * visual_tokens_per_image + output_tokens),
        )
        p = plan(shape, req, model_path=str(model_dir))
    except (ModelConfigError, PlanError, ValueError):
        return None
    per_hour = p.roofline.items_per_hour_estimate * len(p.engines)
    power = p.card.power_w
    watts = power.value * cards if power.value > 0 and power.kind != "unverified" else None
    costs = p.roofline.host_costs
    host = f", plus {p.platform.family} host costs of {describe(costs, p.request.output_tokens)}" if costs else ""
    return PlannedThroughput(
        items_per_s=per_hour / 3600,
        power_w=watts,
        assumption=(
            f"the planner's roofline for {cards} x {card} ({len(p.engines)} engine(s), TP {p.tp}) at "
            f"{p.roofline.efficiency:.0%} efficiency{host}, {answers}"
        ),
    )
