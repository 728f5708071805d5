"""Planning for ``vlbatch plan``: pure arithmetic, no device access.

* ``shapes`` - a model's config.json read into the shapes the planner needs.
* ``request`` - what to plan for (``PlanRequest``): context, images, tokens, quantization, the device set.
* ``memory`` - one rank's memory: the engine's own KV accounting (exact), weights (exact), activation peak and
  non-torch bytes (estimates).
* ``planner`` - weights, KV cache, layout, rooflines and launch arguments for a device set; every platform
  fact (usable memory fraction, dtype, KV accounting, graph sizes, launch environment) is asked of
  ``engine.platforms``.
* ``context`` - a model's own context length, as vLLM derives it from config.json.
* ``host_fit`` - the engine arguments a host starts a model with (the worker and the commands alike): the model's own
  context, and on a CPU host a KV cache from the model within a share of the memory available; what cannot start
  is refused before a load.
* ``render`` - a plan as text for people and as a compose file for machines.
* ``command`` - the body of ``vlbatch plan``: bad input becomes one line and exit code 2.
"""
