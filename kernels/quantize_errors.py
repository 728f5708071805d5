"""The one error type the kernels raise for bad input; messages name the bad value and the fix."""

from __future__ import annotations

from vlbatch.errors import QUANTIZE_REFUSED, VlbatchError


class QuantizeError(VlbatchError):
    """A model, calibration set or kernel argument cannot be quantized as asked."""

    code = QUANTIZE_REFUSED
