"""Prints how long accepting an N-item job takes (job + chunks + items in one transaction).

Usage: python benchmarks/bulk_insert.py DATABASE_URL [N]
"""

from __future__ import annotations

import sys
import time

from vlbatch.db import crud
from vlbatch.db.session import make_engine, make_sessionmaker, migrate


def main() -> None:
    url, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    migrate(url)
    factory = make_sessionmaker(make_engine(url))
    items = [crud.NewItem(inputs={"images": [f"/data/album/{i:07d}.jpg"]}, ref=str(i)) for i in range(n)]
    t0 = time.perf_counter()
    with factory() as s:
        crud.create_job(s, pipeline="image_tagging", model="m", options={}, items=items, chunk_size=32)
        s.commit()
    dt = time.perf_counter() - t0
    print(f"{url.split(':')[0]}: {n} items accepted in {dt:.2f} s ({n / dt:,.0f} items/s)")


if __name__ == "__main__":
    main()
