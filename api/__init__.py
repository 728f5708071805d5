"""HTTP interface: thin FastAPI routes over the CRUD functions in ``vlbatch.db``.

May import: fastapi, pydantic, ``vlbatch`` (settings, db) and ``worker.queue`` to hand chunk ids to the
broker. Never imports the engine: the API process holds no model.
"""
