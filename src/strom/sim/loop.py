"""An asyncio event loop on simulated time: time moves only when every task is waiting.

The loop is asyncio's own selector loop with its clock and its step swapped. `time()` reads a
simulated clock, and the loop never sleeps: its step (`_run_once`) runs the ready callbacks, and when
none is ready it moves the simulated clock to its next timer instead of waiting for it. Every
`call_later`, `asyncio.sleep`, `asyncio.timeout` and `wait_for` therefore fires at its exact simulated
moment and at once in real time, so two minutes of a cluster's life take as long as the work in them.

Timers. The loop keeps its own heap of ``(deadline, sequence, handle)`` tuples, which the heap compares
in C (asyncio's heap of handles compares them by a Python ``__lt__``, the loop's largest own cost in a
simulation, where every request sets a deadline and cancels it). Cancelled timers leave the heap
when they reach its top, or all at once when they are more than half of it, as asyncio does.

Determinism. One thread runs everything: the default executor runs each job inline (`to_thread`
returns after the job ran, in the same thread), so no worker thread races the loop. Ready callbacks
run in FIFO order and timers in deadline order, equal deadlines in the order they were set, so the
same program with the same inputs makes the same calls in the same order. What remains is the
program's own randomness, which a simulation draws from one seeded `random.Random`.

Network. With a `SimNetwork` attached, the loop's own `create_connection` and `create_server` (which
asyncio's streams and every Strom component call) go to the simulated network instead of sockets, so the
production code opens its connections unchanged; a connection comes from the simulated machine whose
code opens it (`strom.sim.network.CURRENT_HOST`), and the loop remembers which machine created each
task, so a simulated crash can end exactly that machine's tasks.

Pauses. `pause_host` stops a machine's code as SIGSTOP stops a process: its ready callbacks and timers
leave the loop, and every callback it would be handed while paused (a task's next step, a future's
done-callback, a timer it sets) is held, in order, until `resume_host` hands them all back (timers
that came due meanwhile run at once). What other machines send it still arrives and waits in its
protocols' buffers, as in a stopped process's socket buffers. The loop learns a callback's machine
from the context it runs in (`strom.sim.network.CURRENT_HOST`). While nothing is paused the loop's
`call_soon` and `call_at` are asyncio's own: the holding versions are bound only for the pause.

The real selector is polled (without waiting) only for the loop's self-pipe, and only after
`call_soon_threadsafe` wrote to it: simulated programs open no real sockets. A loop whose tasks all
wait on something that can never happen (no timer, nothing ready) would sleep forever on a real loop:
here it raises `SimulationStalled`, which names the deadlock instead of hanging.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import heapq
import itertools
import selectors
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, TypeVarTuple
from weakref import WeakKeyDictionary

from strom.sim.network import CURRENT_HOST

if TYPE_CHECKING:
    from strom.sim.network import SimNetwork

__all__ = ["InlineExecutor", "SimulatedLoop", "SimulationStalled"]

_P = ParamSpec("_P")
_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

#: Where simulated time starts: an arbitrary, fixed moment, so traces of one seed compare equal.
START_S = 1_000.0


class SimulationStalled(RuntimeError):
    """Every task waits and no timer is pending: the simulated program can never make progress."""


class InlineExecutor(ThreadPoolExecutor):
    """Runs each submitted job at once in the caller's thread: worker threads would break determinism.

    A `ThreadPoolExecutor` only by type (asyncio accepts nothing else as the default executor); it
    never starts a thread.
    """

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        future: Future[_T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # the job's failure is the future's result, as a pool's would be
            future.set_exception(exc)
        return future


class SimulatedLoop(asyncio.SelectorEventLoop):
    # asyncio's own ready queue and count of cancelled timers (BaseEventLoop's).
    _ready: collections.deque[asyncio.Handle]
    _timer_cancelled_count: int

    def __init__(self, start_s: float = START_S) -> None:
        self._now = self.start_s = start_s
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []  # the heap (module docstring)
        self._timer_seq = itertools.count()
        self._self_pipe_written = False
        super().__init__(selectors.DefaultSelector())
        self.set_default_executor(InlineExecutor())
        self.network: SimNetwork | None = None
        self._tasks_by_host: dict[str, WeakKeyDictionary[asyncio.Task[Any], int]] = {}
        self._task_seq = itertools.count()
        self.set_task_factory(self._make_task)
        self._paused: dict[str, list[asyncio.Handle]] = {}  # host -> its callbacks held, in order

    def _make_task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        context = kwargs.get("context")
        host = context.get(CURRENT_HOST) if context is not None else CURRENT_HOST.get()
        self._tasks_by_host.setdefault(host, WeakKeyDictionary())[task] = next(self._task_seq)
        return task

    def tasks_of(self, host: str) -> list[asyncio.Task[Any]]:
        """The unfinished tasks created by ``host``'s code, in creation order (task names come from a
        process-wide counter, so they differ between two runs of one seed in one process)."""
        tasks = self._tasks_by_host.get(host, WeakKeyDictionary())
        return sorted((t for t in tasks if not t.done()), key=lambda t: tasks[t])

    async def create_connection(
        self,
        protocol_factory: Callable[[], Any],
        host: str | None = None,
        port: int | None = None,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, Any]:
        if self.network is None or host is None or port is None:
            raise RuntimeError("a simulated loop opens connections only on its simulated network")
        if kwargs.get("ssl") is not None:
            raise ValueError("the simulated network carries PLAINTEXT only")
        return await self.network.connect(CURRENT_HOST.get(), protocol_factory, host, port)

    async def create_server(
        self, protocol_factory: Callable[[], Any], host: Any = None, port: int | None = None, **kwargs: Any
    ) -> Any:
        if self.network is None or not isinstance(host, str):
            raise RuntimeError("a simulated loop listens only on its simulated network")
        if kwargs.get("ssl") is not None:
            raise ValueError("the simulated network carries PLAINTEXT only")
        return await self.network.listen(host, port or 0, protocol_factory)

    def time(self) -> float:
        return self._now

    # the step and the timers -----------------------------------------------------------------------------
    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        timer = asyncio.TimerHandle(when, callback, args, self, context)
        heapq.heappush(self._timers, (when, next(self._timer_seq), timer))
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def _write_to_self(self) -> None:
        self._self_pipe_written = True
        super()._write_to_self()  # type: ignore[misc]

    def _run_once(self) -> None:
        ready, timers = self._ready, self._timers
        if len(timers) > 100 and 2 * self._timer_cancelled_count > len(timers):
            for _, _, timer in timers:
                if timer.cancelled():
                    timer._scheduled = False  # type: ignore[attr-defined]
            timers[:] = [t for t in timers if not t[2].cancelled()]
            heapq.heapify(timers)
            self._timer_cancelled_count = 0
        if self._self_pipe_written:
            self._self_pipe_written = False
            self._process_events(self._selector.select(0))  # type: ignore[attr-defined]
        if not ready and not self._stopping:  # type: ignore[attr-defined]
            while timers and timers[0][2].cancelled():
                heapq.heappop(timers)[2]._scheduled = False  # type: ignore[attr-defined]
                self._timer_cancelled_count -= 1
            if not timers:
                raise SimulationStalled("every task is waiting and no timer is pending")
            self.advance_to(timers[0][0])  # instead of sleeping until it
        now = self._now
        while timers and timers[0][0] <= now:
            timer = heapq.heappop(timers)[2]
            timer._scheduled = False  # type: ignore[attr-defined]
            if timer.cancelled():
                self._timer_cancelled_count -= 1
            else:
                ready.append(timer)
        for _ in range(len(ready)):
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()

    def close(self) -> None:
        self._timers.clear()
        super().close()

    # pauses ------------------------------------------------------------------------------------------
    def pause_host(self, host: str) -> None:
        """Stop running ``host``'s code until `resume_host` (module docstring)."""
        if host in self._paused:
            return
        held: list[asyncio.Handle] = []
        self._paused[host] = held
        # (Cancelled timers stay: the loop's count of them must stay true.)
        timers = [t for t in self._timers if not t[2].cancelled() and _host(t[2]) == host]
        if timers:
            self._timers[:] = [t for t in self._timers if t[2].cancelled() or _host(t[2]) != host]
            heapq.heapify(self._timers)
            for _, _, timer in sorted(timers):
                timer._scheduled = False  # type: ignore[attr-defined]
                held.append(timer)
        # Ready callbacks are held as copies and the originals cancelled in place: the loop may be
        # part-way through its ready queue, counting on its length.
        for handle in self._ready:
            if not handle.cancelled() and _host(handle) == host:
                held.append(asyncio.Handle(handle._callback, handle._args, self, handle._context))  # type: ignore[attr-defined]
                handle.cancel()
        # Bound on the instance for the pause only: asyncio's own methods run otherwise.
        self.call_soon = self._held_call_soon  # type: ignore[method-assign,assignment]
        self.call_at = self._held_call_at  # type: ignore[method-assign,assignment]

    def resume_host(self, host: str) -> None:
        held = self._paused.pop(host, None)
        if held is None:
            return
        if not self._paused:
            del self.call_soon, self.call_at
        for handle in held:
            if handle.cancelled():
                continue
            if isinstance(handle, asyncio.TimerHandle):
                heapq.heappush(self._timers, (handle.when(), next(self._timer_seq), handle))
                handle._scheduled = True  # type: ignore[attr-defined]
            else:
                self._ready.append(handle)

    def paused(self) -> list[str]:
        return sorted(self._paused)

    def _held_call_soon(
        self, callback: Callable[..., object], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        held = self._paused.get(_current(context))
        if held is None:
            return super().call_soon(callback, *args, context=context)
        handle = asyncio.Handle(callback, args, self, context)
        held.append(handle)
        return handle

    def _held_call_at(
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        held = self._paused.get(_current(context))
        if held is None:
            return SimulatedLoop.call_at(self, when, callback, *args, context=context)
        timer = asyncio.TimerHandle(when, callback, args, self, context)
        held.append(timer)
        return timer

    def run(self, main: Coroutine[Any, Any, _T]) -> _T:
        """Run ``main`` to its end, then cancel what it left running and close the loop (as `asyncio.run`)."""
        try:
            return self.run_until_complete(main)
        finally:
            leftovers = [t for t in asyncio.all_tasks(self) if not t.done()]
            for task in leftovers:
                task.cancel()
            if leftovers:
                self.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            self.run_until_complete(self.shutdown_asyncgens())
            self.close()

    def advance_to(self, when: float) -> None:
        # Never backwards: a timer's remaining time is computed from `time()` and may round below zero.
        self._now = max(self._now, when)


def _host(handle: asyncio.Handle) -> str:
    return handle._context.get(CURRENT_HOST, "client")  # type: ignore[attr-defined,no-any-return]


def _current(context: contextvars.Context | None) -> str:
    return CURRENT_HOST.get() if context is None else context.get(CURRENT_HOST, "client")
