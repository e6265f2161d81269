"""The produce path's floor: the CPU a minimal receiver spends on the bytes of a 100 B produce load.

Run by hand; never part of the test suite. Beside `c_bench.py`, it answers "how much of the broker's
CPU per million 100 B messages would any broker on this machine pay?". A sender process streams
size-prefixed frames of ``--frame-bytes`` (librdkafka's produce requests under `c_bench.py` are about
0.86 MB, one partition each) over loopback TCP, at most 5 unanswered, as many frames as carry
``--messages`` records of ``--record-bytes`` on the wire (a 100 B value with its v2 record framing is
about 110 bytes). The receiver does only what a durable broker cannot skip, with no event loop and
no request decoding: blocking ``recv_into`` of each frame into one reused buffer, a CRC32C over it
(the batch check), a ``pwrite`` appending it to one of 6 files (partitions, in the page cache as with
the default flush policy), optionally reserving the blocks first as the broker does
(`strom._util.preallocate`), and an 8-byte answer. Modes: ``read`` (receive and answer only),
``crc`` (plus the CRC), ``write`` (plus the ``pwrite``: the floor).

Printed per mode and round: the receiver's user and system CPU seconds (``getrusage``) per million
messages, the figure `c_bench.py` reports for the broker. Rounds alternate the modes, like c_bench.

    .venv/bin/python bench/produce_floor.py [--rounds 3] [--modes read,crc,write] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import statistics
import struct
import tempfile

import crc32c

from strom._util.preallocate import preallocate

_SIZE = struct.Struct(">i")
_PARTITIONS = 6
_IN_FLIGHT = 5


def _send(port: int, frames: int, frame_bytes: int) -> None:
    """The sender (child process): ``frames`` frames, at most _IN_FLIGHT unanswered."""
    sock = socket.create_connection(("127.0.0.1", port))
    frame = _SIZE.pack(frame_bytes) + os.urandom(frame_bytes)
    answers = bytearray(8)
    waiting = 0
    for _ in range(frames):
        sock.sendall(frame)
        waiting += 1
        if waiting == _IN_FLIGHT:
            _recv_exactly(sock, memoryview(answers))
            waiting -= 1
    for _ in range(waiting):
        _recv_exactly(sock, memoryview(answers))
    sock.close()


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("peer closed")
        got += n


def run(mode: str, frames: int, frame_bytes: int, workdir: str, reserve: bool) -> tuple[float, float]:
    """One round: the receiver's (user, system) CPU seconds for ``frames`` frames."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    child = os.fork()
    if child == 0:  # the sender
        try:
            _send(port, frames, frame_bytes)
        finally:
            os._exit(0)
    conn, _ = listener.accept()
    listener.close()
    data_dir = tempfile.mkdtemp(prefix="strom-floor-", dir=workdir)
    fds = [os.open(f"{data_dir}/{p}.log", os.O_RDWR | os.O_CREAT, 0o644) for p in range(_PARTITIONS)]
    sizes = [0] * _PARTITIONS
    buf = memoryview(bytearray(frame_bytes))
    prefix = memoryview(bytearray(4))
    answer = bytes(8)
    before = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(frames):
        _recv_exactly(conn, prefix)
        _recv_exactly(conn, buf)
        if mode != "read":
            crc32c.crc32c(buf)
        if mode == "write":
            p = i % _PARTITIONS
            if reserve:
                preallocate(fds[p], sizes[p], frame_bytes)
            os.pwrite(fds[p], buf, sizes[p])
            sizes[p] += frame_bytes
        conn.sendall(answer)
    after = resource.getrusage(resource.RUSAGE_SELF)
    conn.close()
    os.waitpid(child, 0)
    for fd in fds:
        os.close(fd)
    shutil.rmtree(data_dir)
    return after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="read,crc,write")
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--record-bytes", type=int, default=110, help="wire bytes of one 100 B record")
    parser.add_argument("--frame-bytes", type=int, default=860_000)
    parser.add_argument("--no-reserve", action="store_true", help="no fallocate before each pwrite")
    parser.add_argument("--dir", default=None, help="where the files go (default: the temp directory)")
    args = parser.parse_args()
    frames = -(-args.messages * args.record_bytes // args.frame_bytes)
    workdir = args.dir or tempfile.gettempdir()
    modes = args.modes.split(",")
    million = args.messages / 1e6
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    print(f"{frames} frames of {args.frame_bytes} B = {args.messages:,} messages of {args.record_bytes} B")
    for rnd in range(args.rounds):
        for mode in modes if rnd % 2 == 0 else modes[::-1]:
            user, system = run(mode, frames, args.frame_bytes, workdir, not args.no_reserve)
            results[mode].append((user, system))
            print(
                f"round {rnd} {mode:5s}: CPU s per M msgs {(user + system) / million:.4f} "
                f"({user / million:.4f} + {system / million:.4f}), load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print("\n| mode | receiver CPU s / M msgs (user + sys), median | per round |")
    print("|---|---|---|")
    for mode, rows in results.items():
        total = statistics.median(u + s for u, s in rows) / million
        user = statistics.median(u for u, _ in rows) / million
        system = statistics.median(s for _, s in rows) / million
        rounds = " ".join(f"{(u + s) / million:.3f}" for u, s in rows)
        print(f"| {mode} | {total:.3f} ({user:.3f} + {system:.3f}) | {rounds} |")


if __name__ == "__main__":
    main()
