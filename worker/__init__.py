"""Job execution: Celery tasks carrying chunk ids, leases, the nightly scheduler and the embedded runner.

Layer: beside ``api`` (neither imports the other), above ``jobs`` (the jobs service, which makes and starts every job
and holds the publisher and the reconciler this package's worker runs), ``pipelines``, ``engine`` and ``kernels``.
May import celery, SQLAlchemy, pydantic, the core (``vlbatch.settings``, ``vlbatch.db``, ``vlbatch.inputs``,
``vlbatch.errors``), ``jobs``, ``pipelines``, ``preprocessing``, ``engine`` and ``kernels``; never ``api`` or the
``vlbatch`` commands, and never vllm or torch itself (the engine holds the model). Its modules import each other
without cycles. Task messages carry ids only; the database decides what is left to do.

``lint-imports`` checks these rules (the contracts in pyproject.toml).
"""
