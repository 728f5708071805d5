"""Job execution: Celery tasks carrying chunk ids, leases, the reconciler, the nightly scheduler and the embedded
runner.

Layer: below ``api``, above ``pipelines``, ``engine`` and ``kernels``. May import celery, SQLAlchemy, pydantic, the
core (``vlbatch.settings``, ``vlbatch.db``, ``vlbatch.inputs``, ``vlbatch.errors``), ``pipelines``,
``preprocessing``, ``engine`` and ``kernels``; never ``api`` or the ``vlbatch`` commands, and never vllm or torch
itself (the engine holds the model). ``api`` may import ``worker.queue`` only. Its modules import each other
without cycles. Task messages carry ids only; the database decides what is left to do.

``lint-imports`` checks these rules (the contracts in pyproject.toml).
"""
