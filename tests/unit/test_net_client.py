"""BrokerConnection over real loopback connections, on the standard event loop and on uvloop.

A real asyncio server decodes each request with the codec and answers with a Fetch response of a
chosen size, written in pieces of chosen sizes (so the client sees frames split anywhere: inside the
size prefix, at the scratch buffer's end, one byte at a time), or misbehaves (closes mid-answer,
never answers, answers with the wrong correlation id). Both receive modes run: a buffer per large
frame, and the replica fetcher's one reused buffer.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from strom._util.clock import ManualClock, SystemClock
from strom.broker.network.net_client import BrokerConnection
from strom.broker.security.client import ClientSecurity
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_request, encode_response

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}
FETCH_V = 11
_SIZE = struct.Struct(">i")


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, None]], None]:
    def runner(coro: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as r:
            r.run(coro)

    return runner


def fetch_request(offset: int) -> dict[str, Any]:
    return {
        "replica_id": 1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 30,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": 0,
                        "fetch_offset": offset,
                        "log_start_offset": 0,
                        "partition_max_bytes": 1 << 30,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def records_of(offset: int, size: int) -> bytes:
    """Recognisable bytes for the answer to the request at ``offset``."""
    return bytes((offset + i) % 251 for i in range(size))


def answer(correlation_id: int, offset: int, size: int) -> bytes:
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": offset,
                        "last_stable_offset": offset,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": records_of(offset, size),
                    }
                ],
            }
        ],
    }
    return encode_response(ApiKey.FETCH, FETCH_V, correlation_id, body)


Behaviour = Callable[[int, int, asyncio.StreamWriter], Coroutine[Any, Any, bool]]


async def serve(behaviour: Behaviour) -> tuple[asyncio.Server, int]:
    """A server calling ``behaviour(correlation_id, fetch_offset, writer)`` per request; False closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                request = decode_request(await reader.readexactly(size))
                offset = request.body["topics"][0]["partitions"][0]["fetch_offset"]
                if not await behaviour(request.correlation_id, offset, writer):
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def in_pieces(sizes_of: Callable[[int], list[int]]) -> Behaviour:
    """Answer the request at offset ``o`` with ``sizes_of(o)[0]`` bytes of records, written in the
    piece sizes that follow (the last piece repeats until the frame is out)."""

    async def behaviour(correlation_id: int, offset: int, writer: asyncio.StreamWriter) -> bool:
        size, *pieces = sizes_of(offset)
        frame = answer(correlation_id, offset, size)
        pos = 0
        while pos < len(frame):
            step = pieces.pop(0) if len(pieces) > 1 else pieces[0]
            writer.write(frame[pos : pos + step])
            await writer.drain()
            await asyncio.sleep(0.0005)  # let the client receive this piece on its own
            pos += step
        return True

    return behaviour


def check(response: dict[str, Any], offset: int, size: int) -> None:
    (partition,) = response["responses"][0]["partitions"]
    assert partition["high_watermark"] == offset
    assert bytes(partition["records"]) == records_of(offset, size)


@pytest.mark.parametrize("reuse", [False, True])
def test_frames_split_anywhere_and_of_any_size(
    run: Callable[[Coroutine[Any, Any, None]], None], reuse: bool
) -> None:
    # (records size, piece sizes...) per request: inside the size prefix, around the 64 KiB scratch
    # buffer's end, one byte at a time, and large frames after small ones and the reverse.
    plan = [
        (10, 1),
        (200_000, 3, 65_530, 7, 100_000),
        (70_000, 65_530, 1, 1, 1, 1, 1, 1, 4096),
        (5, 2, 1),
        (1_500_000, 1_000_000),
        (300_000, 4096),
        (64 * 1024, 65_536),
        (0, 1),
    ]

    async def scenario() -> None:
        server, port = await serve(in_pieces(lambda offset: list(plan[offset])))
        conn = BrokerConnection(
            "127.0.0.1", port, "test", ClientSecurity(), SystemClock(), reuse_receive_buffer=reuse
        )
        for offset, (size, *_) in enumerate(plan):
            check(await conn.send(ApiKey.FETCH, FETCH_V, fetch_request(offset)), offset, size)
        conn.close()
        server.close()

    run(scenario())


