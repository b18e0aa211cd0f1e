"""One thread, one worker: the base of every background loop in shoal.

A :class:`Worker` owns exactly one named daemon thread, a stop event, a :class:`WorkerState` and
the error that ended it. Subclasses implement :meth:`Worker.run` (the whole body, which must
return soon after ``self.stopping`` is set) or, for the common poll loop, :meth:`Worker.step`
(one iteration; the base loops until stopped and backs off with :class:`Backoff` after a
retriable failure). Nothing else in the code base starts a bare ``threading.Thread`` for a loop.

:class:`Deadline` replaces the hand-written ``deadline = time.monotonic() + t`` loops.
:func:`stop_all` stops many workers in the time of the slowest one, not the sum of theirs.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Self

from shoal.errors import ConfigError

log = logging.getLogger(__name__)


class WorkerState(enum.Enum):
    NEW = "NEW"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    """Asked to stop; the loop has not returned yet."""
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    """The loop raised; ``Worker.error`` holds the exception."""


class Deadline:
    """A point in monotonic time: ``remaining()``, ``expired()``, and ``sleep(s)`` that never overshoots."""

    __slots__ = ("_end", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        if timeout_s != timeout_s:  # NaN: it would never expire, and remaining() would be 0 forever
            raise ConfigError("a timeout must be a number, got nan")
        self.timeout_s = timeout_s
        self._end = time.monotonic() + timeout_s

    def remaining(self) -> float:
        return max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self._end

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        """Sleep ``seconds`` or until the deadline (or ``stop``); True if time remains afterwards."""
        wait = min(seconds, self.remaining())
        if stop is not None:
            stop.wait(wait)
        elif wait > 0:
            time.sleep(wait)
        return not self.expired()


class Backoff:
    """Exponential backoff with full jitter (AWS architecture blog), reset after a success.

    ``jitter=False``: exactly ``initial_s``, then ``factor`` times the last, up to ``maximum_s`` (one
    caller retrying alone, whose pauses are read in its log)."""

    def __init__(self, initial_s: float = 0.1, maximum_s: float = 5.0, factor: float = 2.0, *, jitter: bool = True):
        self.initial_s = initial_s
        self.maximum_s = maximum_s
        self.factor = factor
        self.jitter = jitter
        self.failures = 0

    def peek(self) -> float:
        """The cap of the next delay (its upper bound), without counting a failure."""
        # the exponent is bounded: ``factor ** failures`` overflows a float after ~1024 failures in a
        # row (an outage of about an hour), which would end the retrying worker with OverflowError
        return min(self.maximum_s, self.initial_s * self.factor ** min(self.failures, 64))

    def next_delay(self) -> float:
        cap = self.peek()
        self.failures += 1
        return random.uniform(cap / 2, cap) if self.jitter else cap

    def reset(self) -> None:
        self.failures = 0


class Worker:
    """A background loop on its own named daemon thread.

    Either override :meth:`run` (the whole body) or :meth:`step` (one iteration of a poll loop).
    ``retriable`` decides which exceptions of ``step`` are retried with backoff instead of ending
    the worker as FAILED.
    """

    def __init__(self, name: str, *, backoff: Backoff | None = None) -> None:
        self.name = name
        self.state = WorkerState.NEW
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        """Set when the worker is asked to stop; loops wait on it instead of ``time.sleep``."""
        self.stopped = threading.Event()
        """Set once the thread has returned (STOPPED or FAILED)."""
        self.backoff = backoff or Backoff()
        self._thread: threading.Thread | None = None

    # -- to override -------------------------------------------------------------------------

    def run(self) -> None:
        """The loop body. The default calls :meth:`step` until stopped."""
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception as exc:
                if not self.retriable(exc):
                    raise
                delay = self.backoff.next_delay()
                log.warning("%s: %s (retrying in %.1fs)", self.name, exc, delay)
                self.stopping.wait(delay)
            else:
                self.backoff.reset()

    def step(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must override run() or step()")

    def retriable(self, exc: BaseException) -> bool:
        """Whether a failed :meth:`step` is retried; default: never."""
        return False

    def on_exit(self) -> None:
        """Runs on the worker's thread after :meth:`run` returned or raised (close clients here)."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError(f"worker {self.name} already started")
        self.state = WorkerState.RUNNING
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Ask the loop to end (does not wait)."""
        if self.state in (WorkerState.NEW, WorkerState.RUNNING):
            self.state = WorkerState.STOPPING if self._thread is not None else WorkerState.STOPPED
        self.stopping.set()

    def stop(self, timeout: float = 30.0) -> bool:
        """Ask the loop to end and wait up to ``timeout``; True if the thread has ended."""
        self.request_stop()
        return self.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        thread = self._thread
        if thread is None:
            return True
        if thread is not threading.current_thread():
            thread.join(timeout)
        return not thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _main(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            self.error = exc
            self.state = WorkerState.FAILED
            log.error("%s failed: %s: %s", self.name, type(exc).__name__, exc)
            log.debug("%s traceback", self.name, exc_info=True)
        else:
            self.state = WorkerState.STOPPED
        finally:
            try:
                self.on_exit()
            except Exception:
                log.exception("%s: cleanup failed", self.name)
            self.stopped.set()


def stop_all(workers: Iterable[Worker | None], deadline: Deadline) -> list[Worker]:
    """Ask every worker to stop first, then wait for them together until ``deadline``: their loops end
    and their :meth:`Worker.on_exit` cleanups (closing Kafka clients) run concurrently, so the wait is
    that of the slowest worker. ``None`` entries are skipped. Returns the workers still running at the
    deadline (daemon threads, left behind)."""
    pending = [w for w in workers if w is not None]
    for w in pending:
        w.request_stop()
    return [w for w in pending if not w.join(deadline.remaining())]


def wait_any(events: list[threading.Event] | tuple[threading.Event, ...], timeout: float) -> bool:
    """Wait until one of ``events`` is set or ``timeout`` passes; True if one is set."""
    deadline = Deadline(timeout)
    while not deadline.expired():
        if any(e.is_set() for e in events):
            return True
        events[0].wait(min(0.02, deadline.remaining()))
    return any(e.is_set() for e in events)


def poll_until(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    """Call ``condition`` until it is true or ``timeout_s`` passes; the last answer."""
    deadline = Deadline(timeout_s)
    while True:
        if condition():
            return True
        if not deadline.sleep(interval_s):
            return bool(condition())
