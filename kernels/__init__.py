"""Device math: reference kernels (torch, run anywhere) and their device implementations.

Layer: beside ``engine`` and ``pipelines`` and independent of both, below ``worker``: it never imports the engine,
pipelines, worker, API or ``vlbatch`` command packages. It may import torch (at module top in the reference
modules, listed in tests/test_import_rules.py), safetensors and Pillow; transformers only in ``kernels.quantize``
(inside its functions); torch_npu only in ``kernels.npu`` (inside each function), chosen by ``dispatch``.
``vlbatch doctor --kernels`` imports ``parity`` when it runs, so an install without torch skips that check.

Layout:

* ``w8a8`` - INT8 weight/activation quantization and the INT8 x INT8 -> INT32 matmul with the 310P
  dequantization (``deq_scale`` as int64 bit patterns, ``quant_bias`` as int32), in plain torch.
* ``nz`` - FRACTAL_NZ pack/unpack of a 2-D matrix (the Cube unit's weight layout).
* ``smooth`` - SmoothQuant-style migration of activation outliers into the weights.
* ``npu`` - the same operations through torch_npu, imported inside each function.
* ``dispatch`` - picks the device implementation when an NPU is present, else the reference.
* ``parity`` - runs every device implementation against its reference (``vlbatch doctor --kernels``).
* ``quantize`` - the offline ``vlbatch quantize`` flow built on the reference kernels.

``lint-imports`` checks the package rules (the contracts in pyproject.toml).
"""
