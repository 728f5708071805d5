"""Headers every answer of the API carries: no page of it may be framed by another page, none sniffed as another
type; and the dashboard's pages are never cached.

Why: the dashboard's buttons change state (remove a tag, retry, cancel); a page elsewhere that frames it can make
a user click one (clickjacking). ``frame-ancestors 'none'`` is the CSP form browsers honour today,
``X-Frame-Options: DENY`` the form older ones do. JSON answers carry them too: nothing of the API is meant to be
framed, and one rule for every path leaves no page out by omission. ``nosniff`` keeps a browser from running
a served file (a thumbnail, an export) as script because its bytes look like HTML. ``/ui`` answers show one
tenant's jobs and photos: ``no-store`` keeps them out of the browser's and any shared proxy's cache, where the
next user of the machine or the proxy's other clients would find them.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["FRAME_HEADERS", "FrameDenied"]

FRAME_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
)
DASHBOARD_HEADERS = ((b"cache-control", b"no-store"),)


class FrameDenied:
    """ASGI middleware adding ``FRAME_HEADERS`` to every HTTP answer, and ``DASHBOARD_HEADERS`` to those under
    ``/ui``, where the answer does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        wanted = FRAME_HEADERS + (DASHBOARD_HEADERS if scope["path"].startswith("/ui") else ())

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in wanted if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
