"""Turns raw inputs (image bytes/paths/URLs, document files) into model-ready objects.

Pure functions; may import Pillow, httpx, pypdf, pypdfium2, python-docx, charset-normalizer and the
standard library, plus tokenizers/transformers lazily for counting tokens; never imports vllm/torch.
"""
