"""s3:// inputs against a real S3-compatible server on loopback (moto's server mode, tests/support/s3.py): reads
within the allowed prefixes and the size cap, refusals with the item error codes, folders listed page by page,
and the job and worker paths that take them."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from jobs.new_items import image_items
from preprocessing import object_store
from preprocessing.images import load_source
from preprocessing.input_errors import InputError
from tests.support.s3 import client, moto_server, s3_env
from vlbatch.paths import PathRefused
from vlbatch.settings import Settings

ALLOWED = ["s3://photos/album", "s3://scans"]


def png(color: tuple[int, int, int] = (200, 10, 10)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        s3 = client(url)
        for bucket in ("photos", "scans", "other"):
            s3.create_bucket(Bucket=bucket)
        yield url


@pytest.fixture
def s3(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A client for setting up objects; the product's own client reads the same server through boto3's env."""
    for key, value in s3_env(endpoint).items():
        monkeypatch.setenv(key, value)
    object_store._client.cache_clear()
    yield client(endpoint)
    object_store._client.cache_clear()


def read(uri: str, max_bytes: int = 1 << 20) -> bytes:
    return object_store.read_object(uri, allowed=ALLOWED, max_bytes=max_bytes)


def test_reads_an_object_under_an_allowed_prefix(s3: Any) -> None:
    data = png()
    s3.put_object(Bucket="photos", Key="album/2026/a.png", Body=data)
    s3.put_object(Bucket="scans", Key="page.png", Body=data)
    assert read("s3://photos/album/2026/a.png") == data
    assert read("s3://scans/page.png") == data  # a whole bucket allowed


@pytest.mark.parametrize(
    "uri",
    [
        "s3://other/album/a.png",  # another bucket
        "s3://photos/albums/a.png",  # a sibling sharing the prefix's letters, not its segment
        "s3://photos/a.png",  # above the prefix
    ],
)
def test_refuses_objects_outside_the_prefixes(s3: Any, uri: str) -> None:
    bucket, _, key = uri[5:].partition("/")
    s3.put_object(Bucket=bucket, Key=key, Body=png())
    with pytest.raises(InputError) as err:
        read(uri)
    assert err.value.code == "outside_roots"


@pytest.mark.parametrize("uri", ["s3://photos/album/../secret.png", "s3://Bad_Bucket/x.png", "s3:/photos/a"])
def test_refuses_malformed_addresses(s3: Any, uri: str) -> None:
    with pytest.raises(InputError) as err:
        read(uri)
    assert err.value.code == "unsupported_source"


def test_size_cap_empty_and_missing(s3: Any) -> None:
    s3.put_object(Bucket="photos", Key="album/big.png", Body=b"x" * 101)
    s3.put_object(Bucket="photos", Key="album/fits.png", Body=b"x" * 100)
    s3.put_object(Bucket="photos", Key="album/empty.png", Body=b"")
    with pytest.raises(InputError) as err:
        read("s3://photos/album/big.png", max_bytes=100)
    assert err.value.code == "too_large" and "101 bytes" in str(err.value)
    assert read("s3://photos/album/fits.png", max_bytes=100) == b"x" * 100
    with pytest.raises(InputError) as err:
        read("s3://photos/album/empty.png")
    assert err.value.code == "empty_file"
    with pytest.raises(InputError) as err:
        read("s3://photos/album/nothing-here.png")
    assert err.value.code == "not_found"


def test_an_unreachable_store_is_a_fetch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.services import free_port

    for key, value in s3_env(f"http://127.0.0.1:{free_port()}").items():
        monkeypatch.setenv(key, value)
    object_store._client.cache_clear()
    try:
        with pytest.raises(InputError) as err:
            read("s3://photos/album/a.png")
        assert err.value.code == "fetch_error"
    finally:
        object_store._client.cache_clear()


def test_lists_a_folder_page_by_page_in_key_order(s3: Any) -> None:
    keys = [f"album/paged/{n:04d}.jpg" for n in range(23)] + ["album/paged/notes.txt", "album/paged/sub/x.png"]
    for key in keys:
        s3.put_object(Bucket="photos", Key=key, Body=b"1")
    s3.put_object(Bucket="photos", Key="album/paged/marker/", Body=b"")
    listings: list[object] = []
    store = object_store._client()
    store.meta.events.register("before-call.s3.ListObjectsV2", lambda **kw: listings.append(kw))
    found = list(
        object_store.iter_objects(
            "s3://photos/album/paged/", allowed=ALLOWED, suffixes={".jpg", ".png"}, recursive=True, page_size=5
        )
    )
    assert found == [f"s3://photos/{k}" for k in sorted(keys) if not k.endswith(".txt")]
    assert len(listings) == 6  # 26 keys (with the folder marker), 5 a page: never all in one response
    flat = object_store.iter_objects(
        "s3://photos/album/paged", allowed=ALLOWED, suffixes={".jpg", ".png"}, recursive=False
    )
    assert len(list(flat)) == 23  # not into sub/


def test_a_job_folder_and_a_worker_read(s3: Any) -> None:
    for n in range(3):
        s3.put_object(Bucket="photos", Key=f"album/job/{n}.png", Body=png((n, n, n)))
    settings = Settings(_env_file=None, allowed_s3_prefixes=ALLOWED)  # type: ignore[call-arg]
    items = image_items(
        settings,
        roots=[],  # the tenant's folders: none needed for an object-store folder
        inline=None,
        directory="s3://photos/album/job",
        recursive=True,
        images_per_prompt=1,
        videos=False,
        s3_prefixes=ALLOWED,
    )
    sources = [item.inputs["images"][0] for item in items]
    assert sources == [f"s3://photos/album/job/{n}.png" for n in range(3)]
    data = load_source(sources[1], allowed_roots=[], max_bytes=1 << 20, url_timeout_s=5, allowed_s3_prefixes=ALLOWED)
    assert Image.open(io.BytesIO(data)).getpixel((0, 0)) == (1, 1, 1)
    with pytest.raises(PathRefused):
        image_items(
            settings,
            roots=[],
            inline=None,
            directory="s3://other/job",
            recursive=True,
            images_per_prompt=1,
            videos=False,
            s3_prefixes=ALLOWED,
        )
    with pytest.raises(InputError) as err:  # an inline item the settings do not allow
        load_source("s3://other/x.png", allowed_roots=[Path("/")], max_bytes=10, url_timeout_s=5)
    assert err.value.code == "outside_roots"


def test_settings_refuse_a_prefix_that_is_not_s3() -> None:
    with pytest.raises(ValueError, match="s3://bucket"):
        Settings(_env_file=None, allowed_s3_prefixes=["/data/album"])  # type: ignore[call-arg]
