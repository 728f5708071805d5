"""The one error type the kernels raise for bad input; messages name the bad value and the fix."""

from __future__ import annotations


class QuantizeError(Exception):
    """A model, calibration set or kernel argument cannot be quantized as asked."""
