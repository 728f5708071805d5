"""Dry runs where the model is at hand (``vlbatch tag|docs|run-batch --dry-run``, ``vlbatch jobs estimate``): the
model directory gives the vision geometry and the tokenizer, and the engine's planner the fallback rate, to
``jobs.submit.dry_run``. Nothing is stored and no engine is loaded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from engine.planning.throughput import planned_throughput
from engine.platforms import current_platform
from engine.vision import VisionGeometry
from jobs.estimate import Estimate, Geometry, Planner, PlannerRate, Profile
from jobs.request import JobRequest
from jobs.submit import dry_run
from preprocessing.chunking import load_token_counter
from vlbatch.settings import Settings


def model_geometry(model_dir: Path) -> Geometry:
    geo = VisionGeometry.from_model_dir(model_dir)
    return Geometry(
        patch_size=geo.patch_size,
        merge_size=geo.merge_size,
        min_pixels=geo.min_pixels,
        max_pixels=geo.max_pixels,
        source=f"{model_dir.name}'s preprocessor_config.json",
    )


def dry_run_card(settings: Settings, card: str | None) -> str | None:
    """The card a dry run plans for: the one named, else this host's platform's own (``cpu-host``, measured, on a
    CPU host); None on an accelerator host, whose card must be named (``--card``)."""
    if card is not None:
        return card
    return current_platform(settings.devices.platform, npu_smi=settings.devices.npu_smi).dry_run_card


def planner_for(model_dir: Path, *, card: str | None, cards: int = 1) -> Planner | None:
    """The planner's rate for items of a profile on ``cards`` ``card``s; None without a card to plan for."""
    if card is None:
        return None

    def rate(profile: Profile) -> PlannerRate | None:
        planned = planned_throughput(
            model_dir,
            card=card,
            cards=cards,
            visual_tokens_per_image=profile.visual_tokens_per_image,
            images_per_prompt=profile.images_per_prompt,
            text_tokens=profile.text_tokens,
            output_tokens=profile.output_tokens,
            expected_output_tokens=profile.expected_output_tokens,
            expected_from=profile.expected_from,
        )
        return PlannerRate(planned.items_per_s, planned.power_w, planned.assumption) if planned else None

    return rate


def estimate_with_model(
    session: Session,
    settings: Settings,
    request: JobRequest,
    *,
    model_dir: Path,
    card: str | None = None,
    cards: int = 1,
    admit: bool = False,
) -> Estimate:
    """``dry_run`` of ``request`` with the model's own geometry and tokenizer, and the planner for ``card`` (else
    for this host's platform's own card, :func:`dry_run_card`)."""
    count: Any = None
    try:
        count = load_token_counter(model_dir)
    except Exception:  # no usable tokenizer: the estimate says it counted characters instead
        count = None
    return dry_run(
        session,
        settings,
        request,
        admit=admit,
        geometry=model_geometry(model_dir),
        count_text=count,
        planner=planner_for(model_dir, card=dry_run_card(settings, card), cards=cards),
    )


def estimate_directory(
    settings: Settings,
    *,
    directory: Path,
    model_dir: Path,
    pipeline: str,
    options: dict[str, Any],
    card: str | None = None,
    cards: int = 1,
) -> Estimate:
    """The dry run of ``vlbatch tag`` or ``vlbatch docs`` over ``directory``: the items the run would make, against
    the rates recorded in the run's database (``VLBATCH_DATABASE_URL``, where embedded runs sample their engine)."""
    from pipelines import registry
    from pipelines.base import PipelineKind
    from preprocessing.documents import EXTENSIONS
    from vlbatch.db import job_store
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate
    from vlbatch.inputs import iter_files, iter_images

    root = directory.resolve()
    kind = registry.get(pipeline).kind
    items: Sequence[job_store.NewItem]
    if kind == PipelineKind.IMAGE:
        paths = [str(p) for p in iter_images(root, recursive=True, roots=[root], videos=True)]
        per_prompt = int(options.get("images_per_prompt", 1))
        items = job_store.items_from_paths(paths, images_per_prompt=per_prompt)
    else:
        paths = [str(p) for p in iter_files(root, suffixes=EXTENSIONS, recursive=True, roots=[root])]
        items = [job_store.NewItem(inputs={"path": p}, ref=p) for p in paths]
    name = settings.model.served_model_name or model_dir.name
    request = JobRequest(pipeline=pipeline, model=name, options=options, items=items)
    settings = settings.model_copy(update={"allowed_input_roots": [root], "model_path": str(model_dir)})
    migrate(settings.database.database_url)
    sessions = make_sessionmaker(make_engine(settings.database.database_url))
    with sessions() as s:
        return estimate_with_model(s, settings, request, model_dir=model_dir, card=card, cards=cards)
