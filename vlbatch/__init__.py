"""vlbatch's core and its commands, the bottom and the top of the layers.

The core (``settings``, ``db``, ``inputs``, ``errors``): the one Settings object, the database (tables,
sessions, CRUD) and input confinement. It may import the standard library, pydantic, pydantic-settings, SQLAlchemy,
Alembic and psycopg, and nothing above it: no other vlbatch package, no command, no broker (celery, redis), web
(fastapi, uvicorn), CLI (typer) or model library (vllm, vllm_ascend, torch, torch_npu, transformers).

The commands (``cli`` above ``bench``, ``doctor`` and ``demo``): the top layer, which may import every package.
``cli`` imports what a command runs inside that command, so ``import vlbatch.cli`` stays cheap. Of vllm and
torch, only ``bench`` imports vllm itself (its raw arm); torch_npu and vllm_ascend stay behind ``engine``.

Every module here is a command or core. ``lint-imports`` checks these rules (the contracts in pyproject.toml).
"""
