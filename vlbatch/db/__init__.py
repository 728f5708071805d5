"""Tables, sessions, and one module per protocol over them. Functions take keyword arguments and never raise HTTP
errors.

- ``models.py`` the tables, with ``claim_tables.py``, ``retention_tables.py`` and ``webhook_tables.py`` the ones kept
  apart; ``session.py`` engines, sessions and ``migrate``;
- ``job_store.py`` the job repository (jobs, chunks and items made, read, cancelled, paused, rerun);
- ``leases.py`` chunk leases (claim, renew, release, finish: compare-and-set on the owner);
- ``send_ledger.py`` which chunks are marked sent to the broker and which are due again;
- ``outcomes.py`` the outcome writer, ``results.py`` results read back as records, ``row_stream.py`` a query's
  rows in pages read ahead (the exports), ``reuse.py`` a duplicate's stored answer;
- ``bulk.py`` what they share (upserts, id slices, a writer one batch behind); ``batches.py``, ``filestore.py``,
  ``keys.py``, ``queues.py``, ``tags.py``, ``job_templates.py``, ``energy.py`` the smaller tables' own functions.

Part of the core: imports nothing above it (see ``vlbatch``); rules that need a pipeline or the scheduler, such as
checking a job template, live in ``worker``.
"""
