"""Hands chunk ids to the broker: the one place chunks are published. One queue per model and priority; messages
carry ids only.

``send_chunks`` is what a new, resumed or retried job goes through (mark sent, commit, publish); the reconciler
calls ``publish_chunks`` itself for chunks it has found to be lost, and ``drop_queues`` for the queues of models
whose last job has ended (their leftover messages and bindings would otherwise stay in the broker for ever, one
set per model name a client ever used). The engine worker takes ``queue_name``,
``PROCESS_CHUNK`` and ``celery_app`` from here, so a message is named and routed one way.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import get_args

from celery import Celery
from sqlalchemy.orm import Session

from vlbatch.db import send_ledger
from vlbatch.settings import QueueKind, Settings

log = logging.getLogger(__name__)

PROCESS_CHUNK = "vlbatch.process_chunk"
# Document work has its own queue, so long prefills can go to workers with document engine settings
# and nightly batches never sit in front of interactive photo jobs.
PRIORITIES: tuple[str, ...] = get_args(QueueKind)
PUBLISH_TIMEOUT_S = 2.0  # per socket operation with the broker, connect included
PUBLISH_BATCH = 1000  # messages a broker round trip carries


def queue_name(model: str, priority: str) -> str:
    """The broker queue of ``model``'s chunks of ``priority``: ``vlbatch.<model>.<priority>``. A model name with
    characters a queue name should not hold (``org/m``) has them replaced and a digest of the real name appended
    after a ``+``, which no name kept as it is contains: ``org/m`` and ``org_m`` never share a queue."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", model)
    if safe != model:
        safe += "+" + hashlib.sha256(model.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"vlbatch.{safe}.{priority}"


@lru_cache(maxsize=4)
def celery_app(broker_url: str) -> Celery:
    app = Celery("vlbatch", broker=broker_url)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=3,
        # A broker that accepts and never answers must not hold a request or a reconciler pass: every socket
        # operation is bounded and a failed send is not retried here (the chunk stays unenqueued in the DB and
        # the reconciler sends it on a later pass).
        broker_transport_options={"socket_timeout": PUBLISH_TIMEOUT_S, "socket_connect_timeout": PUBLISH_TIMEOUT_S},
        task_publish_retry=False,
    )
    return app


def publish_chunks(settings: Settings, *, model: str, priority: str, chunk_ids: Sequence[int]) -> bool:
    """Send one message per chunk. False when the broker is unreachable (the reconciler resends)."""
    app = celery_app(settings.broker.broker_url)
    queue = queue_name(model, priority)
    try:
        # A pooled producer keeps its broker connection and the queues it has declared: a connection of its own
        # per call cost each job create a connect and a queue declare, the larger part of a create under load.
        # A connection the broker dropped reconnects on its next use; this send fails and the reconciler resends.
        # Batched (kombu's ``Producer.batch``: a Redis pipeline per ``PUBLISH_BATCH`` messages, sent in order): a
        # million-item job's 31,250 messages took a broker round trip each, a third of its create.
        with (
            app.producer_pool.acquire(block=True, timeout=PUBLISH_TIMEOUT_S) as producer,
            producer.batch(max_size=PUBLISH_BATCH),
        ):
            for cid in chunk_ids:
                app.send_task(PROCESS_CHUNK, args=[cid], queue=queue, producer=producer)
    except Exception as exc:  # kombu raises several unrelated types for "broker down"
        log.warning("broker unreachable, %d chunks left for the reconciler: %s", len(chunk_ids), exc)
        return False
    return True


# Besides the list of its messages, kombu's Redis transport keeps a queue's bindings under these keys, and its
# messages of a priority other than the default under ``<queue>\x06\x16<step>``. Publishing needs none of the
# bindings (a message goes to the queue named as its routing key), and a consuming worker declares them again.
_BINDING_KEYS = ("_kombu.binding.{}", "_kombu.binding_permanent.{}")
_PRIORITY_STEPS = (3, 6, 9)


def drop_queues(settings: Settings, *, queues: Sequence[tuple[str, str]]) -> list[str]:
    """Delete the broker keys of ``queues`` (model, priority): their messages and bindings. Only for a Redis
    broker; the names of the queues that had keys ([] when the broker is down or not Redis: the next pass tries
    again).
    A job sent to such a queue meanwhile loses at most its messages, which the reconciler sends again."""
    if not queues:
        return []
    names = [queue_name(model, priority) for model, priority in queues]
    app = celery_app(settings.broker.broker_url)
    try:
        with app.producer_pool.acquire(block=True, timeout=PUBLISH_TIMEOUT_S) as producer:
            if producer.connection.transport.driver_type != "redis":
                return []
            pipe = producer.channel.client.pipeline(transaction=False)
            for q in names:
                keys = [q, *(k.format(q) for k in _BINDING_KEYS), *(f"{q}\x06\x16{step}" for step in _PRIORITY_STEPS)]
                pipe.delete(*keys)
            deleted = pipe.execute()
    except Exception as exc:  # kombu and redis raise several unrelated types for "broker down"
        log.warning("broker unreachable, %d ended queues left for a later pass: %s", len(names), exc)
        return []
    return [q for q, n in zip(names, deleted, strict=True) if n]


def send_chunks(session: Session, settings: Settings, *, model: str, priority: str, chunk_ids: Sequence[int]) -> bool:
    """Mark ``chunk_ids`` sent and commit, then send them; chunks the broker did not take are unmarked again
    (False: the reconciler sends them).

    The DB holds the work before any message names it. Marked in the same commit, the chunks are not the
    reconciler's "never sent" while this publishes: a million-item job's 31,250 messages take a while, and a
    reconciler pass meanwhile sent half of them a second time. If this process dies between the commit and the
    send, the reconciler sends them once they have gone unclaimed for ``VLBATCH_UNCLAIMED_RESEND_S``."""
    send_ledger.mark_enqueued(session, chunk_ids=chunk_ids)
    session.commit()
    if chunk_ids and not publish_chunks(settings, model=model, priority=priority, chunk_ids=chunk_ids):
        send_ledger.mark_unsent(session, chunk_ids=chunk_ids)
        session.commit()
        return False
    return True
