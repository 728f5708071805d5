"""Error codes of webhook endpoints and their deliveries (``api.routes.webhooks``, ``jobs.webhooks``).

A delivery attempt that fails keeps its code with the attempt (the API's deliveries list shows it); a refused
endpoint is answered with its code at creation. Registered in the order below; ``vlbatch.errors`` re-exports each
constant, and callers import it from there.
"""

from __future__ import annotations

from vlbatch.error_codes.registry import _define

WEBHOOK_NOT_FOUND = _define("webhook_not_found", 404, {"api"}, "No webhook endpoint of this tenant has that id.")
WEBHOOK_DELIVERY_NOT_FOUND = _define(
    "webhook_delivery_not_found", 404, {"api"}, "No delivery of this webhook endpoint has that id."
)
INVALID_WEBHOOK = _define(
    "invalid_webhook",
    422,
    {"api"},
    "The webhook endpoint cannot be stored as asked: a URL that is not http(s), holds credentials or names no "
    "host, or an unknown or empty list of events.",
)
WEBHOOK_URL_REFUSED = _define(
    "webhook_url_refused",
    422,
    {"api", "worker"},
    "The webhook URL reaches an address that is not public (loopback, private, link-local, reserved, in any "
    "spelling, or a name resolving to one), as image URLs are refused; at delivery the name is checked again. "
    "Loopback and private receivers are allowed with `VLBATCH_WEBHOOK_ALLOW_LOOPBACK=true`.",
)
WEBHOOK_HTTP_ERROR = _define(
    "webhook_http_error",
    502,
    {"api", "worker"},
    "The receiver answered a delivery with a status other than 2xx; the delivery is tried again with back-off.",
    retryable=True,
)
WEBHOOK_REDIRECT_REFUSED = _define(
    "webhook_redirect_refused",
    502,
    {"api", "worker"},
    "The receiver answered with a redirect; deliveries never follow one (point the endpoint at the final URL).",
    retryable=True,
)
WEBHOOK_UNREACHABLE = _define(
    "webhook_unreachable",
    502,
    {"api", "worker"},
    "The receiver's name did not resolve, or no connection or no complete answer came within "
    "`VLBATCH_WEBHOOK_TIMEOUT_S`; the delivery is tried again with back-off.",
    retryable=True,
)
WEBHOOK_ENDPOINT_DISABLED = _define(
    "webhook_endpoint_disabled",
    409,
    {"api", "worker"},
    "The endpoint is disabled (by its owner, or after failing every attempt for `VLBATCH_WEBHOOK_DISABLE_AFTER_S`); "
    "enable it again with PATCH before sending to it.",
)
