"""Two-host rehearsal on one machine: two worker "hosts", inputs only in object storage, one killed mid-job.

What runs, each as its own process: an S3-compatible server on loopback (moto's server mode: MinIO is not in the
package registries this project installs from), one API (``vlbatch api``), and two engine workers, each with its
own scratch folder (working directory, TMPDIR, data dir) and no input root at all: every photo is an ``s3://``
object. PostgreSQL and Redis are the machine's own (a fresh database per run, queues named after a fresh model).

The workers are the real ``vlbatch worker`` (Celery, feeder, leases, reconciler, writer) with a stand-in engine in
place of vLLM: it answers every request with the same tags after one step of ``--step-s`` seconds, so the run
measures the cluster's bookkeeping, not a model. A ``--items`` job (a few of them corrupt) is submitted as one
``s3://`` folder; once ``--kill-at`` of it is done, host A is SIGKILLed; host B finishes the job. The table then
says, exactly: succeeded + failed against total, result rows per item, items claimed more than once, the
generations each host ran (counted by its engine as they finish), and how many were run twice against what the
lease rules allow (the items of the chunks host A held when it died).

Usage: python benchmarks/two_hosts.py [--items 2000] [--redis-url redis://127.0.0.1:6379/0]
       [--pg-url postgresql://127.0.0.1:5432/test] [--kill-at 0.3] [--step-s 0.02]
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness.children import api_process, child_env, free_port, stop_group

ROOT = Path(__file__).resolve().parent.parent
TINY_MODEL = ROOT / "cli" / "assets" / "tiny-tagger-qwen2-vl"  # its chat template and vision geometry only
BUCKET, PREFIX = "rehearsal", "album"
BAD_EVERY = 100  # one corrupt photo in this many: failures must be accounted for too


# ---- the stand-in engine (worker processes) -------------------------------------------------------------------


@dataclass
class _Completion:
    text: str = '{"tags": ["sky", "sea"]}'
    token_ids: list[int] = field(default_factory=lambda: [1, 2, 3])
    finish_reason: str = "stop"


@dataclass
class _Output:
    request_id: str
    prompt_token_ids: list[int] = field(default_factory=lambda: [0] * 16)
    finished: bool = True
    outputs: list[_Completion] = field(default_factory=lambda: [_Completion()])


class StandInEngine:
    """vLLM's ``add_request``/``step`` surface: a request finishes on the step after it was added. Every finished
    request is counted in ``count_file`` as it finishes, so a SIGKILL leaves the count of what this host ran."""

    def __init__(self, count_file: Path, step_s: float) -> None:
        self.running: dict[str, int] = {}
        self.count_file = count_file
        self.step_s = step_s
        self.finished = 0

    def add_request(self, request_id: str, prompt: dict[str, Any], params: Any) -> None:
        self.running[request_id] = 0

    def step(self) -> list[_Output]:
        time.sleep(self.step_s)
        done = [rid for rid, age in self.running.items() if age >= 1]
        for rid in self.running:
            self.running[rid] += 1
        for rid in done:
            del self.running[rid]
        if done:
            self.finished += len(done)
            tmp = self.count_file.with_suffix(".tmp")
            tmp.write_text(str(self.finished))
            tmp.replace(self.count_file)
        return [_Output(rid) for rid in done]


def run_worker(count_file: Path, step_s: float) -> None:
    """``vlbatch worker`` with the stand-in engine loaded in place of vLLM."""
    from engine.runtime.config import EngineConfig
    from engine.runtime.runner import EngineRunner
    from vlbatch.settings import Settings
    from worker import celery_worker
    from worker.startup import build_context

    def load_context(settings: Settings) -> Any:
        runner = EngineRunner(
            EngineConfig(model=str(TINY_MODEL), max_num_seqs=32),
            engine_factory=lambda: StandInEngine(count_file, step_s),
        )
        return build_context(settings, runner, model_dir=TINY_MODEL)

    celery_worker.load_context = load_context
    celery_worker.main()


# ---- the rehearsal (the driving process) ----------------------------------------------------------------------


def _wait_port(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout_s:.0f} s")


def _photo(n: int) -> bytes:
    from PIL import Image

    if n % BAD_EVERY == BAD_EVERY - 1:
        return b"not an image at all"
    out = io.BytesIO()
    Image.new("RGB", (48 + n % 7 * 8, 40 + n % 5 * 8), ((n * 37) % 256, (n * 11) % 256, 90)).save(out, "JPEG")
    return out.getvalue()


def _upload(endpoint: str, env: dict[str, str], items: int) -> None:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )
    s3.create_bucket(Bucket=BUCKET)
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(lambda n: s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/p{n:05d}.jpg", Body=_photo(n)), range(items))
        )


def _spawn(args: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args],
        env=env,
        cwd=cwd,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _count(path: Path) -> int:
    return int(path.read_text()) if path.exists() else 0


@dataclass
class Rehearsal:
    args: argparse.Namespace
    work: Path
    procs: ExitStack = field(default_factory=ExitStack)  # stopped last started first

    def run(self) -> int:
        import httpx
        import psycopg
        from sqlalchemy import create_engine, text

        a = self.args
        db_name = f"vlbatch_two_hosts_{uuid.uuid4().hex[:8]}"
        admin = psycopg.connect(a.pg_url, autocommit=True)
        admin.execute(f'CREATE DATABASE "{db_name}"')
        base = a.pg_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
        db_url = f"{base}/{db_name}"
        model = f"rehearsal-{uuid.uuid4().hex[:6]}"
        s3_port = free_port()
        endpoint = f"http://127.0.0.1:{s3_port}"
        settings = {
            "PYTHONPATH": str(ROOT),
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "rehearsal",
            "AWS_SECRET_ACCESS_KEY": "rehearsal-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "VLBATCH_DATABASE_URL": db_url,
            "VLBATCH_BROKER_URL": a.redis_url,
            "VLBATCH_MODEL_NAME": model,
            "VLBATCH_MODEL_PATH": str(TINY_MODEL),
            "VLBATCH_ALLOWED_S3_PREFIXES": f"s3://{BUCKET}/{PREFIX}",
            "VLBATCH_AUTH": "off",
            "VLBATCH_CHUNK_SIZE": str(a.chunk_size),
            "VLBATCH_LEASE_SECONDS": "15",
            "VLBATCH_RECONCILE_INTERVAL_S": "3",
            "VLBATCH_UNCLAIMED_RESEND_S": "20",
        }
        env = child_env(settings, drop=("VLBATCH_", "AWS_"))
        try:
            t0 = time.monotonic()
            s3_args = ["-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)]
            self.procs.callback(stop_group, _spawn(s3_args, env, self.work, self.work / "s3.log"), grace_s=90)
            _wait_port(s3_port)
            _upload(endpoint, env, a.items)
            print(f"uploaded {a.items} photos to s3://{BUCKET}/{PREFIX} in {time.monotonic() - t0:.1f} s", flush=True)
            api_dir = self.work / "api"
            api_dir.mkdir()
            api_env = env | {"VLBATCH_DATA_DIR": str(api_dir / "data")}
            api = self.procs.enter_context(api_process(api_env, self.work / "api.log", cwd=api_dir, ready_s=120))
            hosts = {}
            for name in ("a", "b"):
                scratch = self.work / f"host-{name}"
                (scratch / "tmp").mkdir(parents=True)
                host_env = env | {
                    "TMPDIR": str(scratch / "tmp"),
                    "VLBATCH_DATA_DIR": str(scratch / "data"),
                    "VLBATCH_CELERY_NODE": f"host-{name}@%h",
                }
                worker_args = [
                    str(Path(__file__)),
                    "--as-worker",
                    str(scratch / "generations"),
                    "--step-s",
                    str(a.step_s),
                ]
                hosts[name] = (_spawn(worker_args, host_env, scratch, scratch / "worker.log"), scratch / "generations")
                self.procs.callback(stop_group, hosts[name][0], grace_s=90)
            client = httpx.Client(base_url=api.base, timeout=60)
            body = {"model": model, "directory": f"s3://{BUCKET}/{PREFIX}", "options": {"max_tags": 3}}
            t_submit = time.monotonic()
            response = client.post("/v1/jobs/tagging", json=body)
            if response.status_code >= 300:
                raise SystemExit(f"job refused: {response.status_code} {response.text}")
            job = response.json()
            print(
                f"job {job['id']}: {job['total']} items, submitted in {time.monotonic() - t_submit:.1f} s", flush=True
            )
            proc_a, count_a = hosts["a"]
            proc_b, count_b = hosts["b"]
            deadline = time.monotonic() + a.timeout_s
            while True:
                counts = client.get(f"/v1/jobs/{job['id']}").json()["counts"]
                done = counts["succeeded"] + counts["failed"]
                if done >= a.kill_at * job["total"] and _count(count_a) and _count(count_b):
                    break
                for name, (proc, _) in hosts.items():
                    if proc.poll() is not None:
                        raise SystemExit(f"host {name} exited early; see {self.work}/host-{name}/worker.log")
                if time.monotonic() > deadline:
                    raise SystemExit(f"job not {a.kill_at:.0%} done in {a.timeout_s:.0f} s: {counts}")
                time.sleep(0.2)
            engine = create_engine(db_url)
            owner = f"%:{proc_a.pid}:%"  # lease owners read host:pid:token
            held_sql = text(
                "SELECT count(*) FROM items i JOIN chunks c ON c.id = i.chunk_id WHERE c.lease_owner LIKE :o "
                "AND i.status NOT IN ('succeeded', 'failed')"
            )
            with engine.connect() as conn:
                held_before = conn.execute(held_sql, {"o": owner}).scalar_one()
            os.killpg(proc_a.pid, signal.SIGKILL)
            proc_a.wait(30)
            killed_at_done = done
            with engine.connect() as conn:
                held = max(held_before, conn.execute(held_sql, {"o": owner}).scalar_one())
            print(
                f"SIGKILLed host A with {killed_at_done}/{job['total']} done and {held} items in its leased chunks",
                flush=True,
            )
            while client.get(f"/v1/jobs/{job['id']}").json()["status"] != "finished":
                if proc_b.poll() is not None:
                    raise SystemExit(f"host b exited; see {self.work}/host-b/worker.log")
                if time.monotonic() > deadline:
                    raise SystemExit(f"job not finished in {a.timeout_s:.0f} s")
                time.sleep(0.5)
            elapsed = time.monotonic() - t_submit
            time.sleep(1)  # host B's engine count file catches up with its last step
            counts = client.get(f"/v1/jobs/{job['id']}").json()["counts"]
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT count(*), count(DISTINCT item_id) FROM results")).one()
                again = conn.execute(text("SELECT count(*) FROM items WHERE attempts > 1")).scalar_one()
                codes: dict[str, int] = dict(
                    conn.execute(
                        text("SELECT error_code, count(*) FROM items WHERE status = 'failed' GROUP BY error_code")
                    ).all()
                )
            engine.dispose()
            gens_a, gens_b = _count(count_a), _count(count_b)
            engine_items = counts["succeeded"]  # failed items here are corrupt photos: refused before the engine
            twice = gens_a + gens_b - engine_items
            ok = (
                counts["succeeded"] + counts["failed"] == job["total"]
                and rows[0] == rows[1] == job["total"]
                and 0 <= twice <= held
                and set(codes) <= {"decode_error"}
            )
            table = [
                ("items", job["total"]),
                ("succeeded", counts["succeeded"]),
                ("failed", f"{counts['failed']} {codes}"),
                ("succeeded + failed", counts["succeeded"] + counts["failed"]),
                ("result rows / items with a result", f"{rows[0]} / {rows[1]}"),
                ("items claimed more than once", again),
                ("done when host A was SIGKILLed", killed_at_done),
                ("items in host A's leased chunks then (re-run allowance)", held),
                ("generations on host A / host B", f"{gens_a} / {gens_b}"),
                ("generations run twice", twice),
                ("seconds from submission to finished", f"{elapsed:.1f}"),
                ("exact accounting", "yes" if ok else "NO"),
            ]
            width = max(len(k) for k, _ in table)
            print("\n| " + "what".ljust(width) + " | value |\n|" + "-" * (width + 2) + "|---|")
            for k, v in table:
                print(f"| {k.ljust(width)} | {v} |")
            return 0 if ok else 1
        finally:
            self.procs.close()
            admin.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
            admin.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--as-worker", type=Path, metavar="COUNT_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--pg-url", default="postgresql://127.0.0.1:5432/test", help="an admin connection")
    parser.add_argument("--kill-at", type=float, default=0.3, help="share of the job done when host A is killed")
    parser.add_argument("--step-s", type=float, default=0.02, help="the stand-in engine's step time")
    parser.add_argument("--chunk-size", type=int, default=16)
    parser.add_argument("--timeout-s", type=float, default=600)
    args = parser.parse_args()
    if args.as_worker:
        run_worker(args.as_worker, args.step_s)
        return 0
    with tempfile.TemporaryDirectory(prefix="vlbatch-two-hosts-") as work:
        try:
            return Rehearsal(args, Path(work)).run()
        except BaseException:
            for log in sorted(Path(work).rglob("*.log")):
                sys.stderr.write(f"--- {log.relative_to(work)} (last lines)\n")
                sys.stderr.write("\n".join(log.read_text(errors="replace").splitlines()[-15:]) + "\n")
            raise


if __name__ == "__main__":
    raise SystemExit(main())
