"""`ResponseWriter`: one connection's outgoing responses, in order, stored batches sent by ``sendfile``.

Theory of operation. A response arrives as chunks (``codec.encode_response_chunks``): encoded bytes, and
`FileRecords` naming stored batches by file ranges. On a plain TCP connection the writer owns the
sending side of the socket through a duplicate descriptor of its own: it writes each run of bytes chunks
with one ``sendmsg`` and each file slice with ``os.sendfile``, so record bytes go from the page cache to
the socket without passing through Python. When the socket buffer is full (EAGAIN, or a partial send) it
remembers where it stopped, waits for writability with ``loop.add_writer`` on its descriptor, and
carries on. The asyncio transport keeps reading the connection but is never asked to write, so its own
buffer stays empty and the two never interleave. Everything leaves in the order given. Sending waits for
the end of the current event-loop turn, so that the responses to pipelined requests handled in one turn
go out together. (uvloop implements neither ``loop.sendfile`` nor ``add_writer`` on a transport's
descriptor; a duplicate descriptor is an independent registration, which both event loops accept.)

Small records (under ``_COPY_BELOW``) are the exception: a ``pread`` and one ``sendmsg`` together
with the response's other bytes cost less than a ``sendfile`` of their own. Records held in memory
(`BufferRecords`, a remote read's cached chunks) are queued as their views, each a ``sendmsg`` entry.

Where the socket is not the writer's to use (TLS, or a transport that exposes none), the queue is
handed to ``transport.write`` at the end of the event-loop turn too, in pieces of at most ``_PIECE``
bytes: each piece is one fresh buffer filled by ``preadv`` straight from the segment files (the one
copy) and by the responses' own bytes, so the TLS layer cuts full 16 KB records out of one write, and
the acknowledgements of pipelined produces leave as one record and one send instead of one per chunk.
Pieces are handed over only while the transport has not called ``pause_writing``: reading and
encrypting run at most the transport's high-water mark ahead of the socket, so a fetch response of
many megabytes is never held in memory as plaintext, ciphertext and the bytes between them all at once
(handing it over whole did exactly that), and each piece is still in the CPU's caches when the TLS
layer encrypts it.

A slice whose file was truncated after the read (a follower cutting its log on a leader change) makes
``sendfile`` stop short. The response frame can then no longer be completed, so the writer reports a
fatal error and the connection is aborted; the client reconnects and fetches again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque
from collections.abc import Callable

from strom._util.buffers import receive_buffer
from strom.protocol.buffer_records import BufferRecords
from strom.protocol.codec import Chunk, RecordsRegion
from strom.storage.file_records import FileRecords, FileSlice, TruncatedFileError

log = logging.getLogger(__name__)

# Byte chunks gathered into one sendmsg (well below the kernel's IOV_MAX of 1024).
_MAX_IOV = 64
_MSG_MORE = getattr(socket, "MSG_MORE", 0)
# Records smaller than this are read (one pread) and sent with the bytes around them: a sendfile of
# its own costs more than the copy, and it would split a small response into several sends.
_COPY_BELOW = 16 * 1024
# The largest write handed to a transport that does the sending (TLS): big enough for few Python-level
# hops (16 full TLS records), small enough to stay in the CPU's caches. See the module docstring.
_PIECE = 256 * 1024

_Pending = bytes | bytearray | memoryview | FileSlice


class ResponseWriter:
    """Sends one connection's response chunks in order; see the module docstring.

    ``on_fatal(exc)`` is called once if the connection can no longer be written (the peer went away, or
    a file slice was truncated); ``on_drained()`` each time everything queued has gone to the kernel.
    """

    def __init__(
        self,
        transport: asyncio.Transport,
        on_fatal: Callable[[BaseException], None],
        on_drained: Callable[[], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport = transport
        self._on_fatal = on_fatal
        self._on_drained = on_drained
        self._queue: deque[_Pending] = deque()
        self._queued_bytes = 0
        self._waiting = False  # add_writer is registered
        self._paused = False  # the transport called pause_writing (transport path only)
        self._send_scheduled = False
        self._closed = False
        self._sock: socket.socket | None = None
        raw = transport.get_extra_info("socket")
        if raw is not None and transport.get_extra_info("sslcontext") is None and hasattr(os, "sendfile"):
            self._sock = socket.socket(fileno=os.dup(raw.fileno()))
            self._sock.setblocking(False)

    @property
    def zero_copy(self) -> bool:
        """Whether file slices go out by ``sendfile`` (False: one ``pread`` copy through the transport)."""
        return self._sock is not None

    @property
    def buffered(self) -> int:
        """Bytes accepted but not yet handed to the kernel (or to the transport, which flushes what it
        holds before it closes)."""
        return self._queued_bytes

    def write(self, chunks: list[Chunk]) -> None:
        """Queue one response's chunks after everything before them, and send what the socket takes."""
        if self._closed:
            return
        queue = self._queue
        copy_below = _COPY_BELOW if self._sock is not None else 0  # pieces read small records anyway
        for chunk in chunks:
            if isinstance(chunk, RecordsRegion):
                size = len(chunk)
                if size == 0:
                    continue  # the queue never holds an empty chunk: a send of nothing makes no progress
                if isinstance(chunk, BufferRecords):  # in memory (a remote read's): its views as they are
                    queue.extend(view for view in chunk.views if len(view))
                elif size <= copy_below:
                    try:
                        queue.append(_file_records(chunk).read_bytes())
                    except TruncatedFileError as exc:
                        self._fail(exc)
                        return
                else:
                    for piece in _file_records(chunk).slices:
                        if piece.size:
                            queue.append(piece)
                self._queued_bytes += size
            elif len(chunk):
                queue.append(chunk)
                self._queued_bytes += len(chunk)
        if not self._waiting and not self._send_scheduled:
            # Send at the end of this event-loop turn: responses to requests that arrived together
            # leave in one sendmsg, and so wake the client once (on a VM, each wake-up is dear).
            self._send_scheduled = True
            self._loop.call_soon(self._scheduled_send)

    def _scheduled_send(self) -> None:
        self._send_scheduled = False
        if self._closed or self._waiting:
            return
        if self._sock is None:
            self._send_pieces()
        else:
            self._send()

    # -- through the transport (TLS) ---------------------------------------------------------------
    def pause_writing(self) -> None:
        """The transport's buffer is above its high-water mark: stop handing it pieces."""
        self._paused = True

    def resume_writing(self) -> None:
        """The transport's buffer went below its low-water mark: carry on."""
        self._paused = False
        if not self._closed and not self._send_scheduled and self._sock is None:
            self._send_pieces()

    def _send_pieces(self) -> None:
        """Hand the queue to the transport a piece at a time until it is empty or the transport pauses."""
        try:
            while self._queue and not self._paused:
                self._transport.write(self._next_piece())
        except OSError as exc:  # a truncated file
            self._fail(exc)
            return
        if not self._queue and not self._closed:
            self._on_drained()

    def _next_piece(self) -> bytearray:
        """The next ``_PIECE`` bytes (or fewer, at the end) of the queue in one buffer; drops them from it."""
        queue = self._queue
        size = min(self._queued_bytes, _PIECE)
        piece = receive_buffer(size)  # every byte is written below before the transport sees it
        view = memoryview(piece)
        filled = 0
        while filled < size:
            head = queue[0]
            if isinstance(head, FileSlice):
                take = min(head.size, size - filled)
                got = os.preadv(head.file.fd, [view[filled : filled + take]], head.position)
                if got != take:
                    raise TruncatedFileError(f"read {got} of {take} bytes at {head.position}: truncated")
                if take < head.size:
                    queue[0] = FileSlice(head.file, head.position + take, head.size - take)
                else:
                    queue.popleft()
            else:
                data = memoryview(head)
                take = min(len(data), size - filled)
                view[filled : filled + take] = data[:take]
                if take < len(data):
                    queue[0] = data[take:]
                else:
                    queue.popleft()
            filled += take
        self._queued_bytes -= size
        return piece

    # -- by the writer's own descriptor (plain TCP) ------------------------------------------------
    def _send(self) -> None:
        """Send from the head of the queue until it is empty or the socket is full."""
        sock = self._sock
        assert sock is not None
        queue = self._queue
        try:
            while queue:
                head = queue[0]
                if type(head) is FileSlice:
                    sent = os.sendfile(sock.fileno(), head.file.fd, head.position, head.size)
                    if sent == 0:
                        raise TruncatedFileError(f"file ended before its slice ({head.size} bytes left)")
                    if sent < head.size:
                        queue[0] = FileSlice(head.file, head.position + sent, head.size - sent)
                    else:
                        queue.popleft()
                else:
                    sent = self._send_bytes(sock, queue)
                self._queued_bytes -= sent
        except (BlockingIOError, InterruptedError):
            if not self._waiting:
                self._loop.add_writer(sock.fileno(), self._on_writable)
                self._waiting = True
            return
        except OSError as exc:  # the peer went away, or a truncated file
            self._fail(exc)
            return
        if self._waiting:
            self._loop.remove_writer(sock.fileno())
            self._waiting = False
        self._on_drained()

    @staticmethod
    def _send_bytes(sock: socket.socket, queue: deque[_Pending]) -> int:
        """One sendmsg of the run of byte chunks at the head of the queue; drops what went out."""
        run: list[bytes | bytearray | memoryview] = []
        more = False
        for item in queue:
            if type(item) is FileSlice:
                more = True  # a file slice follows at once: let the kernel fill whole segments
                break
            run.append(item)  # type: ignore[arg-type]  # not a FileSlice, checked above
            if len(run) == _MAX_IOV:
                more = True
                break
        sent = sock.sendmsg(run, (), _MSG_MORE if more else 0)
        left = sent
        while left:
            size = len(queue[0])  # a byte chunk, as sent above
            if left >= size:
                queue.popleft()
                left -= size
            else:
                queue[0] = memoryview(queue[0])[left:]  # type: ignore[arg-type]  # as above
                left = 0
        return sent

    def _on_writable(self) -> None:
        if not self._closed:
            self._send()

    def _fail(self, exc: BaseException) -> None:
        if self._closed:
            return
        if isinstance(exc, TruncatedFileError):
            log.warning("closing a connection: a queued fetch response's segment was truncated (%s)", exc)
        self.close()
        self._on_fatal(exc)

    def close(self) -> None:
        """Stop writing; queued chunks are dropped (and their files released)."""
        if self._closed:
            return
        self._closed = True
        self._queue.clear()
        self._queued_bytes = 0
        if self._sock is not None:
            if self._waiting:
                self._loop.remove_writer(self._sock.fileno())
                self._waiting = False
            self._sock.close()


def _file_records(region: RecordsRegion) -> FileRecords:
    if not isinstance(region, FileRecords):
        raise TypeError(f"cannot send {type(region).__name__}: only FileRecords regions are known")
    return region
