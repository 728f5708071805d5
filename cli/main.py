"""The ``vlbatch`` command line: the Typer app, with every command of every group registered here.

Each group lives in its own module and imports what a command runs inside that command, so importing this module
(every command, ``--help``) stays cheap and loads neither the pipelines nor the engine.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from cli import bench, embedded_runs, evaluate, hardware, job_outputs, jobs, keys, serve, templates, webhooks
from vlbatch.errors import INVALID_SETTINGS
from vlbatch.settings import env_name_of, get_settings

if TYPE_CHECKING:
    from cli.output import QuietRun

app = typer.Typer(help="Batch vision/text jobs on vLLM.", no_args_is_help=True)

# Jobs in this process (SQLite, no broker).
app.command()(embedded_runs.tag)
app.command("run-batch")(embedded_runs.run_batch)
app.command()(embedded_runs.docs)
app.command()(embedded_runs.demo)
# Answer quality.
app.command("eval")(evaluate.eval_)
app.command("make-eval-docs")(evaluate.make_eval_docs)
# The services.
app.command(epilog=serve.API_EPILOG)(serve.api)  # the environment each service reads, under its --help
app.command(epilog=serve.WORKER_EPILOG)(serve.worker)
app.command()(serve.reconcile)
app.command()(serve.gc)
app.command()(serve.migrate)
# A job's outputs.
app.command()(job_outputs.energy)
app.command()(job_outputs.xmp)
# The device and the model on it.
app.command()(hardware.doctor)
app.command()(hardware.plan)
app.command()(hardware.quantize)
app.command()(bench.bench)
# Groups of subcommands.
app.add_typer(jobs.app, name="jobs")
app.add_typer(templates.app, name="templates")
app.add_typer(keys.app, name="keys")
app.add_typer(webhooks.app, name="webhooks")


SERVICES = frozenset({"api", "worker"})  # their logs are their output: structured lines on stderr
VERBOSE = ("-v", "--verbose")


@app.callback()
def _options(
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Logs and tracebacks on the terminal (also after the command).")
    ] = False,
) -> None:
    """Batch vision/text jobs on vLLM. Quiet by default: a command prints its own output and puts library and
    engine logs in its log file (vlbatch-COMMAND.log in the work directory, named at the end); -v or
    VLBATCH_LOG_LEVEL shows them."""


def main(argv: list[str] | None = None) -> None:
    """The console script: the command's output on the terminal, its logs where they belong, and one line per error.

    ``-v``/``--verbose`` is taken from anywhere before ``--`` (``vlbatch demo -v`` and ``vlbatch -v demo`` alike)."""
    from cli.error_lines import error_line
    from cli.output import QuietRun
    from vlbatch import logs

    args = list(sys.argv[1:] if argv is None else argv)
    end = args.index("--") if "--" in args else len(args)
    verbose = any(a in VERBOSE for a in args[:end])
    args = [a for i, a in enumerate(args) if i >= end or a not in VERBOSE]
    command = next((a for a in args if not a.startswith("-")), None)
    try:
        settings = get_settings()
    except ValidationError as exc:  # a bad VLBATCH_* value: name it, before anything else runs
        first = exc.errors()[0]
        where = env_name_of(first["loc"])
        typer.echo(f"error {INVALID_SETTINGS}: {where}: {first['msg']} (got {first.get('input')!r})", err=True)
        raise SystemExit(2) from None
    quiet: QuietRun | None = None
    if command in SERVICES:
        logs.configure(level=settings.logging.log_level or "INFO", fmt=settings.logging.log_format)
    elif verbose or settings.logging.log_level:
        logs.configure(level=settings.logging.log_level or "INFO", max_chars=None, every_step=True)
    elif command is not None and not {"--help", "-h"} & set(args):
        quiet = QuietRun(
            settings.logging.log_file or Path(f"vlbatch-{command}.log"), fixed=settings.logging.log_file is not None
        )
        try:
            quiet.start(args)
        except OSError:  # a work directory we may not write into: the log goes to the temporary folder instead
            quiet = QuietRun(Path(tempfile.gettempdir()) / f"vlbatch-{command}-{os.getpid()}.log", fixed=True)
            quiet.start(args)
    status: int | str | None = 0
    try:
        app(args=args, prog_name="vlbatch", standalone_mode=True)
    except SystemExit as exc:
        status = exc.code
        _end(quiet, None)
    except Exception as exc:
        line = error_line(exc, database_url=settings.database.database_url, broker_url=settings.broker.broker_url)
        if verbose:
            traceback.print_exception(exc, file=sys.stderr)
        else:  # into the log file; a service, whose log is its stderr, keeps it for VLBATCH_LOG_LEVEL=DEBUG
            logging.getLogger("vlbatch.cli").log(
                logging.DEBUG if command in SERVICES else logging.ERROR, "%s", line, exc_info=exc
            )
        status = 1
        _end(quiet, line)
    else:
        _end(quiet, None)
    raise SystemExit(status)


def _end(quiet: QuietRun | None, error: str | None) -> None:
    """Name the log file (when anything was logged), then the error, which is the last line of a failed run."""
    logged = quiet.finish() if quiet is not None else None
    if logged is not None:
        typer.echo(f"log: {_shown(logged)}", err=True)
    if error is not None:
        typer.echo(error, err=True)


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    main()
