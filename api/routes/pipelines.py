"""``GET /v1/pipelines``: every registered pipeline with its version, kind and options schema."""

from __future__ import annotations

from fastapi import APIRouter

from api.schemas import PipelineOut
from pipelines import registry

router = APIRouter(prefix="/v1/pipelines", tags=["pipelines"])


@router.get("")
def list_pipelines() -> list[PipelineOut]:
    return [
        PipelineOut(name=p.name, version=p.version, kind=p.kind, options_schema=p.Options.model_json_schema())
        for p in map(registry.get, registry.names())
    ]
