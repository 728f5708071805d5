"""Queue routes: list the queues, pause and resume one (a model and priority). Admin only: a queue carries
every tenant's jobs. Adapters over ``jobs.actions`` (pause, resume: the chunks handed back are sent again) and
``vlbatch.db.queues`` (the list)."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.orm import Session

from api.deps import AdminDep, SessionClosingRoute, SessionDep, SettingsDep
from api.http_errors import errors
from api.schemas import QueueOut, QueueRef
from jobs import actions
from jobs.publisher import queue_name
from vlbatch.db import queues
from vlbatch.errors import ADMIN_REQUIRED, QUEUE_STATE_CONFLICT

router = APIRouter(route_class=SessionClosingRoute, prefix="/v1/queues", tags=["queues"])


def _queue_out(session: Session, ref: QueueRef) -> QueueOut:
    for q in queues.list_queues(session):
        if (q.model, q.priority) == (ref.model, ref.priority):
            return QueueOut(name=queue_name(q.model, q.priority), **q.__dict__)
    return QueueOut(
        name=queue_name(ref.model, ref.priority), model=ref.model, priority=ref.priority, paused=False, active_jobs=0
    )


@router.get("", responses=errors(ADMIN_REQUIRED))
def list_queues(session: SessionDep, principal: AdminDep) -> list[QueueOut]:
    """The queues with unfinished jobs, and the paused ones."""
    return [QueueOut(name=queue_name(q.model, q.priority), **q.__dict__) for q in queues.list_queues(session)]


@router.post("/pause", responses=errors(ADMIN_REQUIRED, QUEUE_STATE_CONFLICT))
def pause_queue(body: QueueRef, session: SessionDep, principal: AdminDep) -> QueueOut:
    """Stop claims of the chunks of every job on the queue; chunks workers hold finish. Resume with /resume."""
    actions.pause_queue(session, model=body.model, priority=body.priority, by=principal.who)
    return _queue_out(session, body)


@router.post("/resume", responses=errors(ADMIN_REQUIRED, QUEUE_STATE_CONFLICT))
def resume_queue(body: QueueRef, session: SessionDep, settings: SettingsDep, principal: AdminDep) -> QueueOut:
    """Resume a paused queue: the unfinished chunks of its queued and running jobs are sent again."""
    actions.resume_queue(session, settings, model=body.model, priority=body.priority)
    return _queue_out(session, body)
