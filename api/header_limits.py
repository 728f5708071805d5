"""A bound on how many header fields one request may carry.

The server bounds the head's bytes (``cli.serve``); within them a client can still pack thousands of tiny
fields, each of which every layer above walks (Starlette's ``Headers``, the key gate, logging). 431 with its code
before the app sees the request.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from api.http_errors import error_body
from vlbatch.errors import TOO_MANY_HEADERS

__all__ = ["HeaderCount"]


class HeaderCount:
    """ASGI middleware answering 431 ``too_many_headers`` to a request with more than ``max_headers`` fields."""

    def __init__(self, app: ASGIApp, *, max_headers: int) -> None:
        self.app = app
        self.max_headers = max_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and len(scope["headers"]) > self.max_headers:
            message = f"the request has {len(scope['headers'])} header fields, at most {self.max_headers}"
            await error_body(TOO_MANY_HEADERS, message)(scope, receive, send)
            return
        await self.app(scope, receive, send)
