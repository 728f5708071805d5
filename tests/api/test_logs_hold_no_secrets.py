"""What the API logs while it serves requests with keys, prompts and inline images: none of them.

The server runs with uvicorn's access log on and every logger at DEBUG, its records going to pytest's
capture (``log_config=None``: uvicorn installs no handlers of its own), so anything any layer logs is seen.
"""

from __future__ import annotations

import base64
import io
import logging
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from PIL import Image

from api.main import create_app
from vlbatch.settings import Settings


def _png_data_url() -> tuple[str, str]:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (201, 13, 77)).save(buf, format="PNG")
    b64 = base64.b64encode(buf.getvalue()).decode()
    return f"data:image/png;base64,{b64}", b64


def test_no_key_prompt_or_image_bytes_reach_the_log(
    tmp_path: Path, redis_url: str, api_key: type, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "album"
    root.mkdir()
    db = f"sqlite:///{tmp_path / 'api.db'}"
    settings = Settings(database_url=db, broker_url=redis_url, model_name="tiny", allowed_input_roots=[root])
    key = api_key.make(db, tenant="acme")
    wrong = key[:-6] + "ZZZZZZ"
    data_url, b64 = _png_data_url()
    prompt_word = "zanzibar-quokka-prompt"  # goes into the prompt (the tag vocabulary)

    caplog.set_level(logging.DEBUG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_config=None, log_level="debug", access_log=True
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            body = {"items": [{"images": [data_url], "ref": "inline"}], "options": {"vocabulary": [prompt_word]}}
            r = c.post("/v1/jobs/tagging", json=body, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 201, r.text
            job = r.json()["id"]
            assert c.get(f"/v1/jobs/{job}/items", headers={"X-API-Key": key}).status_code == 200
            assert c.get(f"/v1/jobs/{job}", headers={"Authorization": f"Bearer {wrong}"}).status_code == 401
            bad = {**body, "options": {"vocabulary": [prompt_word], "max_tags": -1}}  # refused: 422 with the body
            assert c.post("/v1/jobs/tagging", json=bad, headers={"X-API-Key": key}).status_code == 422
    finally:
        server.should_exit = True
        thread.join(10)

    server_records = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    assert any(r.name == "uvicorn.access" for r in server_records)  # the log was on
    text = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in server_records)
    assert f"/v1/jobs/{job}/items" in text  # requests were logged
    for secret in (key, wrong, key[4:20], b64[:40], prompt_word, "Bearer"):
        assert secret not in text, secret


def test_a_database_error_names_no_bound_value(db_url: str) -> None:
    """What the API and workers log for a failed statement (``str(exc)``) holds the SQL, not its bound values."""
    from sqlalchemy.exc import IntegrityError

    from vlbatch.db.models import ApiKey
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    migrate(db_url)
    secret = "data:image/png;base64,c2VjcmV0LXByb21wdC1ieXRlcw=="
    with make_sessionmaker(make_engine(db_url))() as s:
        s.add(ApiKey(tenant="t", is_admin=False, prefix="p", secret_hash=secret))
        s.commit()
        s.add(ApiKey(tenant="t", is_admin=False, prefix="p", secret_hash=secret))
        with pytest.raises(IntegrityError) as caught:
            s.commit()
    text = str(caught.value)
    assert "api_keys" in text and "[SQL parameters hidden" in text
    if db_url.startswith("sqlite"):  # PostgreSQL's own DETAIL line names the duplicate key's value
        assert secret not in text
