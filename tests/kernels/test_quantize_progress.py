"""``vlbatch quantize`` in a subprocess with its output in a pipe (no terminal): the Rich progress bar the
commands share (``cli.progress.progress``) ends as one plain line with done/total, throughput and ETA."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from kernels.quantize import DEFAULT_PROMPTS

ROOT = Path(__file__).resolve().parents[2]


def test_quantize_reports_progress_readably_without_a_terminal(tiny_model: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "quantize", str(tiny_model), str(tmp_path / "w8a8")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\x1b" not in proc.stdout  # no cursor moves or colours in a pipe
    bars = [line for line in proc.stdout.splitlines() if "steps/s" in line]
    assert len(bars) == 1, proc.stdout  # drawn once at the end, not redrawn line after line
    m = re.search(r"(\d+)/(\d+) (\d+\.\d\d|-) steps/s (\d+:\d\d:\d\d) (\d+:\d\d:\d\d|-:--:--)", bars[0])
    assert m is not None, bars[0]
    done, total = int(m[1]), int(m[2])
    assert done == total > len(DEFAULT_PROMPTS)  # every calibration sample, then every layer quantized
    assert m[3] != "-" and float(m[3]) > 0  # the throughput it measured
    assert (tmp_path / "w8a8" / "quant_model_description.json").is_file()  # and the command did its work