def test_a_kept_response_stays_intact_without_reuse(run: Callable[[Coroutine[Any, Any, None]], None]) -> None:
    async def scenario() -> None:
        server, port = await serve(in_pieces(lambda offset: [100_000 + offset, 65_536]))
        conn = BrokerConnection("127.0.0.1", port, "test", ClientSecurity(), SystemClock())
        kept = [await conn.send(ApiKey.FETCH, FETCH_V, fetch_request(offset)) for offset in range(3)]
        for offset, response in enumerate(kept):
            check(response, offset, 100_000 + offset)
        conn.close()
        server.close()

    run(scenario())


@pytest.mark.parametrize("fault", ["close mid-answer", "wrong correlation id", "no answer"])
def test_a_failed_request_raises_connection_error_and_the_next_one_reconnects(
    run: Callable[[Coroutine[Any, Any, None]], None], fault: str
) -> None:
    async def behaviour(correlation_id: int, offset: int, writer: asyncio.StreamWriter) -> bool:
        if offset == 0:  # the first request on every connection meets the fault
            if fault == "close mid-answer":
                writer.write(answer(correlation_id, offset, 100_000)[:70_000])
                await writer.drain()
                return False
            if fault == "wrong correlation id":
                writer.write(answer(correlation_id + 1, offset, 10))
                return True
            await asyncio.sleep(5)  # longer than the client's timeout
            return False
        writer.write(answer(correlation_id, offset, 100))
        return True

    async def scenario() -> None:
        server, port = await serve(behaviour)
        conn = BrokerConnection(
            "127.0.0.1", port, "test", ClientSecurity(), SystemClock(), reuse_receive_buffer=True
        )
        with pytest.raises(ConnectionError):
            await conn.send(ApiKey.FETCH, FETCH_V, fetch_request(0), timeout_ms=500)
        check(await conn.send(ApiKey.FETCH, FETCH_V, fetch_request(1)), 1, 100)
        conn.close()
        server.close()

    run(scenario())


def test_a_cancelled_request_does_not_hand_its_answer_to_the_next(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    async def behaviour(correlation_id: int, offset: int, writer: asyncio.StreamWriter) -> bool:
        if offset == 0:
            await asyncio.sleep(0.2)  # answered only after the client gave up on it
        writer.write(answer(correlation_id, offset, 1000))
        return True

    async def scenario() -> None:
        server, port = await serve(behaviour)
        conn = BrokerConnection("127.0.0.1", port, "test", ClientSecurity(), SystemClock())
        abandoned = asyncio.ensure_future(conn.send(ApiKey.FETCH, FETCH_V, fetch_request(0)))
        await asyncio.sleep(0.05)
        abandoned.cancel()
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        check(await conn.send(ApiKey.FETCH, FETCH_V, fetch_request(7)), 7, 1000)
        conn.close()
        server.close()

    run(scenario())


def test_nothing_listening_is_a_connection_error(run: Callable[[Coroutine[Any, Any, None]], None]) -> None:
    async def scenario() -> None:
        server, port = await serve(in_pieces(lambda offset: [1, 1]))
        server.close()
        await server.wait_closed()
        conn = BrokerConnection("127.0.0.1", port, "test", ClientSecurity(), SystemClock())
        with pytest.raises(ConnectionError):
            await conn.send(ApiKey.FETCH, FETCH_V, fetch_request(0))

    run(scenario())


def test_a_request_times_out_when_the_broker_clock_says_so(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    """The time limit is a deadline on the connection's clock: on a manual clock an unanswered request
    waits, however long in real time, until the clock passes its limit."""

    async def never_answer(correlation_id: int, offset: int, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return False

    async def scenario() -> None:
        server, port = await serve(never_answer)
        clock = ManualClock()
        conn = BrokerConnection("127.0.0.1", port, "test", ClientSecurity(), clock)
        sent = asyncio.ensure_future(conn.send(ApiKey.FETCH, FETCH_V, fetch_request(0), timeout_ms=1000))
        await asyncio.sleep(0.3)  # real time passes, the clock does not
        assert not sent.done()
        clock.advance(999)
        await asyncio.sleep(0.05)
        assert not sent.done()
        clock.advance(1)
        with pytest.raises(ConnectionError, match="TimeoutError"):
            await asyncio.wait_for(sent, 5)
        assert clock.pending_timers() == 0
        conn.close()
        server.close()

    run(scenario())
