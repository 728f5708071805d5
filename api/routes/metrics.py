"""``GET /metrics``: chips, engines, preprocessing, result writes and the ledger's items per queue, in the
Prometheus text format (0.0.4); ``api.prometheus`` says what each series is and where it comes from."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from api.deps import SessionClosingRoute, SessionDep, SettingsDep, require_metrics_reader
from api.http_errors import errors
from api.prometheus import CONTENT_TYPE, exposition
from vlbatch.errors import ADMIN_REQUIRED

router = APIRouter(route_class=SessionClosingRoute, tags=["metrics"])


# admin_required unless VLBATCH_AUTH_OPEN_METRICS opens the route
@router.get(
    "/metrics",
    response_class=Response,
    dependencies=[Depends(require_metrics_reader)],
    responses=errors(ADMIN_REQUIRED),
)
def metrics(session: SessionDep, settings: SettingsDep) -> Response:
    configured = [settings.model.served_model_name] if settings.model.served_model_name else []
    body = exposition(session, configured=configured, weights=settings.scheduling.tenant_shares)
    return Response(body, media_type=CONTENT_TYPE)
