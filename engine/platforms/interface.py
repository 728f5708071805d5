"""The platform interface: what the planner, the doctor, the worker's preflight and telemetry ask of a device family.

Modelled on vLLM's ``vllm/platforms/interface.py``: one ``Platform`` subclass per device family, its facts as
class attributes, its behaviour as methods. Importing a platform module touches no device: a platform may run
its vendor's tool (npu-smi, nvidia-smi) and import its vendor SDK (torch_npu, pynvml, torch.cuda) only inside
methods.

What a platform hands back is plain data (``reports``: ``Chip``, ``Inventory``, ``Finding``, ``Check``,
``DeviceReading``), so no caller sees a vendor type, and no caller compares platform names: it asks the platform
instead. Its vendor tool runs through ``tools.run_tool``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from engine import devices
from engine.platforms.reports import (
    BAD_HEALTH,
    Check,
    Chip,
    DoctorContext,
    Finding,
    Inventory,
    Level,
    NullSampler,
    OpResult,
    Sampler,
    Status,
    ids_text,
)
from engine.platforms.tools import DiscoveryError, ToolNotFound
from vlbatch.errors import PLATFORM_REFUSAL, VlbatchError

if TYPE_CHECKING:
    from engine.planning.shapes import ModelShape
    from engine.platforms.power import PowerMeter


class PlatformRefusal(VlbatchError):
    """A request contradicts what the platform supports; the message says what it does support."""

    code = PLATFORM_REFUSAL


# ---- the interface ----------------------------------------------------------------------------------------------


class Platform:
    """A device family. Subclasses set the class attributes and override what differs; the defaults describe
    a plain accelerator with nothing special (no tool, no quirks)."""

    name: ClassVar[str] = "unspecified"  # the registry key, and ChipSpec.platform in device_specs.json
    family: ClassVar[str] = "unspecified"  # how messages name it: "310P", "910B", "CUDA", "CPU"
    device_type: ClassVar[str] = "cpu"  # torch's device type
    accelerator: ClassVar[bool] = True  # False only for the CPU platform
    device_control_env_var: ClassVar[str | None] = None  # the variable that selects the chips an engine sees
    # The extended resource a Kubernetes device plugin advertises, one unit per chip (None: no device request).
    kubernetes_resource: ClassVar[str | None] = None
    telemetry_source: ClassVar[str] = "none"  # "npu-smi", "nvidia-smi", "none"
    tool: ClassVar[str | None] = None  # the vendor tool messages name ("npu-smi shows chips ...")
    health_hint: ClassVar[str] = ""  # the command that shows a chip's health in detail
    busy_mb: ClassVar[int] = 1024  # memory in use on an idle chip stays below this; more means someone holds it
    implied_by: ClassVar[tuple[str, ...]] = ()  # installed distributions that mean this platform is expected
    runtime: ClassVar[str] = "torch"  # what runs the per-chip op, as messages name it

    # planner facts (per chip figures come from device_specs.json through cards())
    supported_dtypes: ClassVar[tuple[str, ...]] = ("auto", "float16", "bfloat16", "float32")
    memory_utilization_default: ClassVar[float] = 0.90
    memory_utilization_range: ClassVar[tuple[float, float] | None] = None
    memory_utilization_why: ClassVar[str] = ""
    max_num_seqs_cap: ClassVar[int] = 256
    kv_block_size: ClassVar[int] = 16
    quantization_note: ClassVar[str] = ""  # appended when a quantization is refused
    quantization_backend: ClassVar[str | None] = None  # vLLM's `quantization=` for W8A8/W4A8 checkpoints
    dry_run_card: ClassVar[str | None] = None  # the card a dry run plans for when none is named (None: ask for one)

    def __init__(
        self,
        *,
        npu_smi: str = "npu-smi",
        nvidia_smi: str = "nvidia-smi",
        root: Path = Path("/"),
        timeout_s: float = 15.0,
        notes: Sequence[str] = (),
    ) -> None:
        self.npu_smi = npu_smi
        self.nvidia_smi = nvidia_smi
        self.root = root
        self.timeout_s = timeout_s
        self.notes = tuple(notes)  # what detection found on the way (e.g. why no accelerator was taken)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    # ---- devices ----------------------------------------------------------------------------------------------

    def discover(self) -> Inventory:
        """The chips on this host. Raises :class:`ToolNotFound` or :class:`DiscoveryError` (with the fix)."""
        raise ToolNotFound(f"the {self.name} platform has no device discovery")

    def check_assignment(
        self,
        inv: Inventory,
        *,
        instances: Mapping[str, Sequence[int]],
        visible: Sequence[int] | None = None,
        tensor_parallel_size: int | None = None,
        busy_level: Level = "warning",
        whole_host: bool = True,
    ) -> list[Finding]:
        """Compare the chips present with the visibility variable and the configured instances.

        With no instances configured, the visible devices (or else the first ``tensor_parallel_size`` chips,
        which is what an engine takes by default) count as one instance. ``busy_level`` is "error" at worker
        start (nothing of ours runs yet) and "warning" in the doctor (the chip's holder may be our own worker).
        ``whole_host=False`` (worker start) leaves out chips no instance uses: they belong to other workers.
        """
        env = self.device_control_env_var or "VLBATCH_VISIBLE_DEVICES"
        tool = self.tool or "the platform"
        present = {c.device_id: c for c in inv.chips}
        idle = {d for d, c in present.items() if c.healthy and not self.is_busy(c)}
        found: list[Finding] = []
        derived = not instances
        if derived:
            default = list(visible) if visible else inv.device_ids[: tensor_parallel_size or 1]
            instances = {"default": default}
        if visible is not None:
            absent = sorted(set(visible) - present.keys())
            if absent:
                others = sorted(present.keys() - set(visible), key=lambda d: (d not in idle, d))  # idle first
                keep = [v for v in visible if v in present] + others[: len(absent)]
                found.append(
                    Finding(
                        "error",
                        f"{env} names {ids_text(absent)} but {tool} shows chips {ids_text(present.keys())}:"
                        f" set {env}={ids_text(keep)}",
                        kind="visible",
                    )
                )
        owned = {i for ids in instances.values() for i in ids}
        spare = sorted(present.keys() - owned)
        owners: dict[int, list[str]] = defaultdict(list)
        for name, ids in instances.items():
            for i in ids:
                owners[i].append(name)
            missing = sorted(set(ids) - present.keys())
            if missing and not (derived and visible):  # already reported against the visibility variable
                found.append(
                    Finding(
                        "error",
                        f"instance {name!r} is configured for chips {ids_text(ids)} but {ids_text(missing)} do not"
                        f" exist ({tool} shows {ids_text(present.keys())}): replace them with unused chips"
                        f" {ids_text(spare)}",
                        kind="missing",
                    )
                )
            if visible is not None and set(ids) - set(visible) - set(missing):
                outside = sorted(set(ids) - set(visible) - set(missing))
                found.append(
                    Finding(
                        "error",
                        f"instance {name!r} uses chips {ids_text(outside)} outside {env}={ids_text(visible)}:"
                        f" add them to {env} or take them out of the instance",
                        kind="outside",
                    )
                )
            if tensor_parallel_size is not None and len(ids) != tensor_parallel_size:
                found.append(
                    Finding(
                        "error",
                        f"instance {name!r} has {len(ids)} chips ({ids_text(ids)}) but tensor_parallel_size="
                        f"{tensor_parallel_size}: give it exactly {tensor_parallel_size} chips or change the engine's"
                        " tensor_parallel_size",
                        kind="size",
                    )
                )
        for dev, names in sorted(owners.items()):
            if len(names) > 1:
                found.append(
                    Finding(
                        "error",
                        f"chip {dev} is shared by instances {', '.join(repr(n) for n in names)}: each engine sizes"
                        " its KV cache from the same free memory and they run out; give every instance its own chips",
                        kind="shared",
                    )
                )
        free = sorted(idle - owners.keys())
        for dev, chip in sorted(present.items()):
            used = dev in owners
            if not used and not whole_host:
                continue
            if not chip.healthy:
                level: Level = "error" if used and chip.health.lower() in BAD_HEALTH else "warning"
                fix = "move the instance to a healthy chip" if used else "keep it out of every instance"
                hint = f" and check it with {self.health_hint}" if self.health_hint else ""
                found.append(Finding(level, f"{chip.label} health is {chip.health}: {fix}{hint}", kind="health"))
            if used and self.is_busy(chip):
                found.append(Finding(busy_level, self.busy_message(chip, free, env), kind="busy"))
        unused = sorted(d for d, c in present.items() if d not in owners and c.healthy)
        if unused and whole_host:
            found.append(
                Finding(
                    "warning",
                    f"chips {ids_text(unused)} are present and healthy but no instance uses them: add them to an"
                    f" instance or start another one with {env}={ids_text(unused)}",
                    kind="unused",
                )
            )
        return found

    def is_busy(self, chip: Chip) -> bool:
        """Held by another process: the tool lists a process on it, or more memory is in use than idle leaves."""
        return bool(chip.pids) or chip.memory_used_mb >= self.busy_mb

    def busy_message(self, chip: Chip, free: Sequence[int], env: str) -> str:
        if chip.pids:
            pids = " ".join(map(str, chip.pids))
            who = f" by pid {', '.join(map(str, chip.pids))}"
            stop = f"stop that process (kill {pids}, or stop the container that runs it)"
        else:
            who = " by a process not visible here"
            stop = f"stop the process holding it ({self.tool or 'the vendor tool'} on the host names its pid)"
        other = f", or give this engine free chips with {env}={ids_text(free)}" if free else ""
        return (
            f"{chip.label} already has {chip.memory_used_mb} of {chip.memory_total_mb} MB in use{who}:"
            f" an engine started there sizes its KV cache against memory it does not own; {stop}{other}"
        )

    def preflight(self, visible: Sequence[int] | None, tensor_parallel_size: int) -> list[Finding]:
        """Worker start (invariant 8): the chips this process was given exist, are healthy and are not held by
        another process; any error means refuse to start. Chips it was not given belong to other workers, so
        "unused" is not reported."""
        tool = self.tool or "tool"
        try:
            inv = self.discover()
        except ToolNotFound as e:
            return [Finding("error", f"{e}; without it the {self.family} chips cannot be checked", kind=tool)]
        except DiscoveryError as e:
            return [Finding("error", str(e), kind=tool)]
        return self.check_assignment(
            inv,
            instances={},
            visible=visible,
            tensor_parallel_size=tensor_parallel_size,
            busy_level="error",
            whole_host=False,
        )

    def sampler(self, devices: Sequence[int] | None) -> Sampler:
        """The telemetry source for the chips this worker owns (all chips when ``devices`` is None)."""
        return NullSampler()

    def power_meter(self, devices: Sequence[int] | None) -> PowerMeter:
        """What the chips this worker owns draw: by default its share of the telemetry sampler's ``power_w``
        over every chip (a card's figure is split between its chips), unknown when there is no sampler."""
        from engine.platforms.power import ReadingsPower, UnknownPower

        sampler = self.sampler(None)
        if isinstance(sampler, NullSampler):
            return UnknownPower()
        return ReadingsPower(sampler, devices=devices, source=self.telemetry_source)

    def tiny_op(self) -> tuple[list[OpResult], str | None]:
        """A 16-element add on every visible chip: (results, reason skipped or None)."""
        return [], f"the {self.name} platform has no per-chip op"

    # ---- planner facts ----------------------------------------------------------------------------------------

    def cards(self) -> dict[str, devices.Card]:
        """The cards of this platform in device_specs.json (a plugin overrides this to bring its own)."""
        return {k: c for k, c in devices.cards().items() if c.chip.platform == self.name}

    def card_keys(self) -> list[str]:
        """The names of :meth:`cards`, without building them (a measured card is only probed when planned for)."""
        return list(self.cards())

    def host_costs(self) -> devices.HostCosts | None:
        """The engine's host time per item and per output token beside the roofline; None where it is not
        modelled (no source for it: the plan is the roofline at the assumed efficiency alone)."""
        return None

    def dtype(self, chip: devices.ChipSpec) -> str:
        """The engine dtype for ``chip``: bfloat16 where chip and platform have it, else float16."""
        return "bfloat16" if chip.bf16 and "bfloat16" in self.supported_dtypes else "float16"

    def memory_utilization(self, requested: float | None, chip: devices.ChipSpec) -> float:
        """The usable fraction of the chip's memory; :class:`PlatformRefusal` outside the platform's range."""
        u = requested or self.memory_utilization_default
        if self.memory_utilization_range is not None:
            lo, hi = self.memory_utilization_range
            if not lo <= u <= hi:
                why = f"; {self.memory_utilization_why}" if self.memory_utilization_why else ""
                raise PlatformRefusal(f"gpu_memory_utilization={u} on {chip.key}: use {lo}-{hi}{why}")
        return u

    def attention_mask_bytes(self, max_model_len: int) -> int:
        """Bytes the attention backend allocates per max_model_len during the profile run (0 for most)."""
        return 0

    def kv_cache_halved(self, accounting: str) -> bool:
        """Whether the engine gives the KV cache half of what is left (vllm-ascend's 310P worker since 0.18)."""
        return False

    def kv_accounting(self, accounting: str) -> str:
        """The engine's KV formula, as the plan prints it."""
        return "util x total - weights - activation - non-torch"

    def check_dtype(self, shape: ModelShape, requested: str) -> None:
        """:class:`PlatformRefusal` when the platform cannot run ``shape`` in the ``requested`` engine dtype."""
        if requested != "auto" and requested not in self.supported_dtypes:
            raise PlatformRefusal(
                f"dtype {requested} for {shape.name} on {self.family}: it runs {' / '.join(self.supported_dtypes)}"
            )

    def eager_reason(self, cann_version: str | None) -> str | None:
        """Why this platform must run eager (no graph capture) with this software stack, or None."""
        return None

    def max_model_len_cap(self, shape: ModelShape) -> tuple[int, str] | None:
        """(cap, why: who says so) when the platform supports this model only up to a context length."""
        return None

    def graph_capture_sizes(self, max_num_seqs: int, tp: int) -> list[int]:
        sizes = [s for s in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if s < max_num_seqs]
        return [*sizes, max_num_seqs]

    def engine_defaults(self, chip: devices.ChipSpec) -> dict[str, object]:
        """Engine arguments this platform starts with (``engine.runtime.config.EngineConfig`` fields)."""
        return {"dtype": self.dtype(chip), "gpu_memory_utilization": self.memory_utilization_default}

    def engine_extra(self, *, tp: int, max_num_seqs: int, quantization: str) -> dict[str, object]:
        """Further vllm.LLM keyword arguments (``EngineConfig.extra``)."""
        extra: dict[str, object] = {
            "compilation_config": {"cudagraph_capture_sizes": self.graph_capture_sizes(max_num_seqs, tp)}
        }
        if quantization != "fp16" and self.quantization_backend:
            extra["quantization"] = self.quantization_backend
        return extra

    def launch_env(self, device_ids: Sequence[int], tp: int) -> dict[str, str]:
        """The environment one engine worker starts with, beginning with the visibility variable."""
        if self.device_control_env_var is None:
            return {}
        return {self.device_control_env_var: ",".join(str(i) for i in device_ids)}

    def layout_notes(self, card: devices.Card, tp: int) -> list[str]:
        return []

    def launch_notes(self) -> list[str]:
        return []

    def index_merge_reason(self) -> str | None:
        """Why this platform needs vLLM's multimodal merge done with integer indices (``engine.platforms.mm_merge``,
        applied by ``VLBATCH_MM_MERGE=auto``), or None when vLLM's own boolean-mask merge runs fine here."""
        return None

    def crash_remedies(self) -> list[str]:
        """Known fixes for an engine that crashes on every request of a kind on this platform (the worker's canary
        failed): shown by the worker's log, an embedded run's exit message and ``vlbatch doctor --canary``."""
        return []

    def compose_devices(self, device_ids: Sequence[int]) -> list[str]:
        """Lines of a compose service (indented 4) that give a worker its chips and no others."""
        return []

    def compose_mounts(self) -> tuple[str, ...]:
        """host:container paths every worker needs from the host (drivers, tools)."""
        return ()

    def compose_comment(self) -> str:
        return "# Each worker sees only its own chips."

    # ---- doctor -----------------------------------------------------------------------------------------------

    def doctor_checks(self, ctx: DoctorContext) -> list[Check]:
        """The doctor's device lines for this platform: chips, assignment, dtype, per-chip op."""
        try:
            inv = ctx.discover() if ctx.discover else self.discover()
        except ToolNotFound as e:
            if ctx.required:
                return [Check("fail", f"no {self.family} device found: {e}")]
            return [Check("info", f"no {self.family} device found: {e}; device checks skipped")]
        except DiscoveryError as e:
            return [Check("fail", str(e))]
        return self.device_checks(ctx, inv) + self.tiny_op_checks(ctx)

    def device_checks(self, ctx: DoctorContext, inv: Inventory) -> list[Check]:
        checks = []
        for c in inv.chips:
            temp = f", {c.temp_c} C" if c.temp_c is not None else ""
            status: Status = "ok" if c.healthy else "warn"
            checks.append(Check(status, f"{c.label}: {c.health}, {c.free_mb} MB free of {c.memory_total_mb}{temp}"))
            if c.temp_c is not None and c.temp_c >= ctx.thermal_limit_c:
                checks.append(
                    Check(
                        "warn",
                        f"{c.label} is at {c.temp_c} C, above thermal_limit_c={ctx.thermal_limit_c}: check cooling",
                    )
                )
        for f in self.check_assignment(
            inv, instances=ctx.instances, visible=ctx.visible, tensor_parallel_size=ctx.tensor_parallel_size
        ):
            checks.append(Check("fail" if f.level == "error" else "warn", f.message))
        if ctx.dtype is not None and ctx.dtype not in self.supported_dtypes:
            only = " / ".join(self.supported_dtypes)
            fix = json.dumps({"dtype": self.supported_dtypes[0]})
            checks.append(
                Check(
                    "fail",
                    f"engine dtype is {ctx.dtype} but {self.family} runs {only} only: set VLBATCH_ENGINE='{fix}'",
                )
            )
        return checks

    def tiny_op_checks(self, ctx: DoctorContext) -> list[Check]:
        results, skipped = ctx.tiny_op() if ctx.tiny_op else self.tiny_op()
        if skipped:
            return [Check("info", f"per-chip op skipped: {skipped}")]
        checks = []
        dev = self.device_type
        hint = self.health_hint or "the driver"
        for r in results:
            if r.error:
                checks.append(Check("fail", f"{dev}:{r.index} failed a 16-element add ({r.error}): check {hint}"))
            else:
                checks.append(Check("ok", f"{dev}:{r.index} ran a 16-element add; {r.free_mb} MB free of {r.total_mb}"))
        env = self.device_control_env_var or "the visible devices"
        return checks or [Check("fail", f"{self.runtime} sees no device: check {env} and the --device flags")]
