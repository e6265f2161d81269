"""`BufferRecords`: a ``records`` value held in memory as several buffers, sent as they are.

A remote read (strom.tiered.remote_read) answers whole batches that lie across the cached chunks of a
remote segment. Joining them into one ``bytes`` would copy every byte on the event loop; instead the
answer is the views of the chunks, in order. Like a file region (storage's ``FileRecords``) it is a
`RecordsRegion`: the encoder frames it by its length, and the response writer queues its views as
chunks of their own (each one entry of a ``sendmsg``), so the bytes go from the chunks to the socket.
The views are read-only and the buffers behind them are never written once filled.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.protocol.primitives import RecordsRegion


class BufferRecords(RecordsRegion):
    """Records as ``views`` of buffers, in wire order."""

    __slots__ = ("size", "views")

    def __init__(self, views: Sequence[memoryview]) -> None:
        self.views = tuple(views)
        self.size = sum(len(view) for view in self.views)

    def __len__(self) -> int:
        return self.size

    def tobytes(self) -> bytes:
        """The records as one ``bytes`` (a copy: for callers that need them whole, e.g. tests)."""
        return b"".join(self.views)

    def __repr__(self) -> str:
        return f"BufferRecords(size={self.size}, views={len(self.views)})"


EMPTY_BUFFER_RECORDS = BufferRecords(())
