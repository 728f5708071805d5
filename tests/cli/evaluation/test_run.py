"""``read_results`` reads the exports ``vlbatch tag --out`` writes (the API's columns) as scored rows: tags as plain
names, the answer decoded, no ``tags`` for an answer without a tag list; the same from JSONL and from CSV."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.evaluation import metrics
from cli.evaluation.run import read_results
from jobs.exports.files import write_export
from tests.support.ledger import finished_job


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_an_export_reads_back_as_scored_rows(tmp_path: Path, suffix: str) -> None:
    factory, job_id = finished_job(
        f"sqlite:///{tmp_path / 'e.db'}",
        [
            ({"images": ["/a.jpg"]}, {"tags": ["sea", "boat"], "caption": "c"}),
            ({"path": "/d.pdf"}, {"label": "invoice"}),
            ({"images": ["/b.jpg"]}, None),
        ],
    )
    out = tmp_path / f"r{suffix}"
    assert write_export(factory, job_id, out) == 3
    rows = read_results(out)
    assert rows[0]["tags"] == ["sea", "boat"] and rows[0]["output"]["caption"] == "c"
    assert "tags" not in rows[1] and metrics.predicted_label(rows[1]) == "invoice"
    assert rows[2]["status"] == "failed" and "tags" not in rows[2]
    assert metrics.predicted_tags(rows[0]) == frozenset({"sea", "boat"})
