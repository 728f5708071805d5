"""The fast paths: items written straight through the driver, results read back in pages, on both databases."""

from __future__ import annotations

from sqlalchemy import select

from vlbatch.db import job_store
from vlbatch.db.models import Chunk, Item, Result, utcnow
from vlbatch.db.results import ResultRecord, iter_results
from vlbatch.db.session import make_engine, make_sessionmaker, migrate


def test_items_written_like_the_orm_would(db_url: str) -> None:
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    new = [
        job_store.NewItem(inputs={"images": [f"/a/{i}.jpg", "/b/é\\\t\n.png"]}, ref=None if i == 2 else f"r{i}")
        for i in range(11)
    ]
    with factory() as s:
        job = job_store.create_job(s, pipeline="image_tagging", model="m", options={}, items=new, chunk_size=4)
        s.commit()
    with factory() as s:
        items = list(s.scalars(select(Item).where(Item.job_id == job.id).order_by(Item.seq)))
        chunks = {c.id: c.seq for c in s.scalars(select(Chunk).where(Chunk.job_id == job.id))}
    assert [(it.seq, it.ref, it.inputs) for it in items] == [(i, n.ref, n.inputs) for i, n in enumerate(new)]
    assert [chunks[it.chunk_id] for it in items] == [i // 4 for i in range(11)]
    assert {(it.status, it.attempts, it.crash_count, it.error_code) for it in items} == {("queued", 0, 0, None)}
    assert items[0].updated_at.replace(tzinfo=None) <= utcnow().replace(tzinfo=None)


def test_result_rows_read_in_pages(db_url: str) -> None:
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    new = [job_store.NewItem(inputs={"images": [f"/a/{i}.jpg"]}, ref=f"r{i}") for i in range(7)]
    new.append(job_store.NewItem(inputs={"path": "/d/x.pdf"}, ref="doc"))
    with factory() as s:
        job = job_store.create_job(s, pipeline="image_tagging", model="m", options={}, items=new, chunk_size=3)
        items = list(s.scalars(select(Item).where(Item.job_id == job.id).order_by(Item.seq)))
        for it in items:
            it.status = "failed" if it.seq in (2, 3) else "succeeded"
            if it.seq == 5:
                it.status = "queued"
            if it.seq == 3:
                continue  # failed without a result row
            output = None if it.seq == 2 else {"tags": ["t", str(it.seq)], "caption": "ç"}
            s.add(
                Result(
                    item_id=it.id,
                    job_id=job.id,
                    output=output,
                    raw_text=f"raw{it.seq}",
                    prompt_tokens=it.seq,
                    completion_tokens=1,
                    model="m",
                    pipeline_version="1",
                    options_hash="h",
                )
            )
        s.commit()
        pages = [len(p) for p in iter_results(s, job_id=job.id, page_size=3)]
        rows = [r for page in iter_results(s, job_id=job.id, with_inputs=True) for r in page]
    assert pages == [3, 3, 1]

    assert [r.seq for r in rows] == [0, 1, 2, 3, 4, 6, 7]
    assert rows[0] == ResultRecord(
        item_id=items[0].id,
        seq=0,
        ref="r0",
        status="succeeded",
        error_code=None,
        error_message=None,
        has_result=True,
        output_text=rows[0].output_text,
        raw_text="raw0",
        prompt_tokens=0,
        completion_tokens=1,
        model="m",
        model_revision=None,
        pipeline_version="1",
        options_hash="h",
        tags_text=None,
        inputs={"images": ["/a/0.jpg"]},
    )
    assert rows[0].output == {"tags": ["t", "0"], "caption": "ç"}
    assert (rows[0].tag_names, rows[0].caption) == (["t", "0"], "ç")
    assert (rows[2].tag_names, rows[2].caption, rows[2].raw_text) == (None, None, "raw2")
    no_result = rows[3]
    assert (no_result.has_result, no_result.tags, no_result.raw_text, no_result.model) == (False, None, None, None)
    assert (no_result.prompt_tokens, no_result.completion_tokens) == (0, 0)
    assert rows[-1].output == {"tags": ["t", "7"], "caption": "ç"} and rows[-1].inputs == {"path": "/d/x.pdf"}
