"""`receive_buffer(size)`: a bytearray of ``size`` bytes that are not zeroed first.

A request or response frame larger than the connection's shared buffer gets a buffer of its own, and
the socket then fills every byte of it before anything reads it. ``bytearray(size)`` would first
zero the whole buffer: for a produce request of about 1 MB that ``memset`` cost about as much broker
CPU as checking every batch's CRC (measured with ``perf`` under librdkafka's producer). CPython's C API
hands out a bytearray whose contents are left as the allocator returned them
(``PyByteArray_FromStringAndSize`` with a NULL source); it is reached through ``ctypes`` once, at
import. Where that API is not there (another interpreter), plain ``bytearray(size)`` is used.

Below 16 KiB, zeroing costs less than the ``ctypes`` call (about 0.7 us, against 0.2 us for a
``bytearray(100)`` and 1.3 us for 16 KiB, measured on this project's machine): small frames, most of
a replication round's, get a plain ``bytearray``.

The caller must overwrite every byte before the buffer is read: whatever the allocator returned (bytes
of an earlier frame of this process) is in it until then. Frames that end early are dropped unread.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

_ZEROING_IS_CHEAPER = 16 * 1024  # bytes (module docstring)


def _uninitialized_factory() -> Callable[[int], bytearray]:
    try:
        api = ctypes.pythonapi
        prototype = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_char_p, ctypes.c_ssize_t)
        new = prototype(("PyByteArray_FromStringAndSize", api))
    except (AttributeError, OSError):
        return bytearray

    def receive_buffer(size: int) -> bytearray:
        if size <= _ZEROING_IS_CHEAPER:
            return bytearray(size)  # (raises ValueError for a negative size, as below)
        buf: bytearray = new(None, size)
        return buf

    return receive_buffer


receive_buffer: Callable[[int], bytearray] = _uninitialized_factory()
