"""``vlbatch bench``: one command, one run, the same inputs for every way of driving the engine.

It writes the photos and the model once (``inputs``), then runs each *arm* over them in its own
process so only one engine is loaded at a time (``run``): (a) raw ``LLM.generate`` over everything at
once (``raw``), (b) the embedded ``vlbatch tag`` feeder, (c) the API + Redis + worker + PostgreSQL
service path, (d) an OpenAI client against ``vllm serve``, one request at a time and at concurrency 32
(``serve``). Every arm first runs a few warm-up items, excluded from timing, and reports items/s,
output tokens/s, mean engine occupancy, preprocessing ms/image and DB ms/item (``result.ArmResult``);
``report`` prints the table and the ratios to raw, writes JSON and a plot; ``sweep`` varies one knob.
``children`` starts the processes every benchmark needs (``vlbatch api``, and the environment any child gets:
the one place a benchmark reads ``os.environ``).

It sits below ``cli`` (whose ``bench`` command runs it) and above everything else: it may import
``engine``, ``worker``, ``api``, ``pipelines``, ``preprocessing``, the core and ``benchmarks.scenes``.
The heavy imports (vLLM, transformers, the OpenAI client, matplotlib) happen inside the functions that
need them.
"""
