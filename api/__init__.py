"""HTTP interface: thin FastAPI routes over the CRUD functions in ``vlbatch.db``.

Layer: below the ``vlbatch`` commands, above ``worker``. May import fastapi, pydantic, SQLAlchemy, the core
(``vlbatch.settings``, ``vlbatch.db``, ``vlbatch.inputs``, ``vlbatch.errors``), ``pipelines`` and ``preprocessing``
(a job is checked against its pipeline before it is stored) and, of ``worker``, only ``worker.queue``, to hand
chunk ids to the broker. Never imports ``engine``, ``kernels``, vllm or torch, not even through another package:
the API process holds no model. The one engine module it reaches, through the pipelines, is ``engine.structured``
(the grammar backend's limits, no engine code).

``lint-imports`` checks these rules (the contracts in pyproject.toml).
"""
