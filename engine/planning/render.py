"""Render a ``Plan`` as text for people and as a docker compose file for machines.

The compose file is written by hand rather than with a YAML library: vlbatch does not depend on one, and JSON
string quoting is valid YAML, so every value goes through ``json.dumps``. What differs by platform (the KV
formula, launch notes, how a worker gets its chips and the host's driver files) is asked of ``plan.platform``.
"""

from __future__ import annotations

import json

from engine.planning.host_costs import describe
from engine.planning.memory import GIB
from engine.planning.planner import Plan

DEFAULT_IMAGE = "vlbatch:310p"


def _g(n: float) -> str:
    return f"{n / GIB:6.2f} GiB"


def _n(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def render_text(p: Plan) -> str:
    s, r, chip, rl = p.shape, p.request, p.chip, p.roofline
    n_eng = len(p.engines)
    accounting = p.platform.kv_accounting(r.accounting)
    costs = rl.host_costs
    float_name = "fp32" if p.engines and p.engines[0].engine_args.get("dtype") == "float32" else "fp16"
    plus_host = ", plus the platform's host costs per item" if costs is not None else ""
    vision = f", vision {s.vision.params / 1e9:.2f} B" if s.vision else ""
    lines = [
        f"vlbatch plan: {s.name} ({s.architecture}), {p.quantization.upper()}, on {r.cards} x {p.card.key} "
        f"({chip.key}, {chip.platform})",
        f"  model        {s.params / 1e9:.2f} B params (text {s.text.params / 1e9:.2f} B{vision}); "
        f"{s.text.layers} layers, {s.text.kv_heads} KV heads x {s.text.head_dim}",
        f"  item         {r.prompt_text_tokens} text + {r.images_per_prompt} x {r.visual_tokens_per_image} visual + "
        f"{r.output_tokens} output = {r.seq_tokens} tokens; max_model_len {r.max_model_len}",
        f"  layout       {n_eng} engine{'s' if n_eng != 1 else ''} x TP{p.tp}: "
        + " ".join("[" + ",".join(map(str, e.device_ids)) + "]" for e in p.engines)
        + (f"  (idle: {p.unused_device_ids})" if p.unused_device_ids else ""),
        "",
        "Memory per rank (exact arithmetic unless marked ~estimate)",
        f"  visible total           {_g(p.total_bytes)}  ({chip.memory_visible_mib.value:.0f} MiB, "
        f"{chip.memory_visible_mib.kind})",
        f"  x utilization {p.utilization:<9} {_g(p.total_bytes * p.utilization)}",
        f"  weights                 {_g(p.weight_bytes_per_rank)}  (total {_g(p.weight_bytes_total).strip()})",
        f"  activation peak       ~ {_g(p.activation_bytes_per_rank)}  (~estimate; the engine profiles it)",
        f"  non-torch             ~ {_g(p.non_torch_bytes_per_rank)}  (~estimate)",
        f"  KV cache                {_g(p.kv_bytes_per_rank)}  = {p.kv_tokens:,} tokens "
        f"({p.kv_bytes_per_token_per_rank / 1024:.0f} KiB/token/rank, blocks of {r.block_size})",
        f"                          {accounting}",
        f"  concurrency             {p.max_concurrent_seqs} whole items per engine -> max_num_seqs {p.max_num_seqs}",
        "",
        f"Rooflines per engine (upper bounds from peak figures; estimate = bound x {rl.efficiency}{plus_host})",
        f"  decode, 1 stream      <= {_n(rl.decode_tokens_s_single)} tokens/s  (memory bandwidth, "
        f"{chip.bandwidth_gbs.value:g} GB/s)",
        f"  {f'decode, {p.max_num_seqs} streams':<21} <= {_n(rl.decode_tokens_s_batched)} tokens/s  "
        f"({rl.decode_bound_by} bound)",
        f"  prefill               <= {_n(rl.prefill_tokens_s)} tokens/s  (compute, "
        f"{'int8' if p.quantization != 'fp16' else float_name} matmuls)",
    ]
    if rl.vision_images_s:
        lines.append(f"  vision encoder        <= {_n(rl.vision_images_s)} images/s  (compute, {float_name})")
    if costs is not None:
        lines.append(f"  host costs            + {describe(costs, r.output_tokens)}")
    wh = p.wh_per_1000_items
    energy = (
        f"~{wh:.1f} Wh per 1,000 items at the estimate ({r.cards} x {p.card.power_w.value:g} W, the data-sheet maximum)"
        if wh is not None
        else f"unknown Wh per 1,000 items (no checked power figure for {p.card.key})"
    )
    total = rl.items_per_hour * n_eng
    unit = "images" if r.images_per_prompt and s.vision else "documents"
    per_hour = rl.images_per_hour * n_eng if unit == "images" else total
    items_est, unit_est = total * rl.efficiency, per_hour * rl.efficiency
    if costs is not None:
        items_est = rl.items_per_hour_estimate * n_eng
        unit_est = rl.images_per_hour_estimate * n_eng if unit == "images" else items_est
    lines += [
        f"  items/hour            <= {_n(rl.items_per_hour)} per engine, {_n(total)} for {n_eng} "
        f"engine{'s' if n_eng != 1 else ''}; estimate ~{_n(items_est)}",
        f"  {unit + '/hour':<21} <= {_n(per_hour)} for {n_eng} engine{'s' if n_eng != 1 else ''}; "
        f"estimate ~{_n(unit_est)}",
        f"  energy                {energy}",
        "",
        "Figures used",
    ]
    figures = {**chip.figures(), **(costs.figures() if costs is not None else {})}
    for name, fig in figures.items():
        lines.append(f"  {name:<19} {fig.value:g}  [{fig.kind}] {fig.source}")
    lines += ["", "Launch (one block per engine; VLBATCH_ENGINE validates as engine.runtime.config.EngineConfig)"]
    for e in p.engines:
        lines.append(f"  # engine {e.index}: devices {e.device_ids}")
        for k, v in e.env.items():
            lines.append(f"  {k}={v if k != 'VLBATCH_ENGINE' else repr(v)}")
        lines.append("  vlbatch worker")
    lines += [f"  # {n}" for n in p.platform.launch_notes()]
    if p.notes:
        lines += ["", "Notes"] + [f"  - {n}" for n in p.notes]
    return "\n".join(lines) + "\n"


def _q(v: object) -> str:
    return json.dumps(v)


def render_compose(
    p: Plan, *, image: str = DEFAULT_IMAGE, model_dir: str = "/srv/models", data_dir: str = "/srv/data"
) -> str:
    """A complete compose file: api, redis, postgres and one worker per engine owning only its chips."""
    db_url = "postgresql+psycopg://vlbatch:vlbatch@postgres:5432/vlbatch"
    broker = "redis://redis:6379/0"
    model_path = f"/models/{p.shape.name}"
    out = [
        f"# Generated by `vlbatch plan ... --compose` for {p.shape.name} {p.quantization.upper()} on "
        f"{p.request.cards} x {p.card.key}: {len(p.engines)} engine(s) x TP{p.tp}.",
        p.platform.compose_comment(),
        "name: vlbatch",
        "services:",
        "  redis:",
        '    image: "redis:7-alpine"',
        "    restart: unless-stopped",
        "    healthcheck:",
        '      test: ["CMD", "redis-cli", "ping"]',
        "      interval: 10s",
        "      retries: 5",
        "  postgres:",
        '    image: "postgres:16-alpine"',
        "    restart: unless-stopped",
        "    environment:",
        '      POSTGRES_USER: "vlbatch"',
        '      POSTGRES_PASSWORD: "vlbatch"',
        '      POSTGRES_DB: "vlbatch"',
        "    volumes:",
        '      - "pgdata:/var/lib/postgresql/data"',
        "    healthcheck:",
        '      test: ["CMD", "pg_isready", "-U", "vlbatch"]',
        "      interval: 10s",
        "      retries: 5",
        "  api:",
        f"    image: {_q(image)}",
        "    restart: unless-stopped",
        '    command: ["vlbatch", "api", "--host", "0.0.0.0", "--port", "8000"]',
        '    ports: ["8000:8000"]',
        "    volumes:",
        f"      - {_q(f'{data_dir}:/data:ro')}",
        "    environment:",
        f"      VLBATCH_DATABASE_URL: {_q(db_url)}",
        f"      VLBATCH_BROKER_URL: {_q(broker)}",
        f"      VLBATCH_MODEL_NAME: {_q(p.shape.name)}",
        '      VLBATCH_ALLOWED_INPUT_ROOTS: "/data"',
        "    depends_on:",
        "      postgres: {condition: service_healthy}",
        "      redis: {condition: service_healthy}",
        "    healthcheck:",
        '      test: ["CMD", "/opt/vlbatch/deploy/healthcheck.sh", "api"]',
        "      interval: 30s",
        "      timeout: 20s",
        "      retries: 3",
    ]
    mounts = p.platform.compose_mounts()
    for e in p.engines:
        name = f"worker-{e.index}"
        out += [
            f"  {name}:",
            f"    image: {_q(image)}",
            "    restart: unless-stopped",
            f"    hostname: {_q(name)}",
            '    command: ["vlbatch", "worker"]',
            '    shm_size: "1g"',
        ]
        out += p.platform.compose_devices(e.device_ids)
        out.append("    volumes:")
        out.append(f"      - {_q(f'{model_dir}:/models:ro')}")
        out.append(f"      - {_q(f'{data_dir}:/data:ro')}")
        out += [f"      - {_q(m + ':ro')}" for m in mounts]
        out.append("    environment:")
        env = {
            **e.env,
            "VLBATCH_MODEL_PATH": model_path,
            "VLBATCH_DATABASE_URL": db_url,
            "VLBATCH_BROKER_URL": broker,
            "VLBATCH_ALLOWED_INPUT_ROOTS": "/data",
        }
        out += [f"      {k}: {_q(v)}" for k, v in env.items()]
        out += [
            "    depends_on:",
            "      postgres: {condition: service_healthy}",
            "      redis: {condition: service_healthy}",
            "    healthcheck:",
            # The script restarts the container (SIGTERM to PID 1, then restart: unless-stopped) after
            # consecutive failures, since plain docker compose never restarts an unhealthy container.
            '      test: ["CMD", "/opt/vlbatch/deploy/healthcheck.sh", "worker"]',
            "      interval: 60s",
            "      timeout: 45s",
            "      retries: 3",
            "      start_period: 900s",
        ]
    out += ["volumes:", "  pgdata: {}"]
    return "\n".join(out) + "\n"
