"""Core of vlbatch: the one Settings object, the database (tables, sessions, CRUD) and the CLI.

May import: the standard library, pydantic, SQLAlchemy, and the other vlbatch packages.
Never imports vllm, torch_npu or vllm_ascend (those live behind engine/).
"""
