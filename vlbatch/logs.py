"""Where log records go: one line per event, as text or JSON, on a service's stderr or into a command's log file.

Every process of vlbatch (the API, a worker, a CLI command, and the engine core vLLM starts as a child of any
of them) logs through the root logger and the handler ``configure`` installs there. vLLM configures its own
loggers when it is imported, in the parent and again in each child it starts; ``configure`` hands it a logging
config file (``VLLM_LOGGING_CONFIG_PATH``) naming the same destination and formatter, so the engine core's lines
look like the rest and go where they go.

A line never spans more than one line and, on a service's stderr, never runs past ``SERVICE_MAX_CHARS``: vLLM's
engine configuration is one record of about 4,000 characters, and a traceback is summarised as its last frame and
exception (JSON carries the tail of the whole traceback in a string). Migration steps (alembic) and per-request
HTTP client lines (httpx) are logged at DEBUG only.

Standard library only, like ``vlbatch.errors``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import logging.config
import os
import tempfile
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

LogFormat = Literal["text", "json"]

SERVICE_MAX_CHARS = 1000  # a service line's message is cut here; a log file keeps the whole record
_TRACEBACK_TAIL_CHARS = 2000  # what a JSON line keeps of a traceback
# Libraries whose INFO lines are steps nobody acts on: raised to WARNING unless the level asked for is DEBUG.
_CHATTY = ("alembic", "httpx", "httpcore", "urllib3", "filelock", "PIL")


def one_line(text: str, max_chars: int | None) -> str:
    """``text`` on one line (line breaks shown as `` | ``), cut at ``max_chars`` with a count of what was cut."""
    flat = " | ".join(part for part in text.splitlines() if part.strip()) if "\n" in text else text
    if max_chars is not None and len(flat) > max_chars:
        return f"{flat[:max_chars]} ... [{len(flat) - max_chars} more chars]"
    return flat


def _exception_summary(record: logging.LogRecord) -> str:
    """The exception's type, message and the frame it was raised in, on one line."""
    assert record.exc_info is not None
    exc_type, exc, tb = record.exc_info
    where = ""
    if tb is not None:
        last = traceback.extract_tb(tb)[-1]
        where = f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    name = exc_type.__name__ if exc_type is not None else "Exception"
    return f"{name}: {exc}{where}"


class LineFormatter(logging.Formatter):
    """``time level logger message``, one line; an exception as its summary, not its traceback."""

    def __init__(self, max_chars: int | None = SERVICE_MAX_CHARS) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")
        self.max_chars = max_chars

    def format(self, record: logging.LogRecord) -> str:
        line = f"{self.formatTime(record)} {record.levelname} {record.name} {record.getMessage()}"
        if record.exc_info:
            line += f" | {_exception_summary(record)}"
        return one_line(line, self.max_chars)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, process; an exception's summary and traceback tail."""

    def __init__(self, max_chars: int | None = SERVICE_MAX_CHARS) -> None:
        super().__init__()
        self.max_chars = max_chars

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": one_line(record.getMessage(), self.max_chars),
            "process": record.process,
        }
        if record.exc_info:
            out["exception"] = _exception_summary(record)
            out["traceback"] = "".join(traceback.format_exception(*record.exc_info))[-_TRACEBACK_TAIL_CHARS:]
        return json.dumps(out, ensure_ascii=False, default=str)


def _formatter_config(fmt: LogFormat, max_chars: int | None) -> dict[str, Any]:
    cls = JsonFormatter if fmt == "json" else LineFormatter
    return {"()": f"{cls.__module__}.{cls.__qualname__}", "max_chars": max_chars}


def configure(
    *,
    level: str = "INFO",
    fmt: LogFormat = "text",
    file: Path | None = None,
    max_chars: int | None = SERVICE_MAX_CHARS,
    every_step: bool = False,
) -> None:
    """Send every log record of this process and of the engine processes it starts to stderr (``file`` None) or
    to ``file``, one line per event at ``level`` and above; ``warnings.warn`` becomes a record (logger
    ``py.warnings``) that goes the same way. ``every_step`` keeps the migration and HTTP client steps at ``level``
    too (a command's ``-v``)."""
    level = level.upper()
    handler: dict[str, Any] = (
        {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}
        if file is None
        else {"class": "logging.FileHandler", "filename": str(file), "mode": "a", "encoding": "utf-8"}
    )
    chatty = level if every_step or level == "DEBUG" else "WARNING"
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": _formatter_config(fmt, max_chars)},
        "handlers": {"out": {**handler, "formatter": "line"}},
        "root": {"handlers": ["out"], "level": level},
        # vLLM's own logger passes its records up instead of printing them itself.
        "loggers": {
            "vllm": {"handlers": [], "level": level, "propagate": True},
            **{name: {"level": chatty} for name in _CHATTY},
        },
    }
    logging.config.dictConfig(config)
    logging.captureWarnings(True)
    _hand_to_vllm(config, level)


def _hand_to_vllm(config: dict[str, Any], level: str) -> None:
    """Give vLLM the same config for its import-time set-up here and in the engine core processes it starts."""
    fd, path = tempfile.mkstemp(prefix="vlbatch-logging-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)
    atexit.register(_remove, path)
    os.environ["VLLM_CONFIGURE_LOGGING"] = "1"
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = path
    os.environ["VLLM_LOGGING_LEVEL"] = level


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
