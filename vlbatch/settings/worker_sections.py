"""The worker sections: scheduling, the served model, the worker, its engine, breaker, devices, telemetry and
thermal gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from vlbatch.settings.section import Section, split_commas

QueueKind = Literal["interactive", "batch", "documents"]


class Scheduling(Section):
    """Chunks, leases, re-sending and fair shares (jobs, vlbatch.db)."""

    chunk_size: int = Field(32, ge=1, le=10_000, description="Items per chunk (one task message).")
    document_chunk_size: int = Field(
        2, ge=1, le=100, description="Documents per chunk (one task message); they run side by side in a worker."
    )
    lease_seconds: int = Field(
        120,
        ge=5,
        description="How long a claimed chunk stays owned without renewal; a worker renews its leases every "
        "quarter of this while it holds the chunk, so this is how soon a dead worker's chunks are taken over.",
    )
    reconcile_interval_s: float = Field(
        30.0, gt=0, description="How often workers (and the API, see api_reconcile) look for lost chunks."
    )
    unclaimed_resend_s: float = Field(
        60.0,
        gt=0,
        description="A chunk sent and not claimed within this is sent again (its message may be lost), then after "
        "twice this, and so on up to 32 times: chunks for a model no worker serves are not re-sent every pass.",
    )
    api_reconcile: bool = Field(
        True, description="The API process runs the reconciler too: chunks whose send failed go out with no worker up."
    )
    tenant_shares: dict[str, float] = Field(
        default_factory=dict,
        description="Each tenant's weight in a queue's fair shares (default 1), e.g. '{\"acme\": 2}': a tenant "
        "of weight 2 gets two claims for every one of a weight-1 tenant while both have work in the queue.",
    )
    fair_share_window_s: float = Field(
        600.0,
        gt=0,
        description="How far back a queue's fair shares count each job's and tenant's claims: work done longer "
        "ago gives no head start.",
    )


class Model(Section):
    """The model a worker serves, and what a job for a model nobody serves gets."""

    model_path: str | None = Field(None, description="Model directory served by this worker.")
    model_name: str | None = Field(None, description="Served model name; defaults to the directory name.")
    model_not_served: Literal["warn", "refuse"] = Field(
        "warn",
        description="A new job for a model no live worker serves, while other workers are live (their engine samples "
        "of the last few VLBATCH_ENGINE_SAMPLE_INTERVAL_S): warn (the job is made and its answer's `warnings` says so) "
        "or refuse it (409 model_not_served). With no live worker at all nothing is said: workers may be starting.",
    )

    @property
    def served_model_name(self) -> str | None:
        if self.model_name:
            return self.model_name
        return Path(self.model_path).name if self.model_path else None


class Worker(Section):
    """An engine worker's queues, threads, drain and samples."""

    worker_queues: Annotated[list[QueueKind], NoDecode] = Field(
        default_factory=lambda: list(get_args(QueueKind)),
        description="Which of this model's queues a worker takes (comma separated), e.g. documents.",
    )
    worker_concurrency: int = Field(
        2,
        ge=1,
        le=8,
        description="Celery task threads per engine worker. A task only leases its chunk into the feeder (which "
        "holds as many chunks as keep the engine full), so 2 is enough.",
    )
    drain_timeout_s: float = Field(
        60.0, ge=0, description="On SIGTERM: how long held chunks may finish before the rest is handed back."
    )
    engine_sample_interval_s: float = Field(
        10.0, gt=0, le=3600, description="How often a worker stores its engine occupancy and feeder counters."
    )
    heartbeat_file: Path | None = Field(
        None, description="Touched while the engine makes progress or idles; the health check reads its age."
    )

    @field_validator("worker_queues", mode="before")
    @classmethod
    def _split_queues(cls, value: object) -> object:
        return split_commas(value)


class Runtime(Section):
    """The engine: its arguments, sizing on a CPU host, load ledger and hang limits."""

    engine: dict[str, object] = Field(
        default_factory=dict,
        description="Engine arguments (see engine.runtime.config.EngineConfig), "
        'e.g. VLBATCH_ENGINE=\'{"dtype": "float16"}\'.',
    )
    cpu_kv_cache_share: float = Field(
        0.25,
        gt=0,
        le=0.9,
        description="On a CPU host, the largest share of available memory (MemAvailable) the KV cache of an engine "
        "(worker, tag, docs, run-batch, eval) takes when neither --engine nor VLBATCH_ENGINE sizes it; less when the "
        "model's max_num_seqs full-length sequences need less. An unset max_model_len is lowered to what it holds.",
    )
    engine_load_ledger: Path | None = Field(
        None,
        description="A file every engine load of this process appends a line to (engine.runtime.load_ledger); the test "
        "suite sets one for its whole run and reports the count.",
    )
    engine_stall_s: float = Field(
        300.0, gt=0, description="An engine with work in flight and no finished step for this long is hung."
    )
    canary_timeout_s: float = Field(
        120.0,
        gt=0,
        description="A canary request (one image, one text prompt after each load) unanswered this long"
        " means the engine hangs: engine_canary_failed.",
    )


