"""The Worker base: one named thread, stop event, state, backoff on retriable steps."""

from __future__ import annotations

import threading

import pytest

from shoal.worker import Backoff, Deadline, Worker, WorkerState, poll_until


class _Counter(Worker):
    def __init__(self, fail_times: int = 0, retriable: bool = True) -> None:
        super().__init__("test-counter", backoff=Backoff(initial_s=0.001, maximum_s=0.002))
        self.steps = 0
        self.fail_times = fail_times
        self._retriable = retriable
        self.exited = threading.Event()

    def step(self) -> None:
        self.steps += 1
        if self.steps <= self.fail_times:
            raise ValueError(f"failure {self.steps}")
        self.stopping.wait(0.001)

    def retriable(self, exc: BaseException) -> bool:
        return self._retriable

    def on_exit(self) -> None:
        self.exited.set()


def test_worker_runs_on_a_named_thread_and_stops() -> None:
    w = _Counter().start()
    assert w.state is WorkerState.RUNNING
    assert poll_until(lambda: w.steps > 3, 5)
    assert any(t.name == "test-counter" and t.daemon for t in threading.enumerate())
    assert w.stop(5)
    assert w.state is WorkerState.STOPPED and w.stopped.is_set() and w.exited.is_set()


def test_retriable_failures_back_off_then_continue() -> None:
    w = _Counter(fail_times=3).start()
    assert poll_until(lambda: w.steps > 5, 5)
    assert w.stop(5) and w.state is WorkerState.STOPPED and w.error is None


def test_a_non_retriable_failure_ends_the_worker_as_failed() -> None:
    w = _Counter(fail_times=1, retriable=False).start()
    assert w.stopped.wait(5)
    assert w.state is WorkerState.FAILED
    assert isinstance(w.error, ValueError)
    assert w.exited.is_set()


def test_a_worker_starts_once() -> None:
    w = _Counter().start()
    with pytest.raises(RuntimeError):
        w.start()
    w.stop(5)


def test_backoff_grows_to_its_cap_and_resets() -> None:
    b = Backoff(initial_s=1.0, maximum_s=4.0)
    delays = [b.next_delay() for _ in range(6)]
    assert all(0.5 <= d <= 4.0 for d in delays)
    assert delays[-1] >= 2.0
    b.reset()
    assert b.next_delay() <= 1.0


def test_deadline() -> None:
    d = Deadline(0.05)
    assert not d.expired() and d.remaining() > 0
    while d.sleep(0.01):
        pass
    assert d.expired() and d.remaining() == 0
