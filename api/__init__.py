"""HTTP interface: thin FastAPI routes over the jobs service (``jobs``) and the CRUD functions in ``vlbatch.db``.

Layer: below the ``vlbatch`` commands, beside ``worker`` (neither imports the other), above ``jobs``. May import
fastapi, pydantic, SQLAlchemy, the core (``vlbatch.settings``, ``vlbatch.db``, ``vlbatch.inputs``,
``vlbatch.errors``), ``jobs`` (to make, start and act on jobs, and the reconciler the API runs too), ``pipelines``
and ``preprocessing`` (a job is checked against its pipeline before it is stored); nothing of ``worker``. Never
imports ``engine``, ``kernels``, vllm or torch, not even through another package: the API process holds no model.
The one engine module it reaches, through the pipelines, is ``engine.structured`` (the grammar backend's limits, no
engine code).

``lint-imports`` checks these rules (the contracts in pyproject.toml).
"""
