"""The job repository (``vlbatch.db.job_store``): a job's chunks and items inserted, on SQLite and PostgreSQL; a
folder's items made as they are read are the items an eager grouping makes."""

from __future__ import annotations

import random

import pytest

from tests.support.db import queued_job
from vlbatch.db import job_store


def test_chunking_and_bulk_insert(db_url: str) -> None:
    factory, job_id = queued_job(db_url, n=10, chunk=4)
    with factory() as s:  # type: ignore[operator]
        chunks = job_store.chunks_of(s, job_id=job_id)
        assert len(chunks) == 3
        assert job_store.item_counts(s, job_id=job_id)["queued"] == 10


def _eager(paths: list[str], k: int) -> list[job_store.NewItem]:
    videos = [p for p in paths if p.lower().endswith((".mp4", ".mov"))]
    images = [p for p in paths if p not in videos]
    grouped = [job_store.NewItem(inputs={"images": images[i : i + k]}, ref=images[i]) for i in range(0, len(images), k)]
    return grouped + [job_store.NewItem(inputs={"images": [v]}, ref=v) for v in videos]


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_path_items_equal_the_eager_grouping(k: int) -> None:
    rng = random.Random(k)
    for n in (0, 1, k, k + 1, 50):
        paths = [f"/album/{i:03d}{rng.choice(['.jpg', '.JPG', '.mp4', '.MOV', '.png'])}" for i in range(n)]
        items = job_store.items_from_paths(paths, images_per_prompt=k)
        expected = _eager(paths, k)
        assert len(items) == len(expected)
        assert list(items) == expected
        assert items[1:4] == expected[1:4] and items[::3] == expected[::3]
        if expected:
            assert items[-1] == expected[-1]
        with pytest.raises(IndexError):
            items[len(expected)]
