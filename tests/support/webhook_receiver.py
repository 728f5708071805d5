"""A real webhook receiver on loopback for the webhook tests: an HTTP server on a free port of 127.0.0.1 that keeps
every request it gets and answers from a script (``statuses``: the next status each time, the last one repeated;
``redirect_to``: a 302 there; ``hang``: it holds the request until the event is set). ``verified`` checks each kept
request with the ``standardwebhooks`` library, the reference verifier, under the secret the test gives it.
``on_receive`` runs inside the request before it is answered (a test reads the database there, as the receiver
would see it)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    seen: Any = None  # what ``on_receive`` returned for it

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.body)  # type: ignore[no-any-return]


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=lambda: [200])
    redirect_to: str | None = None
    hang: threading.Event | None = None
    on_receive: Callable[[Received], Any] | None = None
    received: list[Received] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                got = Received({k.lower(): v for k, v in self.headers.items()}, body)
                if receiver.on_receive is not None:
                    got.seen = receiver.on_receive(got)
                with receiver.arrived:
                    receiver.received.append(got)
                    n = len(receiver.received)
                    receiver.arrived.notify_all()
                if receiver.hang is not None:
                    receiver.hang.wait(60)
                if receiver.redirect_to is not None:
                    self.send_response(302)
                    self.send_header("location", receiver.redirect_to)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                status = receiver.statuses[min(n, len(receiver.statuses)) - 1]
                answer = b"x" * 100_000 if status >= 500 else b"ok"  # a long error page: only a few KB are read
                self.send_response(status)
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(answer)  # the sender may stop reading after its few KB

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.hang is not None:
            self.hang.set()
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, n: int, timeout: float = 30) -> list[Received]:
        """The first ``n`` requests, once they came (at most ``timeout`` seconds: a failure, not a timing)."""
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.received) >= n, timeout)
            assert len(self.received) >= n, f"{len(self.received)} requests came, {n} awaited"
            return list(self.received[:n])

    def verified(self, secret: str) -> list[dict[str, Any]]:
        """Every request's payload, each verified by ``standardwebhooks`` (which raises on a bad signature)."""
        hook = Webhook(secret)
        return [hook.verify(r.body, r.headers) for r in self.received]
