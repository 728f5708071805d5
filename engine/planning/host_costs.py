"""The engine's host costs beside the roofline: what a plan's estimate adds for the time the model's arithmetic
does not take.

The roofline counts bytes and FLOPs on the chip. An engine also spends host time on every item (input
processing, scheduling) and on every output token of every sequence (sampling, structured output,
detokenization). On an accelerator that overlaps the chip's work and no figure for it is at hand, so it is not
modelled (``Platform.host_costs`` is None and a plan is the roofline at the assumed efficiency, as ever). On a
CPU it is the same cores' time, and for a small model it is most of an item's time, so the CPU platform has
calibrated figures: an item's estimated time is

    roofline item time / efficiency + seconds per item + seconds per output token x output tokens

where output tokens are the plan's (a dry run's: each answer's max_tokens, the most it can take).
"""

from __future__ import annotations

from engine.devices import HostCosts


def estimated_per_hour(bound_per_hour: float, efficiency: float, host_s_per_item: float) -> float:
    """Items per hour of one engine: the roofline bound at ``efficiency``, with the host seconds of each item added
    to its time (none: the bound x efficiency exactly, as plans without host costs always were)."""
    if not host_s_per_item:
        return bound_per_hour * efficiency
    return 3600 / (3600 / (bound_per_hour * efficiency) + host_s_per_item)


def describe(costs: HostCosts, output_tokens: int) -> str:
    """One line: the figures and what they add to an item of ``output_tokens`` output tokens."""
    per_item, per_token = costs.seconds_per_item.value, costs.seconds_per_output_token.value
    return (
        f"{per_item * 1e3:.1f} ms/item + {per_token * 1e3:.2f} ms/output token x {output_tokens} = "
        f"{costs.item_seconds(output_tokens):.3f} s per item"
    )
