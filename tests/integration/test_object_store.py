"""The object-store contract (strom.objectstore.store's docstring), run on both backends: the
filesystem under a directory and S3 against a real SeaweedFS server."""

from __future__ import annotations

import asyncio
import base64
import http.server
import os
import re
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from crc32c import crc32c

from strom.objectstore.local import LocalObjectStore
from strom.objectstore.s3 import S3ObjectStore
from strom.objectstore.s3_settings import S3Settings
from strom.objectstore.store import ObjectInfo, ObjectNotFoundError, ObjectStore, ObjectStoreUnavailableError
from strom.testing.fault_proxy import FaultProxy
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.object_stores import new_bucket, s3_settings, seaweedfs

__all__ = ["seaweedfs"]

Scenario = Callable[[ObjectStore, Path], Awaitable[None]]


@pytest.fixture(params=["local", "s3"])
def run_on_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Scenario], None]:
    """Runs a scenario against a fresh store of the parametrized backend (key prefix ``pre/``)."""

    def run(scenario: Scenario) -> None:
        settings = None
        if request.param == "s3":
            server: SeaweedS3Process = request.getfixturevalue("seaweedfs")
            settings = S3Settings(
                **{**_fields(s3_settings(server, new_bucket(server))), "key_prefix": "pre/"}
            )

        async def main() -> None:
            store: ObjectStore
            if settings is None:
                store = LocalObjectStore(str(tmp_path / "remote"), key_prefix="pre/")
            else:
                store = S3ObjectStore(settings)
            try:
                await scenario(store, tmp_path)
            finally:
                await store.close()

        asyncio.run(main())

    return run


def _fields(settings: S3Settings) -> dict[str, object]:
    return {name: getattr(settings, name) for name in S3Settings.__dataclass_fields__}


def _run_against(
    settings: S3Settings,
    endpoint: str,
    scenario: Callable[[S3ObjectStore], Awaitable[None]],
    **changes: object,
) -> None:
    """Runs ``scenario`` on an S3 store of ``settings`` that reaches its server at ``endpoint``."""

    async def main() -> None:
        store = S3ObjectStore(S3Settings(**{**_fields(settings), "endpoint_url": endpoint, **changes}))
        try:
            await scenario(store)
        finally:
            await store.close()

    asyncio.run(main())


def test_put_then_get_and_ranges(run_on_store: Callable[[Scenario], None]) -> None:
    data = os.urandom(300_000)

    async def scenario(store: ObjectStore, _tmp: Path) -> None:
        await store.put("topic-0/seg.log", data)
        assert await store.get("topic-0/seg.log") == data
        assert await store.get_range("topic-0/seg.log", 1000, 5000) == data[1000:5000]
        # A range past the end is cut at the end; one starting at or past it is empty.
        assert await store.get_range("topic-0/seg.log", 299_990, 400_000) == data[299_990:]
        assert await store.get_range("topic-0/seg.log", 300_000, 300_100) == b""

    run_on_store(scenario)


def test_get_range_into_fills_the_buffers_in_order(run_on_store: Callable[[Scenario], None]) -> None:
    """A scatter read: each buffer filled in turn; cut at the object's end (the rest of the buffers
    left as they were), nothing from at or past it, ObjectNotFoundError for a missing key."""
    data = os.urandom((3 << 20) + 777)  # several socket reads per buffer, and a partial last one

    async def scenario(store: ObjectStore, _tmp: Path) -> None:
        await store.put("topic-0/seg.log", data)
        buffers = [bytearray(b"\xee" * size) for size in (1 << 20, 1 << 20, 500_000)]
        got = await store.get_range_into("topic-0/seg.log", 1000, [memoryview(b) for b in buffers])
        assert got == sum(map(len, buffers))
        assert b"".join(buffers) == data[1000 : 1000 + got]
        tail = [bytearray(b"\xee" * 1000), bytearray(b"\xee" * 1000)]
        got = await store.get_range_into("topic-0/seg.log", len(data) - 1500, [memoryview(b) for b in tail])
        assert got == 1500
        assert (tail[0], tail[1][:500], tail[1][500:]) == (data[-1500:-500], data[-500:], b"\xee" * 500)
        assert await store.get_range_into("topic-0/seg.log", len(data), [memoryview(bytearray(10))]) == 0
        with pytest.raises(ObjectNotFoundError):
            await store.get_range_into("topic-0/none.log", 0, [memoryview(bytearray(10))])

    run_on_store(scenario)


