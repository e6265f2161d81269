"""The simulated loop: timers fire at their simulated moment at once, in a fixed order, in one thread."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from strom.sim.loop import START_S, SimulatedLoop, SimulationStalled
from strom.sim.network import CURRENT_HOST


def run(coro_fn):  # type: ignore[no-untyped-def]
    return SimulatedLoop().run(coro_fn())


def test_an_hour_of_sleeping_takes_no_real_time() -> None:
    async def main() -> float:
        await asyncio.sleep(3600)
        return asyncio.get_running_loop().time()

    started = time.monotonic()
    assert run(main) == pytest.approx(START_S + 3600)
    assert time.monotonic() - started < 5


def test_timers_fire_in_deadline_order_ties_in_the_order_they_were_set() -> None:
    async def main() -> list[str]:
        order: list[str] = []
        loop = asyncio.get_running_loop()
        loop.call_later(2.0, order.append, "b")
        for i in range(20):
            loop.call_later(1.0, order.append, f"a{i}")
        await asyncio.sleep(3)
        return order

    first = run(main)
    assert first == [f"a{i}" for i in range(20)] + ["b"]
    assert run(main) == first


def test_timeouts_expire_on_simulated_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(30):
                await loop.create_future()
        return loop.time()

    assert run(main) == pytest.approx(START_S + 30)


def test_to_thread_runs_inline_in_the_loop_thread() -> None:
    async def main() -> tuple[str, str]:
        return threading.current_thread().name, await asyncio.to_thread(
            lambda: threading.current_thread().name
        )

    here, there = run(main)
    assert here == there


def test_a_deadlock_is_named_instead_of_hanging() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(SimulationStalled):
        run(main)


def test_the_same_program_gives_the_same_interleaving_twice() -> None:
    async def worker(name: str, delays: list[float], trace: list[tuple[float, str]]) -> None:
        loop = asyncio.get_running_loop()
        for d in delays:
            await asyncio.sleep(d)
            trace.append((loop.time(), name))

    async def main() -> list[tuple[float, str]]:
        trace: list[tuple[float, str]] = []
        await asyncio.gather(
            worker("x", [0.1, 0.2, 0.3], trace),
            worker("y", [0.3, 0.1, 0.2], trace),
            worker("z", [0.0] * 3, trace),
        )
        return trace

    assert run(main) == run(main)


def test_a_paused_machine_runs_nothing_until_it_continues_and_others_run_on() -> None:
    async def ticker(trace: list[tuple[str, float]], name: str) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(10):
            await asyncio.sleep(1.0)
            trace.append((name, loop.time() - START_S))

    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimulatedLoop)
        trace: list[tuple[str, float]] = []
        stopped = contextvars.copy_context()
        stopped.run(CURRENT_HOST.set, "10.0.0.1")
        paused = loop.create_task(ticker(trace, "paused"), context=stopped)
        running = loop.create_task(ticker(trace, "running"))
        await asyncio.sleep(2.5)
        loop.pause_host("10.0.0.1")
        assert loop.paused() == ["10.0.0.1"]
        await asyncio.sleep(4.0)
        loop.resume_host("10.0.0.1")
        assert loop.paused() == []
        await asyncio.gather(paused, running)
        return trace

    trace = run(main)
    paused = [t for name, t in trace if name == "paused"]
    running = [t for name, t in trace if name == "running"]
    assert running == pytest.approx([float(n) for n in range(1, 11)])
    # Ticks at 1 and 2, nothing from 2.5 to 6.5, then the tick due at 3 runs at once and the rest follow.
    assert paused == pytest.approx([1.0, 2.0, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5])
    assert run(main) == trace
