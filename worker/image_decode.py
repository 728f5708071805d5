"""Where a worker decodes images: in its preprocessing threads, or in decoder child processes.

``VLBATCH_IMAGE_DECODE_ISOLATION=process`` runs the decode and resize of every image (``decode_rgb_bytes``) in
children of the document parser's kind (``preprocessing.documents.sandbox``): an address-space cap, a wall-time
deadline per image, a child replaced after any failure. A decoder that segfaults or aborts on a hostile file, runs
for minutes or asks for gigabytes then fails that one item with ``decode_crashed``, ``decode_timeout`` or
``decode_memory``, and the worker, its engine and the other items go on. Without it (``thread``, the default) the
pixel guard bounds memory and time of the decoders we know, but a crash inside a C decoder takes the worker down
and its chunk goes to the next worker. The cost: the compressed bytes go to the child and the resized RGB pixels
come back (a 448 x 448 image is 0.6 MB); ``benchmarks/decode_isolation.py`` (1600 x 1200 JPEGs to 256 tokens, two
threads on a 2-core host) gave 0.88 of the threads' images/s, which is why it is not the default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from PIL import Image

from preprocessing.decode_bounds import as_decode_error, image_decode_bounds
from preprocessing.documents.sandbox import Sandbox, shared_sandbox
from preprocessing.images import decode_for_budget, decode_rgb_bytes
from preprocessing.input_errors import InputError
from vlbatch.settings import Settings

DecodedRGB = tuple[tuple[int, int], bytes, dict[str, object]]  # size, RGB pixels, the photo's facts
TASKS_PER_CHILD = 100_000  # a decoder child is cheap to keep and about a second to start: replaced on failure only


class ImageDecoder(Protocol):
    def __call__(self, data: bytes, *, what: str, factor: int, min_pixels: int, max_pixels: int) -> Image.Image: ...


def decode_in_thread(data: bytes, *, what: str, factor: int, min_pixels: int, max_pixels: int) -> Image.Image:
    return decode_for_budget(data, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)


class IsolatedDecoder:
    """Decodes in ``sandbox``'s children; the child's failures become the item's decode codes."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        decode: Callable[..., DecodedRGB] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.decode = decode or decode_rgb_bytes  # module-level, so the child can import it by name

    def __call__(self, data: bytes, *, what: str, factor: int, min_pixels: int, max_pixels: int) -> Image.Image:
        try:
            size, pixels, facts = self.sandbox.call(
                self.decode, data, what=what, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels
            )
        except InputError as exc:
            raise as_decode_error(exc, what, self.sandbox.bounds) from None
        img = Image.frombytes("RGB", size, pixels)
        img.info["photo"] = facts  # as decode_for_budget carries them in this process
        return img


def image_decoder(settings: Settings) -> ImageDecoder:
    """The decoder ``settings`` ask for; its children are the process's shared ones for images
    (``preprocessing.documents.sandbox.shared_sandbox``), started once per process and closed at exit."""
    if settings.decoding.image_decode_isolation == "thread":
        return decode_in_thread
    bounds = image_decode_bounds(settings, tasks_per_child=TASKS_PER_CHILD)
    return IsolatedDecoder(shared_sandbox("images", bounds, processes=settings.decoding.image_decode_processes))


__all__ = ["ImageDecoder", "IsolatedDecoder", "decode_in_thread", "image_decoder"]
