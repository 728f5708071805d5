"""Tables, sessions and CRUD functions. CRUD functions take keyword arguments and never raise HTTP errors.

Part of the core: imports nothing above it (see ``vlbatch``); rules that need a pipeline or the scheduler, such as
checking a job template, live in ``worker``.
"""
