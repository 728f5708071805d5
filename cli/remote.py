"""`vlbatch jobs submit|list|show|watch`: a running API's jobs, seen from a terminal.

Talks HTTP only (``VLBATCH_API_URL``, the key in ``VLBATCH_API_KEY`` sent as ``Authorization: Bearer``), so it
works from any machine that reaches the API and needs neither the database nor the broker. ``watch`` polls
one job and draws a Rich progress bar with items/s and the API's ETA until the job has ended, then exits 0
when it finished, 1 when it was cancelled (for scripts; failed items are counted, they do not fail the job).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from vlbatch.errors import REMOTE_ERROR, VlbatchError

__all__ = ["FINISHED", "ApiClient", "RemoteError", "job_line", "watch_job"]

FINISHED = frozenset({"finished", "cancelled"})  # a job's end states; failed items do not end it


class RemoteError(VlbatchError):
    """The API refused a request or could not be reached; the message carries the API's own code and detail."""

    code = REMOTE_ERROR


@dataclass
class ApiClient:
    base_url: str
    api_key: str | None = None
    timeout_s: float = 30.0

    def _client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.base_url.rstrip("/"), headers=headers, timeout=self.timeout_s)

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._call("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any], *, headers: dict[str, str] | None = None) -> Any:
        return self._call("POST", path, json=body, headers=headers)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            with self._client() as client:
                resp = client.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise RemoteError(f"cannot reach the API at {self.base_url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 400:
            try:
                body = resp.json()
                detail, code = body.get("detail"), body.get("code")
            except ValueError:
                detail, code = resp.text[:200], None
            hint = "; set VLBATCH_API_KEY to a key from `vlbatch keys create`" if resp.status_code == 401 else ""
            if resp.status_code == 401 and self.api_key:
                hint = ""  # the API's own detail says where keys live
            raise RemoteError(f"HTTP {resp.status_code} from {path}: {code or 'error'}: {detail}{hint}")
        return resp.json()

    def job(self, job_id: str) -> dict[str, Any]:
        data: dict[str, Any] = self.get(f"/v1/jobs/{job_id}")
        return data

    def jobs(self, *, limit: int = 50, status: str | None = None) -> Iterator[dict[str, Any]]:
        """Jobs newest first, following the API's cursor pages until ``limit`` jobs were seen."""
        cursor: str | None = None
        seen = 0
        while seen < limit:
            params: dict[str, Any] = {"limit": min(100, limit - seen)}
            if cursor:
                params["cursor"] = cursor
            if status:
                params["status"] = status
            page = self.get("/v1/jobs", params)
            for job in page["data"]:
                seen += 1
                yield job
            cursor = page.get("next_cursor")
            if not cursor or not page["data"]:
                return


def job_line(job: dict[str, Any]) -> str:
    """One line per job for ``jobs list``: id, status, progress, pipeline, model, speed, deadline verdict."""
    counts = job.get("counts", {})
    done = sum(counts.get(k, 0) for k in ("succeeded", "failed", "cancelled"))
    rate = job.get("items_per_second")
    speed = f"{rate:.2f} items/s" if rate else "-"
    deadline = f"  {job['deadline_status']}" if job.get("deadline_status") else ""
    warnings = "".join(f"  ! {w}" for w in job.get("warnings", []))  # a wait or a total failure the status hides
    return (
        f"{job['id']}  {job['status']:<9}  {done}/{job['total']}  failed {counts.get('failed', 0)}"
        f"  {job['pipeline']}  {job['model']}  {speed}{deadline}{warnings}"
    )


def every_item_failed(job: dict[str, Any]) -> bool:
    """A finished job none of whose items succeeded: ``jobs watch`` exits 1 on it, as on a cancelled one."""
    return job["status"] == "finished" and job["total"] > 0 and job.get("counts", {}).get("failed") == job["total"]


def watch_job(
    client: ApiClient,
    job_id: str,
    *,
    interval_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    console: Any = None,
) -> dict[str, Any]:
    """Poll ``job_id`` and draw its progress until it is finished, saying each stall reason and warning once (a model
    no live worker serves, every item failed); returns the last job body."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    job = client.job(job_id)
    columns = (
        TextColumn("[bold]{task.fields[status]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}  ETA {task.fields[eta]}  failed {task.fields[failed]}"),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(job_id, total=job["total"], status="", rate="", eta="", failed=0)
        stalled: str | None = None
        said: set[str] = set()
        while True:
            counts = job.get("counts", {})
            done = sum(counts.get(k, 0) for k in ("succeeded", "failed", "cancelled"))
            rate, eta = job.get("items_per_second"), job.get("eta_seconds")
            progress.update(
                task,
                completed=done,
                status=job["status"] + (" (stalled)" if job.get("stalled") else ""),
                rate=f"{rate:.2f} items/s" if rate else "- items/s",
                eta=f"{eta:.0f}s" if eta is not None else "-",
                failed=counts.get("failed", 0),
            )
            if job.get("stalled") and job["stalled"] != stalled:  # said once per reason, not redrawn every poll
                stalled = job["stalled"]
                progress.console.print(f"stalled: {stalled}")
            for warning in job.get("warnings", []):
                if warning not in said:
                    said.add(warning)
                    progress.console.print(f"warning: {warning}")
            if job["status"] in FINISHED:
                return job
            sleep(interval_s)
            job = client.job(job_id)
