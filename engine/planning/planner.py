"""``vlbatch plan``: pure arithmetic from a model's shapes and a device set to a launch plan.

Memory follows the engine's own accounting, ``gpu_memory_utilization x total - weights - peak activation -
non-torch increase``, with the platform's quirks asked of the platform (``engine.platforms``): vllm-ascend's
310P worker (``vllm_ascend/_310p/worker_310p.py``, ``determine_available_memory``, since v0.18.0) halves what
is left "for workspace"; releases up to v0.17 (``worker_v1.py``) did not, which is what the posted 310P
start-up logs show. KV tokens are whole blocks of ``block_size``. The planner never compares platform names:
usable fraction, dtype, masks, graph sizes, launch environment and notes all come from the platform.

Which numbers are what: weights and KV bytes per token are exact arithmetic on config.json; the activation
peak is an estimate (the engine measures it in a profile run); rooflines and items/hour are upper bounds from
peak bandwidth and FLOPS; the "estimate" figures are those bounds times an assumed efficiency.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from engine.devices import Card, ChipSpec, HostCosts
from engine.planning.host_costs import estimated_per_hour
from engine.planning.memory import (
    GIB,
    activation_bytes,
    described_linears,
    described_weight_bytes,
    kv_cache_bytes,
    kv_tokens,
    non_torch_bytes,
    weight_bytes,
)
from engine.planning.request import PlanRequest, Quantization
from engine.planning.shapes import ModelShape
from engine.platforms import Platform, PlatformRefusal, find_card
from vlbatch.errors import PLAN_IMPOSSIBLE, VlbatchError

TP_CHOICES = (1, 2, 4, 8, 16)


class PlanError(VlbatchError):
    """The plan is impossible or the request contradicts the platform; the message says what would fit."""

    code = PLAN_IMPOSSIBLE


# ---- the plan ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    """Upper bounds from peak figures; ``estimate`` multiplies by the assumed efficiency, then adds the platform's
    host seconds to each item's time (``engine.planning.host_costs``; none on most platforms)."""

    decode_tokens_s_single: float
    decode_tokens_s_batched: float
    decode_bound_by: str
    prefill_tokens_s: float
    vision_images_s: float
    items_per_hour: float
    images_per_hour: float
    efficiency: float
    host_costs: HostCosts | None = None
    host_s_per_item: float = 0.0  # host_costs at the plan's output tokens

    @property
    def items_per_hour_estimate(self) -> float:
        return estimated_per_hour(self.items_per_hour, self.efficiency, self.host_s_per_item)

    @property
    def images_per_hour_estimate(self) -> float:
        if not self.host_s_per_item:
            return self.images_per_hour * self.efficiency
        return self.items_per_hour_estimate * self.images_per_hour / self.items_per_hour


@dataclass(frozen=True)
class EnginePlan:
    index: int
    device_ids: list[int]
    env: dict[str, str]
    engine_args: dict[str, object]


@dataclass(frozen=True)
class Plan:
    shape: ModelShape
    request: PlanRequest
    card: Card
    quantization: Quantization
    tp: int
    engines: list[EnginePlan]
    unused_device_ids: list[int]
    utilization: float
    total_bytes: int
    weight_bytes_total: int
    weight_bytes_per_rank: int
    activation_bytes_per_rank: int
    non_torch_bytes_per_rank: int
    kv_bytes_per_rank: int
    kv_bytes_per_token_per_rank: int
    kv_tokens: int
    max_concurrent_seqs: int
    max_num_seqs: int
    max_num_batched_tokens: int
    roofline: Roofline
    platform: Platform
    notes: list[str] = field(default_factory=list)

    @property
    def chip(self) -> ChipSpec:
        return self.card.chip

    @property
    def wh_per_1000_items(self) -> float | None:
        """Expected energy at the estimated throughput with every card at its data-sheet power (a ceiling:
        cards seldom draw their maximum); None when the card's power is not a checked figure."""
        power = self.card.power_w
        rate = self.roofline.items_per_hour_estimate * len(self.engines)
        if power.value <= 0 or power.kind == "unverified" or rate <= 0:
            return None
        return power.value * self.request.cards / rate * 1000


