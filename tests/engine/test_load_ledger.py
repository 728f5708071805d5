"""engine/runtime/load_ledger.py: one line per load, appended by many processes at once, read back by backend."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from engine.runtime.load_ledger import loads, record

PROCESSES = 4
EACH = 200


def _append(ledger: str, n: int, tag: str) -> None:
    for i in range(n):
        record(Path(ledger), model=f"{tag}/{i}/" + "m" * 200, backend="vllm" if i % 2 else "stub")


def test_concurrent_appends_from_processes_keep_every_line_whole(tmp_path: Path) -> None:
    ledger = tmp_path / "loads.tsv"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append, args=(str(ledger), EACH, f"p{k}")) for k in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = ledger.read_text().splitlines()
    assert len(lines) == PROCESSES * EACH
    vllm = loads(ledger)
    stub = loads(ledger, backend="stub")
    assert len(vllm) + len(stub) == PROCESSES * EACH
    # Every line whole: the model named in it is one a process wrote, each once, and its pid one of the writers.
    written = {f"p{k}/{i}/" + "m" * 200 for k in range(PROCESSES) for i in range(EACH)}
    seen = [model for _, _, model in vllm + stub]
    assert sorted(seen) == sorted(written)
    assert {pid for _, pid, _ in vllm} == {p.pid for p in procs}
    assert all(model.split("/")[1].isdigit() and int(model.split("/")[1]) % 2 == 1 for _, _, model in vllm)


def test_loads_are_read_by_backend_in_the_order_they_began(tmp_path: Path) -> None:
    ledger = tmp_path / "loads.tsv"
    record(ledger, model="tiny")
    record(ledger, model="scripted", backend="stub")
    record(ledger, model="demo", backend="vllm")
    assert [(pid, model) for _, pid, model in loads(ledger)] == [(os.getpid(), "tiny"), (os.getpid(), "demo")]
    assert [model for _, _, model in loads(ledger, backend="stub")] == ["scripted"]
    times = [when for when, _, _ in loads(ledger)]
    assert times == sorted(times)


def test_no_ledger_records_nothing_and_a_missing_file_reads_as_no_loads(tmp_path: Path) -> None:
    record(None, model="tiny")
    assert not list(tmp_path.iterdir())
    assert loads(tmp_path / "absent.tsv") == []


def test_a_model_name_with_tabs_stays_whole(tmp_path: Path) -> None:
    ledger = tmp_path / "loads.tsv"
    record(ledger, model="odd\tname")
    assert [model for _, _, model in loads(ledger)] == ["odd\tname"]
