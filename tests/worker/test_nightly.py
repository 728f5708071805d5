"""Job templates and the nightly inbox run, on SQLite and PostgreSQL, publishing to the real Redis broker."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from jobs.publisher import queue_name
from vlbatch.db import job_store, send_ledger
from vlbatch.db import job_templates as template_rows
from vlbatch.db.models import Chunk, InboxFile, Item, Job, JobTemplate, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker import nightly
from worker import template_schedule as tpl

pytestmark = pytest.mark.timeout(120)

SCHEMA = {"type": "object", "properties": {"party": {"type": "string"}}}


@dataclass
class Env:
    settings: Settings
    sessions: sessionmaker[Session]
    root: Path
    inbox: Path
    model: str
    redis: object  # redis.Redis on the test DB

    def queued(self) -> int:
        return int(self.redis.llen(queue_name(self.model, "documents")))  # type: ignore[attr-defined]

    def add(self, name: str = "contracts", *, cron: str = "0 2 * * *", **kw: object) -> JobTemplate:
        args: dict[str, object] = {
            "name": name,
            "inbox": str(self.inbox),
            "pipeline": "summarize",
            "model": self.model,
            "options": {"language": "de"},
            "cron": cron,
            "output_dir": str(self.root / "out"),
            "allowed_roots": self.settings.inputs.allowed_input_roots,
        }
        args.update(kw)
        with self.sessions() as s:
            t = tpl.create_template(s, **args)  # type: ignore[arg-type]
            s.commit()
            return t


@pytest.fixture
def env(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[Env]:
    import redis

    migrate(db_url)
    engine = make_engine(db_url)
    root = tmp_path / "records"
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    model = f"m-{uuid.uuid4().hex[:8]}"  # a queue of its own on the shared Redis DB
    client = redis.Redis.from_url(redis_url)
    settings = Settings(database_url=db_url, broker_url=redis_url, allowed_input_roots=[root])
    yield Env(settings, make_sessionmaker(engine), root, inbox, model, client)
    client.delete(queue_name(model, "documents"))
    client.close()
    engine.dispose()


def _items(env: Env, job_id: str) -> list[str]:
    with env.sessions() as s:
        return [str(r) for r in s.scalars(select(Item.ref).where(Item.job_id == job_id).order_by(Item.seq))]


def _at(hour: int, minute: int = 0, second: int = 0, day: int = 3) -> datetime:
    return datetime(2026, 12, day, hour, minute, second, tzinfo=UTC)


def test_nightly_runs_queue_only_new_and_changed_files(env: Env) -> None:
    (env.inbox / "a.txt").write_text("lease agreement")
    (env.inbox / "b.md").write_text("# annual report")
    (env.inbox / "c.html").write_text("<p>manual</p>")
    (env.inbox / "sub").mkdir()
    (env.inbox / "sub" / "e.pdf").write_bytes(b"%PDF-1.4 not parsed here")
    # Not documents: an unsupported suffix, a hidden file, a Word owner file.
    (env.inbox / "budget.xlsx").write_bytes(b"PK")
    (env.inbox / ".draft.txt").write_text("hidden")
    (env.inbox / "~$a.docx").write_bytes(b"owner")
    env.add()
    paths = {n: str((env.inbox / n).resolve()) for n in ("a.txt", "b.md", "c.html", "sub/e.pdf", "f.txt")}

    first = nightly.run_template(env.settings, env.sessions, "contracts", now=_at(2))
    assert first.job_id and first.published
    assert (first.new, first.changed, first.unchanged) == (4, 0, 0)
    assert sorted(_items(env, first.job_id)) == sorted(paths[n] for n in ("a.txt", "b.md", "c.html", "sub/e.pdf"))
    with env.sessions() as s:
        job = s.get(Job, first.job_id)
        assert job is not None
        assert (job.pipeline, job.model, job.priority) == ("summarize", env.model, "documents")
        assert job.output_dir == str((env.root / "out").resolve())
        assert job.options["language"] == "de"
        chunks = list(s.scalars(select(Chunk).where(Chunk.job_id == first.job_id)))
        assert len(chunks) == 2 and all(c.enqueued_at is not None for c in chunks)
        inputs = s.scalars(select(Item.inputs).where(Item.job_id == first.job_id)).all()
        assert {i["path"] for i in inputs} == set(_items(env, first.job_id))
    assert env.queued() == 2  # one message per chunk of two documents

    (env.inbox / "b.md").write_text("# annual report, amended")
    (env.inbox / "f.txt").write_text("new contract")
    (env.inbox / "a.txt").write_text("lease agreement")  # rewritten with the same bytes: not a change

    second = nightly.run_template(env.settings, env.sessions, "contracts", now=_at(2, day=4))
    assert second.job_id and second.job_id != first.job_id
    assert (second.new, second.changed, second.unchanged) == (1, 1, 3)
    assert sorted(_items(env, second.job_id)) == sorted([paths["b.md"], paths["f.txt"]])
    assert env.queued() == 3
    with env.sessions() as s:
        owners = {p: j for p, j in s.execute(select(InboxFile.path, InboxFile.job_id)).tuples()}
        assert owners[paths["b.md"]] == owners[paths["f.txt"]] == second.job_id
        assert owners[paths["a.txt"]] == first.job_id

    third = nightly.run_template(env.settings, env.sessions, "contracts", now=_at(2, day=5))
    assert third == nightly.RunResult(None, 0, 0, 5)
    assert env.queued() == 3
    with env.sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 2
        t = template_rows.get_template_by_name(s, name="contracts")
        assert t is not None and t.last_run_at is not None
        assert tpl.next_run_at(t.cron, after=t.last_run_at) == _at(2, day=6)


def test_broker_down_leaves_the_job_for_the_reconciler(env: Env) -> None:
    (env.inbox / "a.txt").write_text("x")
    env.add()
    down = env.settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    res = nightly.run_template(down, env.sessions, "contracts")
    assert res.job_id and not res.published
    with env.sessions() as s:
        lost = send_ledger.chunks_to_enqueue(s, now=utcnow(), stale_after=timedelta(minutes=5), limit=10)
        assert [c.job_id for c in lost] == [res.job_id]
        # The file counts as queued: the reconciler sends the job, the next night must not add another.
        t = template_rows.get_template_by_name(s, name="contracts")
        assert t is not None
        files = nightly.scan_inbox(env.inbox, roots=env.settings.inputs.allowed_input_roots)
        assert len(files) == 1 and template_rows.known_hashes(s, template_id=t.id) == files
    assert nightly.run_template(env.settings, env.sessions, "contracts").job_id is None


def test_cron_due_ness(env: Env) -> None:
    t = env.add(cron="0 2 * * *")
    with env.sessions() as s:
        row = s.get(JobTemplate, t.id)
        assert row is not None
        row.created_at = _at(12, day=2)
        s.commit()
        assert tpl.due_templates(s, now=_at(1, 59, 59)) == []
        assert [x.name for x in tpl.due_templates(s, now=_at(2))] == ["contracts"]
        assert [x.name for x in tpl.due_templates(s, now=_at(7, 30))] == ["contracts"]  # missed, still due

    assert nightly.run_template(env.settings, env.sessions, "contracts", now=_at(2, 0, 30)).job_id is None
    with env.sessions() as s:
        assert tpl.due_templates(s, now=_at(2, 1)) == []  # not again right after running
        assert tpl.due_templates(s, now=_at(23, 59)) == []
        assert [x.name for x in tpl.due_templates(s, now=_at(2, day=4))] == ["contracts"]
        row = s.get(JobTemplate, t.id)
        assert row is not None
        row.enabled = False
        s.commit()
        assert tpl.due_templates(s, now=_at(2, day=4)) == []


def test_next_run_at_follows_the_five_fields() -> None:
    assert tpl.next_run_at("*/15 * * * *", after=_at(2, 7)) == _at(2, 15)
    assert tpl.next_run_at("0 2 * * 1", after=_at(5)) == _at(2, day=7)  # 2026-12-03 is a Thursday
    assert tpl.next_run_at("0 2 1 * *", after=_at(5, day=31)) == datetime(2027, 1, 1, 2, tzinfo=UTC)
    assert tpl.next_run_at("0  2 * * *", after=datetime(2026, 12, 3, 1, 0)) == _at(2)  # naive = UTC


def test_claim_run_is_compare_and_set(env: Env) -> None:
    t = env.add()
    with env.sessions() as s:
        assert template_rows.claim_run(s, template_id=t.id, seen_last_run_at=None, now=_at(2))
        s.commit()
        assert not template_rows.claim_run(s, template_id=t.id, seen_last_run_at=None, now=_at(2, 1))
        seen = s.get(JobTemplate, t.id).last_run_at  # type: ignore[union-attr]
        assert template_rows.claim_run(s, template_id=t.id, seen_last_run_at=seen, now=_at(2, day=4))
        s.commit()
        assert not template_rows.claim_run(s, template_id=t.id, seen_last_run_at=seen, now=_at(2, day=5))


def test_run_due_survives_a_failing_template(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    (env.inbox / "a.txt").write_text("x")
    gone = env.root / "gone"
    gone.mkdir()
    env.add("broken", inbox=str(gone), cron="* * * * *")
    env.add("contracts", cron="* * * * *")
    env.add("later", cron="0 3 * * *")
    gone.rmdir()
    with env.sessions() as s:
        for row in s.scalars(select(JobTemplate)):
            row.created_at = _at(1)
        s.commit()
    with caplog.at_level(logging.ERROR, logger="worker.nightly"):
        results = nightly.run_due(env.settings, env.sessions, now=_at(2))
    assert list(results) == ["contracts"] and results["contracts"].job_id
    assert "broken" in caplog.text and "is not a directory" in caplog.text
    assert env.queued() == 1


def test_beat_app_schedules_the_tick_and_its_task_runs_due_templates(env: Env) -> None:
    (env.inbox / "a.txt").write_text("x")
    env.add(cron="* * * * *")
    with env.sessions() as s:
        row = s.scalars(select(JobTemplate)).one()
        row.created_at = utcnow() - timedelta(minutes=5)
        s.commit()
    app = nightly.make_beat_app(env.settings, sessions=env.sessions)
    entry = app.conf.beat_schedule["run-due-templates"]
    assert entry["task"] == nightly.RUN_DUE and entry["schedule"] == 60.0
    assert entry["options"]["queue"] == "vlbatch.control"
    assert app.conf.broker_url == env.settings.broker.broker_url
    # An eager result, read at once: Celery refuses a blocking get() in a process where a worker was started
    # (another test's, earlier on this xdist worker), so that guard is turned off for this read only.
    assert app.tasks[nightly.RUN_DUE].apply().get(disable_sync_subtasks=False) == 1  # one job queued
    assert app.tasks[nightly.RUN_DUE].apply().get(disable_sync_subtasks=False) == 0  # ran a moment ago: not due
    assert env.queued() == 1


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("0 2 * *", "has 4 fields; give five"),
        ("61 2 * * *", "61 > 59"),
        ("0 2 30 2 *", "never occurs"),
        ("0 2 * * funday", "not valid"),
    ],
)
def test_bad_cron_is_refused(env: Env, cron: str, message: str) -> None:
    with pytest.raises(tpl.TemplateError, match=message):
        env.add(cron=cron)


@pytest.mark.parametrize(
    ("pipeline", "options", "message"),
    [
        ("summarize", {"langauge": "de"}, "bad summarize options: langauge: Extra inputs are not permitted"),
        ("summarize", {"max_summary_chars": 5}, "max_summary_chars"),
        ("extract", {}, "bad extract options: json_schema: Field required"),
        ("extract", {"json_schema": {"type": "array"}}, 'must be "object"'),
        ("classify", {"labels": []}, "bad classify options: labels"),
        ("translate", {}, "unknown pipeline 'translate'"),
    ],
)
def test_bad_options_are_refused(env: Env, pipeline: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(tpl.TemplateError, match=message):
        env.add(pipeline=pipeline, options=options)


def test_good_options_are_stored_checked(env: Env) -> None:
    t = env.add(pipeline="classify", options={"labels": [" contract ", "report", "contract"]})
    assert t.options["labels"] == ["contract", "report"]
    assert env.add("x", pipeline="extract", options={"json_schema": SCHEMA}).options["json_schema"] == SCHEMA


def test_folders_outside_the_roots_and_duplicates_are_refused(env: Env, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(tpl.TemplateError, match=r"inbox: .*elsewhere' is outside the allowed input roots"):
        env.add(inbox=str(outside))
    with pytest.raises(tpl.TemplateError, match=r"inbox: .*\.\./elsewhere' is outside"):
        env.add(inbox=str(env.root / ".." / "elsewhere"))
    with pytest.raises(tpl.TemplateError, match="is not a directory"):
        env.add(inbox=str(env.root / "missing"))
    with pytest.raises(tpl.TemplateError, match=r"output folder .* is outside"):
        env.add(output_dir=str(outside))
    env.add()
    with pytest.raises(tpl.TemplateError, match="'contracts' exists already"):
        env.add()
    with env.sessions() as s:
        assert [t.name for t in template_rows.list_templates(s)] == ["contracts"]


def test_the_row_layer_stores_checked_values_and_refuses_a_taken_name(env: Env) -> None:
    env.add()
    row = {"inbox": str(env.inbox), "pipeline": "summarize", "model": env.model, "cron": "0 2 * * *"}
    with env.sessions() as s:
        assert template_rows.add_template(s, name="contracts", options={}, output_dir=None, **row) is None
        added = template_rows.add_template(s, name="weekly", options={"language": "en"}, output_dir=None, **row)
        assert added is not None and added.id is not None and added.enabled and added.last_run_at is None
        s.commit()
        assert [t.name for t in template_rows.enabled_templates(s)] == ["contracts", "weekly"]


def test_inbox_moved_outside_the_roots_fails_the_run(env: Env) -> None:
    env.add()
    narrowed = env.settings.model_copy(update={"allowed_input_roots": [env.root / "out"]})
    with pytest.raises(tpl.TemplateError, match=r"'contracts': inbox .* is outside the allowed input roots"):
        nightly.run_template(narrowed, env.sessions, "contracts")
    with pytest.raises(tpl.TemplateError, match="no template named 'nope'"):
        nightly.run_template(env.settings, env.sessions, "nope")


@pytest.fixture
def cli(env: Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., tuple[int, str]]]:
    from typer.testing import CliRunner

    from cli.main import app
    from vlbatch.settings import get_settings

    monkeypatch.setenv("VLBATCH_DATABASE_URL", env.settings.database.database_url)
    monkeypatch.setenv("VLBATCH_BROKER_URL", env.settings.broker.broker_url)
    monkeypatch.setenv("VLBATCH_ALLOWED_INPUT_ROOTS", str(env.root))
    get_settings.cache_clear()

    def run(*args: str) -> tuple[int, str]:
        res = CliRunner().invoke(app, ["templates", *args])
        return res.exit_code, " ".join(res.output.replace("│", " ").split())  # unwrap rich's error box

    yield run
    get_settings.cache_clear()


def test_cli_add_list_run(env: Env, cli: Callable[..., tuple[int, str]], tmp_path: Path) -> None:
    (env.inbox / "a.txt").write_text("x")
    inbox = ["--inbox", str(env.inbox), "--model", env.model]
    code, out = cli(
        "add", "contracts", *inbox, "--task", "summarize", "--cron", "0 2 * * *", "--options", '{"ocr": false}'
    )
    assert code == 0, out
    assert "next run 20" in out
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    assert cli("add", "fields", *inbox, "--task", "extract", "--cron", "0 3 * * *", "--schema", str(schema))[0] == 0
    assert (
        cli("add", "kinds", *inbox, "--task", "classify", "--cron", "0 4 * * *", "--labels", "contract, report")[0] == 0
    )
    code, out = cli("list")
    assert code == 0 and out.startswith(f"contracts summarize {env.model} '0 2 * * *' last None next 20"), out
    assert out.index("contracts") < out.index("fields") < out.index("kinds")

    code, out = cli("run", "contracts")
    assert code == 0, out
    assert out.startswith("job ") and out.endswith(": 1 new, 0 changed, 0 unchanged")
    assert cli("run", "contracts") == (0, "job -: 0 new, 0 changed, 1 unchanged")
    assert env.queued() == 1
    with env.sessions() as s:
        t = template_rows.get_template_by_name(s, name="kinds")
        assert t is not None and t.options["labels"] == ["contract", "report"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "summarize", "--cron", "0 2 * *"], "has 4 fields"),
        (["--task", "summarize", "--cron", "0 2 * * *", "--labels", "a"], "--labels is for --task classify only"),
        (["--task", "classify", "--cron", "0 2 * * *", "--schema", "x.json"], "--schema is for --task extract only"),
        (["--task", "summarize", "--cron", "0 2 * * *", "--options", "[1]"], "--options must be a JSON object"),
        (["--task", "summarize", "--cron", "0 2 * * *", "--options", "{"], "--options/--schema"),
        (["--task", "translate", "--cron", "0 2 * * *"], "unknown pipeline 'translate'"),
    ],
)
def test_cli_refuses_bad_input_with_exit_2(
    env: Env, cli: Callable[..., tuple[int, str]], args: list[str], message: str
) -> None:
    code, out = cli("add", "t", "--inbox", str(env.inbox), "--model", env.model, *args)
    assert code == 2 and message in out, out


def test_cli_refuses_an_inbox_outside_the_roots_and_unknown_names(
    env: Env, cli: Callable[..., tuple[int, str]], tmp_path: Path
) -> None:
    code, out = cli("add", "t", "--inbox", str(tmp_path), "--model", "m", "--task", "summarize", "--cron", "0 2 * * *")
    assert code == 2 and "is outside the allowed input roots" in out, out
    code, out = cli("run", "nope")
    assert code == 2 and "no template named 'nope'" in out, out


def test_the_run_marks_its_chunks_sent_before_it_publishes(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reconciler pass while the run publishes must not find the chunks unsent (it would send them twice)."""
    from jobs import publisher

    (env.inbox / "a.txt").write_text("x")
    (env.inbox / "b.txt").write_text("y")
    (env.inbox / "c.txt").write_text("z")
    env.add()
    during: list[list[str]] = []

    def publish(settings: Settings, *, model: str, priority: str, chunk_ids: list[int]) -> bool:
        with env.sessions() as s:  # what a reconciler pass in another process reads now
            lost = send_ledger.chunks_to_enqueue(s, now=utcnow(), stale_after=timedelta(minutes=5), limit=10)
            during.append([c.job_id for c in lost])
        return True

    monkeypatch.setattr(publisher, "publish_chunks", publish)
    res = nightly.run_template(env.settings, env.sessions, "contracts")
    assert res.job_id and res.published
    assert during == [[]]  # published once, and nothing was the reconciler's meanwhile


