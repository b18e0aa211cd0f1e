"""The Worker base: one named thread, stop event, state, backoff on retriable steps."""

from __future__ import annotations

import threading

import pytest

from shoal.worker import Backoff, Deadline, Worker, WorkerState, poll_until, stop_all


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


class _Closing(Worker):
    """A worker whose cleanup waits for ``barrier``: it only passes if every other one cleans up too."""

    def __init__(self, name: str, barrier: threading.Barrier) -> None:
        super().__init__(name)
        self.barrier = barrier
        self.passed = False

    def run(self) -> None:
        self.stopping.wait()

    def on_exit(self) -> None:
        self.barrier.wait(10)  # BrokenBarrierError unless every worker reaches its cleanup
        self.passed = True


def test_stop_all_asks_every_worker_before_waiting_for_any() -> None:
    barrier = threading.Barrier(5)
    workers = [_Closing(f"closing-{i}", barrier).start() for i in range(5)]
    assert stop_all([*workers, None], Deadline(30)) == []
    assert all(w.passed and w.state is WorkerState.STOPPED for w in workers)


def test_stop_all_returns_the_workers_still_running_at_the_deadline() -> None:
    release = threading.Event()

    class _Stuck(Worker):
        def run(self) -> None:
            release.wait(30)

    stuck, quick = _Stuck("stuck").start(), _Counter().start()
    try:
        left = stop_all([quick, stuck], Deadline(0.2))
        assert stuck in left and stuck.alive and stuck.stopping.is_set()
        assert quick.join(5) and quick.state is WorkerState.STOPPED
    finally:
        release.set()
        assert stuck.join(5)


def test_backoff_survives_an_outage_of_any_length() -> None:
    """``factor ** failures`` overflowed a float after ~1024 failures in a row (about an hour with
    the default backoff), ending a retrying worker with OverflowError."""
    for jitter in (True, False):
        backoff = Backoff(jitter=jitter)
        backoff.failures = 5000
        assert 0 < backoff.next_delay() <= backoff.maximum_s
        assert backoff.peek() == backoff.maximum_s
