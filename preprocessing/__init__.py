"""Turns raw inputs (image bytes/paths/URLs) into model-ready objects.

Pure functions; may import Pillow, httpx and the standard library; never imports vllm/torch.
"""
