"""What tests share that is not a test: stand-ins and builders, never imported by the product.

- ``scripted.py``: the product's stub engine behind the real ``EngineRunner`` (answers, crashes, hangs on cue), set
  up for the feeder's and the runner's fault tests, and the worker context a feeder runs it in;
- ``rig.py``: worker processes on private services, and the run's one real worker rig (``rig`` fixture);
- ``poison_logits.py``: a logits processor for the real vLLM engine that kills the engine core on any request;
- ``decode_faults.py``: image decoders that segfault, hang or balloon, for the decoder children;
- ``services.py``: private Redis and PostgreSQL servers a test may stop, restart or flush;
- ``fake_platform.py``: a device platform registered by dotted path, as a vendor plugin would be;
- ``plugin_pipeline.py``: a pipeline registered from outside the product, as a plugin would be;
- ``ledger.py``: a finished job's rows written straight to the database, for export and dashboard tests;
- ``clips.py``: small video clips, good and broken, made with PyAV;
- ``db.py``: a queued job of N items (for a model of the test's choosing) in a fresh database, and outcomes
  written as the worker writes them;
- ``exiftool.py``: exiftool's reading of a photo or sidecar, the reader photo managers' tags are checked with;
- ``albums.py``: a folder of small PNGs and a tagging job over it, for the feeder's crash and breaker tests.
"""
