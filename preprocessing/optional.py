"""An optional library imported once, on first use, from any thread: the fast decoders (``simplejpeg``, ``pyvips``)
the worker uses when they are installed and does without when they are not."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType

__all__ = ["OptionalModule"]


class OptionalModule:
    """``name`` imported at the first ``get()`` (then ``setup`` run on it once), or None for good when the import
    raises one of ``missing``; later calls take no lock."""

    def __init__(
        self,
        name: str,
        *,
        missing: tuple[type[BaseException], ...] = (ImportError,),
        setup: Callable[[ModuleType], None] | None = None,
    ) -> None:
        self._name, self._missing_errors, self._setup = name, missing, setup
        self._lock = threading.Lock()
        self._module: ModuleType | None = None
        self._missing = False

    def get(self) -> ModuleType | None:
        if self._module is not None or self._missing:
            return self._module
        with self._lock:
            if self._module is None and not self._missing:
                try:
                    module = importlib.import_module(self._name)
                except self._missing_errors:
                    self._missing = True
                    return None
                if self._setup is not None:
                    self._setup(module)
                self._module = module
        return self._module
