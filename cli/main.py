"""The ``vlbatch`` command line: the Typer app, with every command of every group registered here.

Each group lives in its own module and imports what a command runs inside that command, so importing this module
(every command, ``--help``) stays cheap and loads neither the pipelines nor the engine.
"""

from __future__ import annotations

import logging

import typer

from cli import bench, embedded_runs, evaluate, hardware, job_outputs, jobs, keys, serve, templates

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


def main() -> None:
    from vlbatch.errors import VlbatchError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        app()
    except VlbatchError as exc:  # a refusal with its code, not a traceback (``vlbatch.errors`` lists the codes)
        typer.echo(f"error {exc.code}: {exc.message}", err=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
