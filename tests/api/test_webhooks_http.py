"""/v1/webhooks over HTTP, with the API's own sender delivering to a real receiver on loopback: the secret is shown at
creation and rotation only; a ping reaches the receiver signed with the current secret (verified by the
``standardwebhooks`` library); deliveries list every attempt and can be redelivered; another tenant sees none of it;
the dashboard lists them; refused URLs and unknown events are answered 422 with their codes."""

from __future__ import annotations

import httpx
import pytest

from api.main import create_app
from tests.support.webhook_receiver import Receiver
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(120)


def _settled(client: httpx.Client, endpoint_id: str, delivery_id: str, rx: Receiver, n: int) -> dict[str, object]:
    rx.wait_for(n)
    for _ in range(200):  # the sender records the attempt just after the receiver answered
        d: dict[str, object] = client.get(f"/v1/webhooks/{endpoint_id}/deliveries/{delivery_id}").json()
        if d["status"] != "pending":
            return d
        rx.arrived.acquire()
        rx.arrived.wait(0.05)
        rx.arrived.release()
    raise AssertionError(f"delivery {delivery_id} still pending")


def test_webhooks_over_http(db_url: str, serve: type, api_key: type) -> None:
    settings = Settings(
        database_url=db_url, api_reconcile=False, webhook_allow_loopback=True, webhook_poll_s=0.05, webhook_timeout_s=5
    )
    acme_key = api_key.make(db_url, tenant="acme")
    acme = api_key.header(acme_key)
    other = api_key.header(api_key.make(db_url, tenant="other"))
    with (
        Receiver() as rx,
        serve(create_app(settings)) as srv,
        httpx.Client(base_url=srv.url, timeout=30, headers=acme) as client,
    ):
        r = client.post("/v1/webhooks", json={"url": rx.url, "events": ["ping", "job.completed"], "description": "d"})
        assert r.status_code == 201, r.text
        created = r.json()
        hook_id, secret = created["id"], created["secret"]
        assert secret.startswith("whsec_") and created["enabled"] is True
        assert client.get(f"/v1/webhooks/{hook_id}").json()["secret"] is None  # shown once
        assert [h["id"] for h in client.get("/v1/webhooks").json()["data"]] == [hook_id]
        assert all(h["secret"] is None for h in client.get("/v1/webhooks").json()["data"])

        r = client.post(f"/v1/webhooks/{hook_id}/rotate-secret")
        assert r.status_code == 200 and r.json()["secret"] != secret
        secret = r.json()["secret"]

        r = client.post(f"/v1/webhooks/{hook_id}/ping")
        assert r.status_code == 202, r.text
        ping_id = r.json()["id"]
        delivered = _settled(client, hook_id, ping_id, rx, 1)
        assert delivered["status"] == "delivered"
        [attempt] = delivered["attempts"]  # type: ignore[misc]
        assert attempt["status_code"] == 200 and attempt["error_code"] is None and attempt["latency_ms"] >= 0
        [payload] = rx.verified(secret)  # signed with the rotated secret
        assert payload["type"] == "ping" and rx.received[0].headers["webhook-id"] == ping_id

        r = client.post(f"/v1/webhooks/{hook_id}/deliveries/{ping_id}/redeliver")
        assert r.status_code == 202 and r.json()["status"] == "pending"
        again = _settled(client, hook_id, ping_id, rx, 2)
        assert [a["status_code"] for a in again["attempts"]] == [200, 200]  # type: ignore[union-attr]
        assert rx.received[1].headers["webhook-id"] == ping_id  # the same message, so a receiver can tell
        listed = client.get(f"/v1/webhooks/{hook_id}/deliveries", params={"status": "delivered"}).json()["data"]
        assert [d["id"] for d in listed] == [ping_id]

        client.post("/ui/login", data={"key": acme_key})  # the dashboard lists the endpoint and its deliveries
        page = client.get("/ui/webhooks").text
        assert rx.url in page and ping_id in page and "delivered" in page and "200 · " in page

        r = client.patch(f"/v1/webhooks/{hook_id}", json={"enabled": False})
        assert r.status_code == 200 and r.json()["disabled_reason"] == "disabled by its owner"
        r = client.post(f"/v1/webhooks/{hook_id}/ping")
        assert r.status_code == 409 and r.json()["code"] == "webhook_endpoint_disabled"
        r = client.patch(f"/v1/webhooks/{hook_id}", json={"enabled": True, "events": ["batch.completed"]})
        assert r.json()["enabled"] is True and r.json()["events"] == ["batch.completed"]

        # another tenant sees nothing of it
        for method, path in (
            ("GET", f"/v1/webhooks/{hook_id}"),
            ("POST", f"/v1/webhooks/{hook_id}/ping"),
            ("GET", f"/v1/webhooks/{hook_id}/deliveries"),
            ("DELETE", f"/v1/webhooks/{hook_id}"),
        ):
            r = client.request(method, path, headers=other)
            assert r.status_code == 404 and r.json()["code"] == "webhook_not_found", (method, path, r.text)
        assert client.get("/v1/webhooks", headers=other).json()["data"] == []
        r = client.get(f"/v1/webhooks/{hook_id}/deliveries/msg_nope")
        assert r.status_code == 404 and r.json()["code"] == "webhook_delivery_not_found"

        assert client.delete(f"/v1/webhooks/{hook_id}").status_code == 204
        assert client.get(f"/v1/webhooks/{hook_id}").status_code == 404


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"url": "http://169.254.169.254/latest/meta-data", "events": ["ping"]}, "webhook_url_refused"),
        ({"url": "http://[::ffff:169.254.169.254]/", "events": ["ping"]}, "webhook_url_refused"),
        ({"url": "http://127.0.0.1:9/hook", "events": ["ping"]}, "webhook_url_refused"),
        ({"url": "file:///etc/passwd", "events": ["ping"]}, "invalid_webhook"),
        ({"url": "https://example.invalid/hook", "events": ["job.exploded"]}, "invalid_webhook"),
    ],
)
def test_refused_endpoints_get_422_with_their_code(body: dict[str, object], code: str, tmp_path: object) -> None:
    from fastapi.testclient import TestClient

    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/api.db", auth="off", api_reconcile=False, webhook_sender=False
    )
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/webhooks", json=body)
        assert r.status_code == 422 and r.json()["code"] == code, r.text
        assert client.get("/v1/webhooks").json()["data"] == []