def test_put_file_streams_a_file_and_replaces_whole(run_on_store: Callable[[Scenario], None]) -> None:
    async def scenario(store: ObjectStore, tmp: Path) -> None:
        path = tmp / "segment.log"
        first = os.urandom(2_000_000)
        path.write_bytes(first)
        await store.put_file("a/b/00000000000000000000.log", str(path))
        assert await store.get("a/b/00000000000000000000.log") == first
        await store.put("a/b/00000000000000000000.log", b"replaced")
        assert await store.get("a/b/00000000000000000000.log") == b"replaced"

    run_on_store(scenario)


def test_list_by_prefix_with_sizes(run_on_store: Callable[[Scenario], None]) -> None:
    async def scenario(store: ObjectStore, _tmp: Path) -> None:
        for key, size in (("t-0/x/1.log", 10), ("t-0/x/1.index", 3), ("t-0/y/2.log", 7), ("t-1/z/3.log", 1)):
            await store.put(key, b"\0" * size)
        assert await store.list("t-0/") == [
            ObjectInfo("t-0/x/1.index", 3),
            ObjectInfo("t-0/x/1.log", 10),
            ObjectInfo("t-0/y/2.log", 7),
        ]
        assert await store.list("t-0/x/1.") == [ObjectInfo("t-0/x/1.index", 3), ObjectInfo("t-0/x/1.log", 10)]
        assert await store.list("t-2/") == []

    run_on_store(scenario)


def test_delete_is_idempotent_and_missing_keys_are_not_found(
    run_on_store: Callable[[Scenario], None],
) -> None:
    async def scenario(store: ObjectStore, _tmp: Path) -> None:
        await store.put("k/1", b"one")
        await store.put("k/2", b"two")
        await store.delete(["k/1", "k/never"])
        await store.delete(["k/1"])
        assert await store.list("k/") == [ObjectInfo("k/2", 3)]
        with pytest.raises(ObjectNotFoundError):
            await store.get("k/1")
        with pytest.raises(ObjectNotFoundError):
            await store.get_range("k/1", 0, 10)

    run_on_store(scenario)


def test_keys_that_escape_the_store_are_refused(run_on_store: Callable[[Scenario], None]) -> None:
    async def scenario(store: ObjectStore, _tmp: Path) -> None:
        for key in ("../outside", "/abs", "a//b", ""):
            with pytest.raises(ValueError, match="not an object key"):
                await store.put(key, b"x")

    run_on_store(scenario)


def test_an_unreachable_s3_server_is_a_retriable_error(seaweedfs: SeaweedS3Process) -> None:
    """A port nobody listens on: the client's attempts fail to connect, and the store says unavailable."""

    async def scenario(store: S3ObjectStore) -> None:
        with pytest.raises(ObjectStoreUnavailableError):
            await store.put("k", b"x")
        with pytest.raises(ObjectStoreUnavailableError):
            await store.get_range("k", 0, 1)
        with pytest.raises(ObjectStoreUnavailableError):
            await store.get_range_into("k", 0, [memoryview(bytearray(1))])

    _run_against(s3_settings(seaweedfs, "nowhere"), "http://127.0.0.1:9", scenario, max_attempts=2)


def test_s3_puts_carry_a_crc32c_the_server_checked(seaweedfs: SeaweedS3Process, tmp_path: Path) -> None:
    """Payloads go unsigned (no SHA-256 of every byte in the broker), guarded instead by a CRC32C
    header the server verifies (it refuses a mismatch as BadDigest) and keeps: the checksum it holds
    for an object put from bytes and one streamed from a file (several of the 1 MiB send blocks and a
    partial one) is the CRC32C of the bytes."""
    bucket = new_bucket(seaweedfs)
    source = tmp_path / "segment.log"
    source.write_bytes(os.urandom((3 << 20) + 12345))
    small = os.urandom(5000)

    async def scenario() -> None:
        store = S3ObjectStore(s3_settings(seaweedfs, bucket))
        try:
            await store.put("small", small)
            await store.put_file("file", str(source))
            assert await store.get("file") == source.read_bytes()
            for key, data in (("small", small), ("file", source.read_bytes())):
                head = store._client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
                assert head["ChecksumCRC32C"] == base64.b64encode(crc32c(data).to_bytes(4, "big")).decode()
        finally:
            await store.close()

    asyncio.run(scenario())