def _device_ids(card: Card, req: PlanRequest) -> list[int]:
    available = req.cards * card.chips_per_card
    if req.device_ids is None:
        return list(range(available))
    if len(set(req.device_ids)) != len(req.device_ids):
        raise PlanError(f"device ids {req.device_ids} repeat an id; each chip belongs to one engine")
    if len(req.device_ids) > available:
        raise PlanError(
            f"{len(req.device_ids)} device ids {req.device_ids} but cards={req.cards} x {card.chips_per_card} "
            f"chips per {card.key} = {available} chips"
        )
    return list(req.device_ids)


def _batched_tokens(req: PlanRequest, max_num_seqs: int) -> int:
    """Room for one whole prompt per step (images are not split across steps), rounded up to 1024."""
    need = max(2048, req.prompt_tokens)
    return max(min(-(-need // 1024) * 1024, req.max_model_len), max_num_seqs)


@dataclass(frozen=True)
class _Fit:
    weights: int
    act: int
    non_torch: int
    kv: int
    tokens: int


def _fit(
    shape: ModelShape,
    req: PlanRequest,
    platform: Platform,
    chip: ChipSpec,
    quant: Quantization,
    tp: int,
    util: float,
    description: Mapping[str, object] | None = None,
) -> _Fit:
    total = described_weight_bytes(shape, quant, description) if description else weight_bytes(shape, quant)
    weights = -(-total // tp)
    # The profile run samples max_num_seqs dummy requests; plan with the cap so the KV figure is not optimistic.
    mns = req.max_num_seqs or platform.max_num_seqs_cap
    act = activation_bytes(
        shape, req, tp=tp, max_num_seqs=mns, max_num_batched_tokens=_batched_tokens(req, mns), platform=platform
    )
    nt = non_torch_bytes(tp)
    kv = kv_cache_bytes(
        total_bytes=chip.memory_bytes,
        utilization=util,
        weights_bytes=weights,
        activation_bytes=act,
        non_torch_bytes=nt,
        halved=platform.kv_cache_halved(req.accounting),
    )
    per_tok = shape.text.kv_bytes_per_token(tp=tp)
    block = req.block_size or platform.kv_block_size
    return _Fit(weights, act, nt, kv, kv_tokens(kv, bytes_per_token=per_tok, block_size=block))


def _tp_ok(shape: ModelShape, tp: int) -> bool:
    return shape.text.heads % tp == 0


def _alternatives(
    shape: ModelShape,
    req: PlanRequest,
    platform: Platform,
    chip: ChipSpec,
    util: float,
    description: Mapping[str, object] | None,
) -> list[str]:
    found: list[str] = []
    for quant in ("fp16", "w8a8", "w4a8"):
        if quant not in chip.quantizations:
            continue
        # The checkpoint's own description sizes its own quantization; other quantizations are a re-export.
        desc = description if quant == req.quantization else None
        for tp in TP_CHOICES:
            if (
                _tp_ok(shape, tp)
                and _fit(shape, req, platform, chip, quant, tp, util, desc).tokens >= req.max_model_len
            ):
                found.append(f"{quant.upper()} on {tp} chip{'s' if tp > 1 else ''} (TP{tp})")
                break
    return found


def _no_fit_message(
    shape: ModelShape,
    req: PlanRequest,
    platform: Platform,
    chip: ChipSpec,
    util: float,
    n_chips: int,
    tried: list[int],
    description: Mapping[str, object] | None,
) -> str:
    """Why no layout in ``tried`` starts, in the numbers of the layout the user asked for (``--tp``), or else of
    the largest one tried (the one with the most memory per rank)."""
    tp = req.tensor_parallel_size or max(tried, default=1)
    f = _fit(shape, req, platform, chip, req.quantization, tp, util, description)
    usable = int(chip.memory_bytes * util)
    alts = _alternatives(shape, req, platform, chip, util, description)
    layout = f"TP{tp} (tensor_parallel_size={tp} as asked)" if req.tensor_parallel_size else f"TP{tp}"
    if f.kv > 0:
        left = f"leaving {f.tokens} KV tokens < max_model_len={req.max_model_len}"
    else:
        left = f"{-f.kv / GIB:.1f} GiB short before any KV cache (max_model_len={req.max_model_len})"
    smaller = ""
    if 0 < f.tokens < req.max_model_len and f.tokens >= req.seq_tokens:
        smaller = f"; or max_model_len <= {f.tokens} at TP{tp}"
    return (
        f"{shape.name} ({req.quantization.upper()}) does not fit {n_chips} x {chip.key} at {layout}: each chip holds "
        f"{f.weights / GIB:.1f} GiB weights + ~{f.act / GIB:.1f} GiB activation of the {usable / GIB:.1f} GiB that "
        f"gpu_memory_utilization={util} allows, {left}. "
        f"Would fit: {', '.join(alts) if alts else 'nothing up to 16 chips'}{smaller}"
    )


def _engine_args(
    shape: ModelShape,
    req: PlanRequest,
    platform: Platform,
    chip: ChipSpec,
    tp: int,
    util: float,
    mns: int,
    mnbt: int,
) -> dict[str, object]:
    args: dict[str, object] = {
        **platform.engine_defaults(chip),
        "tensor_parallel_size": tp,
        "max_model_len": req.max_model_len,
        "gpu_memory_utilization": util,
        "max_num_seqs": mns,
        "max_num_batched_tokens": mnbt,
        "limit_images_per_prompt": req.images_per_prompt if shape.vision else 0,
        "enable_prefix_caching": True,
        "enforce_eager": False,
    }
    v = shape.vision
    if v and req.images_per_prompt:
        unit = (v.patch_size * v.merge) ** 2
        max_px, min_px = req.visual_tokens_per_image * unit, 4 * unit
        if v.kind == "qwen3_vl":
            args["mm_processor_kwargs"] = {"size": {"longest_edge": max_px, "shortest_edge": min_px}}
        else:
            args["mm_processor_kwargs"] = {"max_pixels": max_px, "min_pixels": min_px}
    extra = platform.engine_extra(tp=tp, max_num_seqs=mns, quantization=req.quantization)
    if platform.eager_reason(req.cann_version):  # no graph capture on this stack: no graph options either
        args["enforce_eager"] = True
        extra.pop("compilation_config", None)
    args["extra"] = extra
    if req.dtype != "auto":
        args["dtype"] = req.dtype
    return args


def _env(
    platform: Platform,
    ids: list[int],
    tp: int,
    model_name: str,
    engine_args: dict[str, object],
    model_path: str | None,
) -> dict[str, str]:
    env = platform.launch_env(ids, tp)
    if model_path:
        env["VLBATCH_MODEL_PATH"] = model_path
    env["VLBATCH_MODEL_NAME"] = model_name
    env["VLBATCH_ENGINE"] = json.dumps(engine_args, separators=(",", ":"), sort_keys=True)
    if platform.index_merge_reason():  # the multimodal-merge fix this platform needs, said where it is deployed
        env["VLBATCH_MM_MERGE"] = "auto"
    return env


def _roofline(shape: ModelShape, req: PlanRequest, chip: ChipSpec, quant: Quantization, tp: int, mns: int) -> Roofline:
    t = shape.text
    text_weights = -(-(weight_bytes(shape, quant) - (shape.vision.params * 2 if shape.vision else 0)) // tp)
    kv_tok = t.kv_bytes_per_token(tp=tp)
    ctx = req.prompt_tokens + req.output_tokens / 2
    bw = chip.bandwidth_bytes_s
    int8 = quant in ("w8a8", "w4a8")
    dense_flops_per_token = 2 * (t.params - t.vocab * t.hidden * (1 if t.tied_embeddings else 2)) / tp
    dense_flops_per_token += 2 * t.vocab * t.hidden / tp  # the lm_head
    attn_flops_per_token = 4 * t.layers * t.q_dim * ctx / tp

    def step(b: int) -> tuple[float, str]:
        mem = (text_weights + b * ctx * kv_tok) / bw
        comp = b * (dense_flops_per_token / chip.flops(int8=int8) + attn_flops_per_token / chip.flops(int8=False))
        return (mem, "memory bandwidth") if mem >= comp else (comp, "compute")

    single, _ = step(1)
    batched, bound = step(mns)
    p = req.prompt_tokens
    prefill_s = p * dense_flops_per_token / chip.flops(int8=int8) + 2 * t.layers * t.q_dim * p * p / tp / chip.flops(
        int8=False
    )
    vision_s = 0.0
    if shape.vision and req.images_per_prompt and req.visual_tokens_per_image:
        vision_s = req.images_per_prompt * shape.vision.flops_per_image(req.visual_tokens_per_image) / tp
        vision_s /= chip.flops(int8=False)
    # Per engine: prefill and vision are compute bound and do not overlap; decode is shared by mns sequences.
    item_s = prefill_s + vision_s + req.output_tokens * batched / mns
    per_hour = 3600 / item_s
    return Roofline(
        decode_tokens_s_single=1 / single,
        decode_tokens_s_batched=mns / batched,
        decode_bound_by=bound,
        prefill_tokens_s=p / prefill_s,
        vision_images_s=(req.images_per_prompt / vision_s) if vision_s else 0.0,
        items_per_hour=per_hour,
        images_per_hour=per_hour * req.images_per_prompt,
        efficiency=req.efficiency,
    )


def resolve_card(req: PlanRequest, platform: Platform | None = None) -> tuple[Platform, Card]:
    """The card ``req`` names and the platform that runs it (``platform``'s own cards when one is given)."""
    if platform is not None:
        cards = platform.cards()
        if req.card not in cards:
            raise PlanError(f"unknown card {req.card!r} on {platform.name}; its cards: {', '.join(sorted(cards))}")
        return platform, cards[req.card]
    try:
        found, card = find_card(req.card)
    except KeyError as e:
        raise PlanError(str(e.args[0])) from None
    except PlatformRefusal as e:  # a measured card that cannot be measured here
        raise PlanError(str(e)) from None
    return found, card


def plan(
    shape: ModelShape,
    req: PlanRequest,
    *,
    model_path: str | None = None,
    quant_description: Mapping[str, object] | None = None,
    platform: Platform | None = None,
) -> Plan:
    """The layout, memory and launch arguments for ``shape`` on ``req``'s devices; ``PlanError`` if impossible.
    ``platform`` defaults to the one that runs ``req.card``; the planner asks it every platform fact."""
    platform, card = resolve_card(req, platform)
    chip = card.chip
    if req.quantization not in chip.quantizations:
        note = f"; {platform.quantization_note}" if platform.quantization_note else ""
        raise PlanError(
            f"{req.quantization.upper()} is not supported on {chip.key} (supported: "
            f"{', '.join(q.upper() for q in chip.quantizations)}){note}"
        )
    if shape.text.max_position and req.max_model_len > shape.text.max_position:
        raise PlanError(
            f"max_model_len={req.max_model_len} exceeds the model's max_position_embeddings="
            f"{shape.text.max_position} in config.json"
        )
    cap = platform.max_model_len_cap(shape)
    if cap is not None and req.max_model_len > cap[0]:
        raise PlanError(f"max_model_len={req.max_model_len} for {shape.name} on {chip.key}: {cap[1]}")
    try:
        platform.check_dtype(shape, req.dtype)
    except PlatformRefusal as e:
        raise PlanError(str(e)) from None
    try:
        util = platform.memory_utilization(req.gpu_memory_utilization, chip)
    except PlatformRefusal as e:
        raise PlanError(str(e)) from None
    ids = _device_ids(card, req)
    if req.block_size is None:
        req = req.model_copy(update={"block_size": platform.kv_block_size})
    notes: list[str] = []
    if shape.vision is None and req.images_per_prompt:
        # A text model takes no images: plan its items as text only rather than failing on a default.
        req = req.model_copy(update={"images_per_prompt": 0})
        notes.append(f"{shape.name} has no vision tower; planned with images_per_prompt=0")
    if req.tensor_parallel_size:
        tps = [req.tensor_parallel_size]
        if not _tp_ok(shape, req.tensor_parallel_size) or req.tensor_parallel_size > len(ids):
            raise PlanError(
                f"tensor_parallel_size={req.tensor_parallel_size} needs that many chips (have {len(ids)}) and must "
                f"divide num_attention_heads={shape.text.heads}"
            )
    else:
        tps = [tp for tp in TP_CHOICES if tp <= len(ids) and _tp_ok(shape, tp)]
    # Smallest TP whose KV cache takes one max_model_len sequence (vLLM refuses to start otherwise) and
    # min_concurrent_items whole items: an engine that holds two items decodes at batch 2, and splitting over
    # PCIe beats that. If no TP reaches the item target, the largest that starts is used.
    chosen: tuple[int, _Fit] | None = None
    for tp in tps:
        f = _fit(shape, req, platform, chip, req.quantization, tp, util, quant_description)
        if f.tokens >= req.max_model_len:
            chosen = (tp, f)
            if f.tokens // req.seq_tokens >= req.min_concurrent_items:
                break
    if chosen is None:
        raise PlanError(_no_fit_message(shape, req, platform, chip, util, len(ids), tps, quant_description))
    tp, f = chosen
    if f.tokens // req.seq_tokens < req.min_concurrent_items:
        notes.append(
            f"each engine holds only {f.tokens // req.seq_tokens} whole items (< min_concurrent_items="
            f"{req.min_concurrent_items}); more chips or W8A8 would batch better"
        )
    concurrent = f.tokens // req.seq_tokens
    mns = req.max_num_seqs or max(1, min(platform.max_num_seqs_cap, concurrent))
    if mns > concurrent:
        notes.append(
            f"max_num_seqs={mns} exceeds the {concurrent} full-length items the KV cache holds; the scheduler "
            "will preempt"
        )
    mnbt = _batched_tokens(req, mns)
    engines: list[EnginePlan] = []
    name = shape.name
    for i in range(len(ids) // tp):
        group = ids[i * tp : (i + 1) * tp]
        args = _engine_args(shape, req, platform, chip, tp, util, mns, mnbt)
        env = _env(platform, group, tp, name, args, model_path)
        engines.append(EnginePlan(index=i, device_ids=group, env=env, engine_args=args))
    unused = ids[len(engines) * tp :]
    if unused:
        notes.append(f"device ids {unused} are left idle: {len(ids)} chips do not split into TP{tp} groups")
    notes += platform.layout_notes(card, tp)
    mask = platform.attention_mask_bytes(req.max_model_len)
    if mask:
        notes.append(
            f"max_model_len={req.max_model_len} is set explicitly: the attention builds a full [max_model_len,"
            f" max_model_len] mask of {mask / 2**20:.0f} MiB at it (counted above); never leave it to the engine's"
            " auto-detection"
        )
    eager = platform.eager_reason(req.cann_version)
    if eager:
        notes.append(eager)
    if quant_description:
        listed = described_linears(quant_description)
        n_int8 = sum(1 for v in listed.values() if not v.startswith("FLOAT"))
        notes.append(
            f"weights from quant_model_description.json: {n_int8} of {shape.text.layers * 7} decoder linears "
            f"quantized, {len(listed) - n_int8} kept FLOAT"
        )
    rl = _roofline(shape, req, chip, req.quantization, tp, mns)
    costs = platform.host_costs()
    if costs is not None:
        rl = replace(rl, host_costs=costs, host_s_per_item=costs.item_seconds(req.output_tokens))
    return Plan(
        shape=shape,
        request=req,
        card=card,
        quantization=req.quantization,
        tp=tp,
        engines=engines,
        unused_device_ids=unused,
        utilization=util,
        total_bytes=chip.memory_bytes,
        weight_bytes_total=(
            described_weight_bytes(shape, req.quantization, quant_description)
            if quant_description
            else weight_bytes(shape, req.quantization)
        ),
        weight_bytes_per_rank=f.weights,
        activation_bytes_per_rank=f.act,
        non_torch_bytes_per_rank=f.non_torch,
        kv_bytes_per_rank=f.kv,
        kv_bytes_per_token_per_rank=shape.text.kv_bytes_per_token(tp=tp),
        kv_tokens=f.tokens,
        max_concurrent_seqs=concurrent,
        max_num_seqs=mns,
        max_num_batched_tokens=mnbt,
        roofline=rl,
        platform=platform,
        notes=notes,
    )
