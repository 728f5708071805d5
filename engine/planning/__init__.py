"""Planning for ``vlbatch plan``: pure arithmetic, no device access.

* ``shapes`` - a model's config.json read into the shapes the planner needs.
* ``planner`` - weights, KV cache, layout, rooflines and launch arguments for a device set; every platform
  fact (usable memory fraction, dtype, KV accounting, graph sizes, launch environment) is asked of
  ``engine.platforms``.
* ``render`` - a plan as text for people and as a compose file for machines.
* ``command`` - the body of ``vlbatch plan``: bad input becomes one line and exit code 2.
"""
