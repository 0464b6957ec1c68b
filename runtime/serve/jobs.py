"""A request's work on the request pool: a concurrency slot, a deadline, and cancellation.

The slot is given back when the worker thread has finished, not when the client stops
waiting: a client that leaves cancels its work (no new round starts; an AR request is
aborted on its server), and the next request gets the slot once that work has really stopped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Awaitable, Callable

from lookahead_reasoning.runtime.serve.schemas import APIError

log = logging.getLogger(__name__)


class Cancellation:
    """A request's cancellation, set at most once. Calling it says whether it is set (the engine
    polls it between rounds); work that cannot poll, such as one long AR request to a server,
    registers `on_cancel(callback)` instead: the callback runs when it is set, on a thread of its
    own (it may block on the network), and never once the work has unregistered it."""

    def __init__(self):
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def __call__(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            threading.Thread(target=_quietly, args=(callback,), name="lookahead-cancel", daemon=True).start()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` when cancelled (at once if already); returns what unregisters it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)

                def unregister() -> None:
                    with self._lock:
                        if callback in self._callbacks:
                            self._callbacks.remove(callback)

                return unregister
        threading.Thread(target=_quietly, args=(callback,), name="lookahead-cancel", daemon=True).start()
        return lambda: None


def _quietly(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # noqa: BLE001 - a failed abort only means the work runs out, as it would have
        log.warning("cancelling a request's work failed", exc_info=True)


Work = Callable[[Cancellation, float], dict]  # (is_cancelled, deadline) -> the answer


class Job:
    def __init__(self, future: Future, cancelled: Cancellation, deadline: float, limit_s: float):
        self.future = asyncio.wrap_future(future)
        # a job whose client left or timed out has nobody to read its error: not worth a warning
        self.future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self.deadline = deadline  # time.monotonic()
        self.limit_s = limit_s
        self._cancelled = cancelled

    def cancel(self) -> None:
        """Ask the work to stop: the engine starts no new round (a request in flight runs out), and an
        AR request is aborted on its server (service.py)."""
        self._cancelled.set()

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    async def result(self, disconnected: Awaitable[None]) -> dict:
        """The answer; APIError 504 at the deadline, 499 when `disconnected` comes first.

        Either way the work is cancelled; the future itself never is, so the slot stays taken
        until the thread ends.
        """
        watch = asyncio.ensure_future(disconnected)
        try:
            done, _ = await asyncio.wait({self.future, watch}, timeout=self.remaining(),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        if self.future in done:
            return self.future.result()
        self.cancel()
        raise client_closed() if watch in done else timed_out(self.limit_s)


class Runner:
    """Runs work on a pool with one thread per slot; callers beyond the slots wait, then get 429.

    A free slot is taken at once, whatever `queue_timeout_s` is; with `queue_timeout_s` 0 a
    caller never waits: a free slot, else 429 at once.
    """

    def __init__(self, slots: int, queue_timeout_s: float, request_timeout_s: float):
        self.queue_timeout_s, self.request_timeout_s = queue_timeout_s, request_timeout_s
        self.slots = asyncio.Semaphore(slots)
        self.pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="lookahead-request")

    async def start(self, work: Work) -> Job:
        if not self.slots.locked():
            await self.slots.acquire()  # a free slot, and nobody waiting before us: taken at once
        elif self.queue_timeout_s <= 0:  # 0 means "do not wait": a free slot at once, else 429
            raise _busy()
        else:
            try:
                await asyncio.wait_for(self.slots.acquire(), timeout=self.queue_timeout_s)
            except asyncio.TimeoutError:
                raise _busy() from None
        loop = asyncio.get_running_loop()
        cancelled = Cancellation()
        deadline = time.monotonic() + self.request_timeout_s
        future = self.pool.submit(work, cancelled, deadline)
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(self.slots.release))
        return Job(future, cancelled, deadline, self.request_timeout_s)

    def close(self) -> None:
        """End the pool's threads with the app. Work still running finishes on its thread (it stops at its
        own deadline or cancellation); waiting for it here would hold up the event loop's shutdown."""
        self.pool.shutdown(wait=False, cancel_futures=True)


def _busy() -> APIError:
    return APIError(429, "too many concurrent requests; try again later", "rate_limit_error")


def timed_out(limit_s: float) -> APIError:
    return APIError(504, f"the request exceeded its time limit of {limit_s:g} s", "timeout_error")


def client_closed() -> APIError:
    """For the metrics only: nobody is left to read it."""
    return APIError(499, "the client closed the request", "client_closed_request")
