"""Job execution: Celery tasks carrying chunk ids, leases, the reconciler and the embedded runner.

May import: celery, ``vlbatch`` (settings, db), ``pipelines``, ``preprocessing`` and ``engine``'s
public interface. Task messages carry ids only; the database decides what is left to do.
"""
