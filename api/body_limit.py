"""A cap on request bodies, enforced while they stream in.

Pure ASGI (no buffering): a declared ``Content-Length`` over the cap is refused before the body is read, and a
chunked body is counted as its chunks arrive and cut off as soon as it passes the cap. Either way the answer is
413 ``{detail, code: "request_too_large"}``; the route never sees the body, so memory stays bounded whatever a
client sends. File uploads (``/v1/files``) have their own, larger cap, ``VLBATCH_MAX_UPLOAD_BYTES`` plus room for
the multipart framing (413 ``upload_too_large``); the upload route counts the file's own bytes against the cap
exactly as they stream to disk (``api.upload_stream``). An NDJSON job upload (``/v1/jobs/ndjson``) is bounded per
line and by its item count instead (``api.ndjson_jobs``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from vlbatch.errors import REQUEST_TOO_LARGE, UPLOAD_TOO_LARGE

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UPLOAD_PREFIXES = ("/v1/files",)  # streamed to disk under VLBATCH_MAX_UPLOAD_BYTES
# Read a line at a time as they stream in, each line under VLBATCH_MAX_ITEM_LINE_BYTES and the lines under the job's
# item limits (api.ndjson_jobs): the body as a whole has no byte cap of its own.
LINE_STREAMS = ("/v1/jobs/ndjson",)
MULTIPART_SLACK = 64 * 1024  # an upload's body beyond its file: boundaries, part headers, the purpose field


class BodyLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int, max_upload_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if str(scope.get("path", "")) in LINE_STREAMS:
            await self.app(scope, receive, send)
        elif str(scope.get("path", "")).startswith(UPLOAD_PREFIXES):
            await _Limited(self.app, self.max_upload_bytes + MULTIPART_SLACK, UPLOAD_TOO_LARGE)(scope, receive, send)
        else:
            await _Limited(self.app, self.max_bytes, REQUEST_TOO_LARGE)(scope, receive, send)


_SETTING = {REQUEST_TOO_LARGE: "VLBATCH_MAX_REQUEST_BYTES", UPLOAD_TOO_LARGE: "VLBATCH_MAX_UPLOAD_BYTES"}


class _Limited:
    """One request under one cap, refused with ``code`` past it."""

    def __init__(self, app: ASGIApp, max_bytes: int, code: str) -> None:
        self.app, self.max_bytes, self.code = app, max_bytes, code

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, f"the request body declares {declared} bytes")
            return
        seen = 0
        started = refused = False

        async def counted_receive() -> Message:
            # Past the cap the client gets its 413 at once and the app sees a client that hung up: whatever it
            # answers to that is dropped (FastAPI would otherwise turn a read error into a 400).
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    if not started:
                        await self._refuse(send, f"the request body passed {self.max_bytes} bytes")
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted_receive, tracked_send)

    async def _refuse(self, send: Send, what: str) -> None:
        body = json.dumps(
            {"detail": f"{what}; the limit is {self.max_bytes} ({_SETTING[self.code]})", "code": self.code}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": [*headers, (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
