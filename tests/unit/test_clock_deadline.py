"""`Deadline` and `sleep_ms` (strom._util.clock): time limits and waits on the clock's time line, not
the event loop's."""

from __future__ import annotations

import asyncio

import pytest

from strom._util.clock import Deadline, ManualClock, SystemClock, sleep_ms, yield_to_loop


async def _never() -> None:
    await asyncio.get_running_loop().create_future()


def test_a_deadline_expires_only_when_the_manual_clock_passes_it() -> None:
    async def scenario() -> None:
        clock = ManualClock()

        async def limited() -> None:
            async with Deadline(clock, 100):
                await _never()

        task = asyncio.ensure_future(limited())
        await asyncio.sleep(0.05)  # real time: nothing happens
        clock.advance(99)
        await yield_to_loop()
        assert not task.done()
        clock.advance(1)
        with pytest.raises(TimeoutError):
            await task
        assert clock.pending_timers() == 0

    asyncio.run(scenario())


def test_a_block_that_ends_first_cancels_its_timer() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with Deadline(clock, 100) as deadline:
            await yield_to_loop()
        assert clock.pending_timers() == 0 and not deadline.expired()
        clock.advance(1000)  # nothing is left to fire late into the task
        await yield_to_loop()

    asyncio.run(scenario())


def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    async def scenario() -> None:
        clock = ManualClock()

        async def limited() -> None:
            async with Deadline(clock, 100):
                await _never()

        task = asyncio.ensure_future(limited())
        await yield_to_loop()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert clock.pending_timers() == 0

    asyncio.run(scenario())


def test_on_the_system_clock_a_deadline_is_real_time() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            async with Deadline(SystemClock(), 50):
                await _never()
        assert 0.04 <= loop.time() - started < 5

    asyncio.run(scenario())


def test_sleep_ms_wakes_when_the_manual_clock_reaches_it() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        sleeper = asyncio.ensure_future(sleep_ms(clock, 500))
        await yield_to_loop()
        clock.advance(499)
        await yield_to_loop()
        assert not sleeper.done()
        clock.advance(1)
        await asyncio.wait_for(sleeper, 5)

    asyncio.run(scenario())