def test_the_tenants_quotas_hold_for_a_nightly_run_and_a_refused_run_stores_nothing(env: Env) -> None:
    from jobs.refusals import JobRefused
    from vlbatch.errors import ACTIVE_JOBS_QUOTA_EXCEEDED, ITEMS_QUOTA_EXCEEDED

    (env.inbox / "a.txt").write_text("x")
    (env.inbox / "b.txt").write_text("y")
    env.add(tenant="acme")
    with env.sessions() as s:  # the tenant's one unfinished job
        item = job_store.NewItem(inputs={"path": "/elsewhere.txt"})
        busy = job_store.create_job(
            s, pipeline="summarize", model="other", options={}, items=[item], chunk_size=2, tenant="acme"
        )
        s.commit()
    full = env.settings.model_copy(update={"tenant_max_active_jobs": 1})
    with pytest.raises(JobRefused) as refused:
        nightly.run_template(full, env.sessions, "contracts")
    assert refused.value.code == ACTIVE_JOBS_QUOTA_EXCEEDED
    small = env.settings.model_copy(update={"tenant_max_items_per_job": 1})
    with pytest.raises(JobRefused) as big:
        nightly.run_template(small, env.sessions, "contracts")
    assert big.value.code == ITEMS_QUOTA_EXCEEDED
    with env.sessions() as s:  # nothing kept: no job, no file recorded, the claim rolled back
        assert s.scalar(select(func.count()).select_from(Job)) == 1
        assert s.scalar(select(func.count()).select_from(InboxFile)) == 0
        t = template_rows.get_template_by_name(s, name="contracts")
        assert t is not None and t.last_run_at is None
    assert env.queued() == 0
    with env.sessions() as s:
        job_store.cancel_job(s, job_id=busy.id)
        s.commit()
    res = nightly.run_template(full, env.sessions, "contracts")  # room again: the same files, one job
    assert res.job_id and (res.new, res.changed) == (2, 0)
    assert env.queued() == 1