def test_s3_reads_into_buffers_on_one_pooled_connection(seaweedfs: SeaweedS3Process) -> None:
    """A ranged read into buffers takes the body from the socket itself and then hands the connection
    back to its pool: reads one after another go over one connection (counted by a relay between the
    client and the server), none closed and opened again."""
    data = os.urandom(2 << 20)
    proxy = FaultProxy(("127.0.0.1", seaweedfs.ports["s3"]))
    settings = s3_settings(seaweedfs, new_bucket(seaweedfs))

    before_reads: list[int] = []

    async def scenario(store: S3ObjectStore) -> None:
        await store.put("seg.log", data)
        before_reads.append(proxy.connections)
        for start in range(0, len(data), 300_000):
            buffers = [bytearray(200_000), bytearray(100_000)]
            got = await store.get_range_into("seg.log", start, [memoryview(b) for b in buffers])
            assert b"".join(buffers)[:got] == data[start : start + 300_000]

    try:
        _run_against(settings, f"http://127.0.0.1:{proxy.port}", scenario)
    finally:
        proxy.close()
    assert proxy.connections == before_reads[0] + 1


class _ShortBodyServer(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a ranged answer whose connection drops halfway through its body."""

    def do_GET(self) -> None:
        self.send_response(206)
        self.send_header("Content-Length", "100000")
        self.send_header("Content-Range", "bytes 0-99999/100000")
        self.end_headers()
        self.wfile.write(b"x" * 50_000)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_s3_answer_cut_short_is_a_retriable_error(seaweedfs: SeaweedS3Process) -> None:
    """A server that drops the connection in the middle of an answer's body: the read into buffers
    reports the store unavailable (retriable), never a short read taken for the object's end."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ShortBodyServer)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    settings = s3_settings(seaweedfs, "cut")
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"

    async def scenario(store: S3ObjectStore) -> None:
        with pytest.raises(ObjectStoreUnavailableError, match="ended after 50000 of 100000"):
            await store.get_range_into("k", 0, [memoryview(bytearray(60_000)), memoryview(bytearray(40_000))])
        with pytest.raises(ObjectStoreUnavailableError):
            await store.get_range("k", 0, 100_000)

    try:
        _run_against(settings, endpoint, scenario, max_attempts=1)
    finally:
        server.shutdown()
        server.server_close()
        serving.join(10)


def test_s3_ranged_reads_sign_afresh_once_refused(seaweedfs: SeaweedS3Process) -> None:
    """The presigned URL kept for an object is refused (403: its signature no longer holds, as after
    a credentials rotation): the read signs a fresh one and succeeds; an object that is not there is
    ObjectNotFoundError, not a refusal."""
    data = os.urandom(100_000)

    async def scenario(store: S3ObjectStore) -> None:
        await store.put("seg.log", data)
        buffer = bytearray(1000)
        assert await store.get_range_into("seg.log", 5000, [memoryview(buffer)]) == 1000
        ranges = store._ranges
        full_key = next(iter(ranges._urls))
        url, renew_at = ranges._urls[full_key]
        forged = re.sub(r"(X-Amz-Signature=)[0-9a-f]{4}", r"\g<1>0000", url)
        assert forged != url
        ranges._urls[full_key] = (forged, renew_at)
        assert await store.get_range_into("seg.log", 7000, [memoryview(buffer)]) == 1000
        assert bytes(buffer) == data[7000:8000]
        assert ranges._urls[full_key][0] != forged
        with pytest.raises(ObjectNotFoundError):
            await store.get_range_into("none.log", 0, [memoryview(buffer)])

    _run_against(s3_settings(seaweedfs, new_bucket(seaweedfs)), seaweedfs.endpoint_url, scenario)
