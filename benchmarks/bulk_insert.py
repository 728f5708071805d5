"""Prints how long accepting an N-item job takes (job + chunks + items in one transaction, then the chunks marked
sent), through the jobs service's submit with publishing off: the DB side of ``POST /v1/jobs``.

Usage: python benchmarks/bulk_insert.py DATABASE_URL [N]
"""

from __future__ import annotations

import sys
import time

from jobs.request import JobRequest
from jobs.submit import submit
from vlbatch.db import job_store
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings


def main() -> None:
    url, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    migrate(url)
    factory = make_sessionmaker(make_engine(url))
    items = [job_store.NewItem(inputs={"images": [f"/data/album/{i:07d}.jpg"]}, ref=str(i)) for i in range(n)]
    t0 = time.perf_counter()
    with factory() as s:
        request = JobRequest(pipeline="image_tagging", options={}, items=items, model="m")
        submit(s, Settings(database_url=url, max_items_per_job=max(n, 1)), request, publish=False, admit=False)
    dt = time.perf_counter() - t0
    print(f"{url.split(':')[0]}: {n} items accepted in {dt:.2f} s ({n / dt:,.0f} items/s)")


if __name__ == "__main__":
    main()
