"""Device math: reference kernels (torch, run anywhere) and their device implementations.

May import torch lazily; torch_npu only inside the Ascend implementations, chosen by a dispatch.

Layout:

* ``w8a8`` - INT8 weight/activation quantization and the INT8 x INT8 -> INT32 matmul with the 310P
  dequantization (``deq_scale`` as int64 bit patterns, ``quant_bias`` as int32), in plain torch.
* ``nz`` - FRACTAL_NZ pack/unpack of a 2-D matrix (the Cube unit's weight layout).
* ``smooth`` - SmoothQuant-style migration of activation outliers into the weights.
* ``npu`` - the same operations through torch_npu, imported inside each function.
* ``dispatch`` - picks the device implementation when an NPU is present, else the reference.
* ``parity`` - runs every device implementation against its reference (``vlbatch doctor --kernels``).
* ``quantize`` - the offline ``vlbatch quantize`` flow built on the reference kernels.

This package may import torch, numpy and safetensors; transformers only inside ``quantize`` functions;
torch_npu only inside ``npu``. It never imports the engine, worker or API packages.
"""
