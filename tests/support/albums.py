"""A folder of small PNGs and a tagging job over it in a new SQLite database: the set-up the feeder's crash and
breaker tests share; and an album of JPEGs with corrupt files among them, for the worker's end-to-end jobs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PIL import Image

from pipelines import image_tagging
from vlbatch.db import job_store
from vlbatch.db.session import make_engine, make_sessionmaker, migrate


def album_job(
    tmp_path: Path, colors: list[tuple[int, int, int]], *, distinct: bool = False
) -> tuple[Path, Any, str, list[int]]:
    """One 64x48 PNG per colour under ``tmp_path/album`` and a tagging job over them (chunks of 4): the folder, the
    sessionmaker, the job id and its chunk ids. ``distinct``: each file gets its own bytes (one corner pixel), so
    no photo is another's copy and duplicates do not answer for each other."""
    album = tmp_path / "album"
    album.mkdir()
    names = []
    for i, color in enumerate(colors):
        image = Image.new("RGB", (64, 48), color)
        if distinct:
            image.putpixel((63, 47), (i % 256, i // 256, 7))
        image.save(album / f"{i}.png")
        names.append(str(album / f"{i}.png"))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    migrate(url)
    sessions = make_sessionmaker(make_engine(url))
    with sessions() as s:
        job = job_store.create_job(
            s,
            pipeline="image_tagging",
            model="m",
            options=image_tagging.TaggingOptions(max_tags=3).model_dump(),
            items=job_store.items_from_paths(names, images_per_prompt=1),
            chunk_size=4,
        )
        s.commit()
        return album, sessions, job.id, job_store.chunks_of(s, job_id=job.id)


def corrupt_album(root: Path, *, good: int, bad: int) -> None:
    """``good`` small JPEGs of varied sizes and colours and ``bad`` files named .jpg that are not images, as a
    camera card or a failed copy leaves them: empty, text, a truncated JPEG and random bytes, in turn."""
    root.mkdir(parents=True)
    for i in range(good):
        img = Image.new("RGB", (64 + (i % 5) * 40, 48 + (i % 3) * 30), ((i * 37) % 256, (i * 11) % 256, 90))
        img.save(root / f"p{i:04d}.jpg", quality=80)
    whole = (root / "p0000.jpg").read_bytes()
    for i in range(bad):
        data = [b"", b"not an image at all", whole[: len(whole) // 3], os.urandom(500)][i % 4]
        (root / f"z{i:04d}.jpg").write_bytes(data)
