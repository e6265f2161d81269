"""`receive_buffer`: an ordinary bytearray of the asked size, whose bytes are not zeroed first."""

from __future__ import annotations

import pytest

from strom._util.buffers import receive_buffer


@pytest.mark.parametrize("size", [0, 1, 4096, 1 << 20])
def test_a_bytearray_of_the_asked_size_that_behaves_as_one(size: int) -> None:
    buf = receive_buffer(size)
    assert type(buf) is bytearray
    assert len(buf) == size
    view = memoryview(buf)
    view[:] = b"\x5a" * size  # the socket fills it through a memoryview, as the broker's protocols do
    assert buf == b"\x5a" * size
    view.release()
    buf += b"tail"  # still resizable once no view is exported
    assert buf[size:] == b"tail"


def test_a_negative_size_is_refused() -> None:
    with pytest.raises(ValueError):
        receive_buffer(-1)
