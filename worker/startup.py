"""Builds a worker process's shared parts once: the database, the loaded engine, the chat template,
the vision geometry and the model revision of the processed-with marker."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from engine.runtime.chat import ChatTemplate
from engine.runtime.runner import EngineRunner
from engine.vision import VideoGeometry, VisionGeometry
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.prep_pool import make_prep_pool

log = logging.getLogger(__name__)

_REVISION_FILES = ("config.json", "model.safetensors.index.json", "quant_model_description.json")


def model_revision(model_dir: str | Path) -> str:
    """A short hash of what identifies the weights: the config, the shard index (or each weight file's
    name and size when there is none). Cheap: no weight is read."""
    root = Path(model_dir)
    h = hashlib.sha256()
    for name in _REVISION_FILES:
        path = root / name
        if path.is_file():
            h.update(name.encode() + b"\0" + path.read_bytes())
    if not (root / "model.safetensors.index.json").is_file():
        for path in sorted(root.glob("*.safetensors")) + sorted(root.glob("*.bin")):
            h.update(f"{path.name}\0{path.stat().st_size}".encode())
    return h.hexdigest()[:16]


def build_context(
    settings: Settings,
    runner: EngineRunner,
    *,
    model_dir: str | Path,
    model_name: str | None = None,
    loaded: bool = False,
) -> WorkerContext:
    """Migrate the database, load the engine (unless ``loaded``: a lent one, ``worker.lent_engine``) and everything
    that belongs to the served model."""
    migrate(settings.database.database_url)
    chat = ChatTemplate.from_model_dir(model_dir)  # before the engine: a bad model directory fails fast
    if not loaded:
        runner.load()
    return WorkerContext(
        settings=settings,
        sessions=make_sessionmaker(make_engine(settings.database.database_url)),
        runner=runner,
        model_name=model_name or settings.model.served_model_name or Path(model_dir).name,
        chat=chat,
        pool=make_prep_pool(settings.decoding.preprocess_threads, nice=settings.decoding.preprocess_nice),
        geometry=VisionGeometry.from_model_dir(model_dir),
        video_geometry=VideoGeometry.from_model_dir(model_dir),
        model_revision=model_revision(model_dir),
    )