class Breaker(Section):
    """The engine breaker: when a worker stops reloading a broken deployment."""

    breaker_crashes: int = Field(
        3,
        ge=2,
        le=100,
        description="Consecutive engine crashes, each running alone on a different item with no answer between,"
        " that mean the deployment is broken: the worker's breaker opens (no claims, held items go back uncharged).",
    )
    engine_loads_per_hour: int = Field(
        20, ge=1, description="At most this many engine loads per hour per worker; past it the breaker opens."
    )
    breaker_backoff_s: float = Field(
        30.0, gt=0, description="Wait before the first reload after the breaker opens; doubles on every failed canary."
    )
    breaker_backoff_max_s: float = Field(
        900.0, gt=0, description="The longest wait between reloads while the breaker is open."
    )


class Devices(Section):
    """Devices and their environment. The vendor variables are read here, and only here."""

    visible_devices: Annotated[list[int] | None, NoDecode] = Field(
        None,
        validation_alias=AliasChoices("VLBATCH_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"),
        description="Logical device ids this process may use (npu-smi's Device column), e.g. 0,1,4,5.",
    )
    instances: dict[str, list[int]] = Field(
        default_factory=dict,
        description='Engine instances on this host and the device ids each owns, e.g. \'{"a": [0, 1], "b": [4, 5]}\'.',
    )
    npu_smi: str = Field("npu-smi", description="The npu-smi binary (name on PATH or a path).")
    platform: str | None = Field(
        None,
        description="Device platform (engine.platforms): ascend-310p, ascend-910b, cuda or cpu; detected when unset"
        " (npu-smi or /dev/davinci* -> Ascend, nvidia-smi with a GPU -> CUDA, else CPU).",
    )
    mm_merge: Literal["auto", "index", "off"] = Field(
        "auto",
        description="vLLM's multimodal merge inside the engine (engine/platforms/mm_merge.py, a vLLM plugin): auto"
        " replaces its boolean-mask assignment with an index_copy_ where the platform needs it (310P, vllm-ascend"
        " #12086) unless the installed vllm-ascend fixes it itself; index replaces it everywhere; off never.",
    )
    hccl_if_ip: str | None = Field(
        None, validation_alias=AliasChoices("VLBATCH_HCCL_IF_IP", "HCCL_IF_IP"), description="HCCL's bind address."
    )
    hccl_socket_ifname: str | None = Field(
        None, validation_alias=AliasChoices("VLBATCH_HCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
    )
    gloo_socket_ifname: str | None = Field(
        None, validation_alias=AliasChoices("VLBATCH_GLOO_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
    )
    tp_socket_ifname: str | None = Field(
        None, validation_alias=AliasChoices("VLBATCH_TP_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
    )
    ascend_toolkit_home: Path | None = Field(
        None,
        validation_alias=AliasChoices("VLBATCH_ASCEND_TOOLKIT_HOME", "ASCEND_TOOLKIT_HOME"),
        description="CANN install (set by set_env.sh); doctor reads its version files.",
    )

    @field_validator("visible_devices", mode="before")
    @classmethod
    def _split_devices(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return [int(p) for p in value.split(",") if p.strip()]
            except ValueError:
                msg = f"visible devices {value!r} must be integers separated by commas, e.g. 0,1,4,5"
                raise ValueError(msg) from None
        return value


class Telemetry(Section):
    """Chip samples, energy and its price."""

    telemetry_interval_s: float = Field(10.0, gt=0, le=3600, description="How often a worker samples its chips.")
    energy_interval_s: float = Field(
        10.0, gt=0, le=3600, description="How often an engine worker reads its chips' power and books it to jobs."
    )
    price_per_kwh: float | None = Field(None, ge=0, description="Electricity price per kWh; jobs then show a cost.")


class Thermal(Section):
    """The thermal gate."""

    # The busy 300I Duo sample in tests/engine/fixtures ran at 78-86 C under load, so the limit sits above that.
    thermal_limit_c: float = Field(95.0, gt=0, le=150, description="Stop claiming chunks when a chip reaches this.")
    thermal_resume_c: float = Field(88.0, gt=0, le=150, description="Claim again once every chip is at or below this.")
    thermal_max_wait_s: float = Field(600.0, ge=0, description="Longest a task waits for its chips to cool.")

    @model_validator(mode="after")
    def _thermal_hysteresis(self) -> Thermal:
        if self.thermal_resume_c >= self.thermal_limit_c:
            raise ValueError(
                f"thermal_resume_c={self.thermal_resume_c} must be below thermal_limit_c={self.thermal_limit_c}"
                " (the gap is the hysteresis that stops the gate flapping)"
            )
        return self
