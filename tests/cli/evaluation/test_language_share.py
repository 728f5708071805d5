"""``vlbatch eval`` reports the share of tagging answers in the asked language, judged as the worker judges them,
in eval.json and eval.md; answers with nothing to judge (short tags only) are not counted."""

from __future__ import annotations

import json
from pathlib import Path

from cli.evaluation.labels import Expected
from cli.evaluation.run import Side, evaluate
from jobs.exports.files import write_export
from tests.support.ledger import finished_job
from vlbatch.settings import Settings


def test_eval_reports_the_share_of_answers_in_the_asked_language(tmp_path: Path) -> None:
    answers = [
        ({"images": ["/p/1.jpg"]}, {"tags": ["hochzeit", "familie", "kirche"], "caption": "Eine Hochzeit am See."}),
        ({"images": ["/p/2.jpg"]}, {"tags": ["schnee", "landschaft", "winter"], "caption": "Ein verschneites Tal."}),
        ({"images": ["/p/3.jpg"]}, {"tags": ["wedding", "family", "church"], "caption": "A wedding by the lake."}),
        ({"images": ["/p/4.jpg"]}, {"tags": ["see", "tal"], "caption": ""}),  # nothing long enough to judge
        ({"images": ["/p/5.jpg"]}, None),  # failed: no answer
    ]
    factory, job_id = finished_job(f"sqlite:///{tmp_path / 'e.db'}", answers)
    export = tmp_path / "run.jsonl"
    write_export(factory, job_id, export)
    labels = [Expected(Path(f"/p/{i}.jpg"), tags=frozenset({"hochzeit"})) for i in range(1, 6)]
    result = evaluate(
        Settings(),  # an export is read, nothing is run
        folder=tmp_path,
        labels=labels,
        sides=[Side("run", export, {})],
        task="tag",
        options={"language": "de", "caption": True},
        out_dir=tmp_path / "out",
    )
    (scores,) = result.scores
    assert scores.language == "de" and scores.language_judged == 3
    assert scores.language_share == 2 / 3
    doc = json.loads(result.json_path.read_text())
    assert doc["scores"][0]["language_share"] == 2 / 3
    assert "answers in the asked language ('de'): 66.7% of 3 that could be judged" in result.markdown_path.read_text()
