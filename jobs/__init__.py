"""The jobs service: everything done to a job from outside it, in one place, for every entry point.

Submit (build the items, check the tenant's quotas with one protocol, insert, mark the chunks sent, commit, publish),
rerun, retry the failed items, cancel, pause and resume; OpenAI-compatible batches (``batches``: made from an
uploaded file, moved on when read, cancelled); the broker publisher and the reconciler that re-sends what
the broker lost; and the results' one record shape with one writer per export format. The API's routes, the
nightly scheduler, the embedded runner (``vlbatch tag``, ``docs``, ``run-batch``), batches and the bench all call
it, so a job is made and started one way.

Layer: below ``api`` and ``worker`` (which both call it), above ``pipelines``, ``engine`` and ``kernels``. May
import celery (to publish), SQLAlchemy, pydantic, the core (``vlbatch.settings``, ``vlbatch.db``,
``vlbatch.inputs``, ``vlbatch.errors``), ``pipelines`` and ``preprocessing``; never ``api``, ``worker``, the
commands, ``engine`` (but ``engine.structured``, through the pipelines) or ``kernels``, and never fastapi: a refusal
is a ``VlbatchError`` with its code, which the API turns into an HTTP answer.

``lint-imports`` checks these rules (the contracts in pyproject.toml).
"""
