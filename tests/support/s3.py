"""An S3-compatible server on loopback for tests and the two-host rehearsal: moto's server mode
(``ThreadedMotoServer``, from PyPI's ``moto[server]``). MinIO would be the production-like choice, but it is not in
the package registries this project installs from (PyPI, Debian, npm); moto speaks the same S3 REST API
(ranged GETs, ``list_objects_v2`` paging with continuation tokens, error codes) that boto3 talks to MinIO or AWS.

The server is reached the way a deployment reaches its store: boto3's own ``AWS_ENDPOINT_URL`` and
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` variables, which ``s3_env`` returns for a process's environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.services import free_port


def s3_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "vlbatch-test",
        "AWS_SECRET_ACCESS_KEY": "vlbatch-test-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


@contextmanager
def moto_server() -> Iterator[str]:
    """A fresh S3 server on 127.0.0.1; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def client(endpoint: str) -> Any:
    import boto3

    env = s3_env(endpoint)
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )
