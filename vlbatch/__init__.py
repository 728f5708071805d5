"""vlbatch's core, the bottom layer every other package stands on.

``settings`` (the one Settings object), ``errors`` (the registry of refusal codes, defined by area in
``error_codes`` and re-exported there; ``error_docs`` prints it as the docs' table), ``db`` (tables, sessions,
CRUD), ``files`` (atomic writes), ``paths`` (the one rule for a client-named path: local, and inside these roots)
and ``inputs`` (folder listings inside them), with the Alembic ``migrations``, and nothing else: the commands live
in ``cli``, the bench harness in ``benchmarks``. The core may import the standard library, pydantic,
pydantic-settings, SQLAlchemy, Alembic and psycopg, and nothing above it: no other package of the product, no broker
(celery, redis), web (fastapi, uvicorn), CLI (typer) or model library (vllm, vllm_ascend, torch, torch_npu,
transformers). ``lint-imports`` checks these rules (the contracts in pyproject.toml).
"""
