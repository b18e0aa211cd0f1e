"""A transactional channel: one ``transactional.id``, transactions as a context manager.

The write path of a channel (DESIGN.md sections 3 and 4): ``open()`` runs ``init_transactions``
(which fences any older incarnation of the id), ``with channel.transaction() as txn:`` begins a
transaction, ``txn.produce`` / ``txn.send_offsets`` add to it, a normal exit commits and an
exception aborts and re-raises the error classified (:func:`shoal.kafka.errors.classify`).

Every blocking transactional call is bounded twice: librdkafka gets the timeout, and the call
runs on the channel's one long-lived helper thread so that a call that ignores its timeout
(``send_offsets_to_transaction`` after a broker restart, confluentinc/librdkafka#5456) raises
:class:`WedgedCallError` instead of blocking its caller forever. A fenced, fatal or wedged channel
is unusable until the owner calls ``open()`` again (a new producer, which fences the old one).
"""

from __future__ import annotations

import enum
import logging
import queue
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from confluent_kafka import KafkaException, Producer, TopicPartition

from shoal.errors import KafkaOperationError
from shoal.kafka import clients
from shoal.kafka.errors import ProducerFencedError, WedgedCallError, classify
from shoal.kafka.settings import KafkaSettings
from shoal.worker import Worker, WorkerState

log = logging.getLogger(__name__)

T = TypeVar("T")

GUARD_GRACE_S = 5.0
"""How much longer than librdkafka's own timeout the guard waits: a call that honours its timeout
always returns its own error first."""


class BoundedCaller(Worker):
    """One long-lived helper thread that runs calls one at a time, each with a bound.

    A call still running after its bound raises :class:`WedgedCallError`; the thread stays
    blocked in it (a daemon thread, it does not hold the interpreter at exit) and the caller must
    not be used again.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._calls: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue()
        self.wedged = False

    def run(self) -> None:
        while not self.stopping.is_set():
            item = self._calls.get()
            if item is None:
                return
            call, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:
                future.set_exception(exc)

    def request_stop(self) -> None:
        super().request_stop()
        self._calls.put(None)

    def call(self, what: str, call: Callable[[], T], timeout_s: float) -> T:
        """``call()`` on the helper thread; its result or exception; WedgedCallError after ``timeout_s``."""
        if self.wedged:
            raise WedgedCallError(f"{what}: {self.name} is wedged in an earlier call")
        if not self.alive:
            if self.state is not WorkerState.NEW:
                raise KafkaOperationError(f"{what}: {self.name} is stopped")
            self.start()
        future: Future[T] = Future()
        self._calls.put((call, future))
        try:
            return future.result(timeout_s)
        except TimeoutError:
            if future.done():
                raise  # the call itself raised TimeoutError
            future.cancel()
            self.wedged = True
            self.request_stop()
            raise WedgedCallError(f"{what} did not return within {timeout_s:.1f}s") from None


_LIVE = (WorkerState.NEW, WorkerState.RUNNING)


class ChannelState(enum.Enum):
    NEW = "NEW"
    OPEN = "OPEN"
    FENCED = "FENCED"
    """A newer producer with the same transactional id took over."""
    FAILED = "FAILED"
    """A fatal librdkafka error: the producer is unusable."""
    ABANDONED = "ABANDONED"
    """A call exceeded its bound: the producer is left to its stuck thread."""
    CLOSED = "CLOSED"


class Transaction:
    """One open transaction of a :class:`TransactionalChannel` (from ``channel.transaction()``)."""

    def __init__(self, channel: TransactionalChannel, producer: Producer) -> None:
        self._channel = channel
        self._producer = producer

    def produce(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {"key": key}
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        if partition is not None:
            kwargs["partition"] = partition
        if headers is not None:
            kwargs["headers"] = list(headers)
        try:
            self._producer.produce(topic, value, **kwargs)
        except KafkaException as exc:
            raise self._channel._noted(classify(exc, f"{self._channel.transactional_id}: produce to {topic}")) from exc

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: Any) -> None:
        """Commit ``offsets`` of the consumer group (``consumer.consumer_group_metadata()``) with this transaction."""
        timeout = self._channel.call_timeout_s
        self._channel.call(
            "send_offsets_to_transaction",
            lambda: self._producer.send_offsets_to_transaction(offsets, group_metadata, timeout),
        )

    def flush(self, timeout: float) -> int:
        """Deliver what was produced so far (serving delivery callbacks); the count still queued."""
        return int(self._producer.flush(timeout))


class TransactionalChannel:
    """A transactional producer for one ``transactional_id`` (see the module docstring)."""

    def __init__(
        self,
        settings: KafkaSettings,
        transactional_id: str,
        *,
        call_timeout_s: float = 60.0,
        **producer_overrides: Any,
    ) -> None:
        if call_timeout_s <= 0:
            raise KafkaOperationError(f"call_timeout_s must be positive, got {call_timeout_s}")
        self.settings = settings
        self.transactional_id = transactional_id
        self.call_timeout_s = call_timeout_s
        self._overrides = producer_overrides
        self._producer: Producer | None = None
        self._caller: BoundedCaller | None = None
        self.state = ChannelState.NEW
        self.error: KafkaOperationError | None = None
        """What made the channel unusable (FENCED, FAILED, ABANDONED)."""

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> TransactionalChannel:
        """A new producer and ``init_transactions`` (bounded); fences older incarnations of the id.

        Also re-opens a channel that was fenced, failed or abandoned.
        """
        self._producer = None
        producer = clients.producer(self.settings, transactional_id=self.transactional_id, **self._overrides)
        self._producer = producer
        self.state, self.error = ChannelState.OPEN, None
        self.call("init_transactions", lambda: producer.init_transactions(self.call_timeout_s))
        return self

    def close(self) -> None:
        """Release the producer and stop the helper thread (a wedged one is left behind)."""
        self._producer = None
        if self.state in (ChannelState.NEW, ChannelState.OPEN):
            self.state = ChannelState.CLOSED
        if self._caller is not None:
            if self._caller.wedged:
                self._caller.request_stop()
            else:
                self._caller.stop(timeout=5.0)
            self._caller = None

    def __enter__(self) -> TransactionalChannel:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def usable(self) -> bool:
        return self.state is ChannelState.OPEN and self._producer is not None

    @property
    def abandoned(self) -> bool:
        return self.state is ChannelState.ABANDONED

    @property
    def producer(self) -> Producer:
        """The open producer (for ``poll()`` and delivery callbacks); KafkaOperationError if unusable."""
        if self._producer is None or self.state is not ChannelState.OPEN:
            raise KafkaOperationError(
                f"transactional channel {self.transactional_id} is {self.state.value}"
                + (f": {self.error}" if self.error is not None else ""),
                self.error.kafka_error if self.error is not None else None,
            )
        return self._producer

    def flush(self, timeout: float) -> int:
        """``producer.flush(timeout)``: the count of messages still queued."""
        return int(self.producer.flush(timeout))

    # -- transactions ---------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Begin a transaction; commit on normal exit; abort on an exception and re-raise it
        classified (ProducerFencedError, WedgedCallError or KafkaOperationError for Kafka errors,
        any other exception unchanged after the abort)."""
        producer = self.producer
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            raise self._noted(classify(exc, f"{self.transactional_id}: begin_transaction")) from exc
        try:
            yield Transaction(self, producer)
            self.call("commit_transaction", lambda: producer.commit_transaction(self.call_timeout_s))
        except BaseException as exc:
            error = (
                self._noted(classify(exc, f"{self.transactional_id}: transaction"))
                if isinstance(exc, KafkaException)
                else exc
            )
            if self.state is ChannelState.OPEN:
                try:
                    self.call("abort_transaction", lambda: producer.abort_transaction(self.call_timeout_s))
                except KafkaOperationError as abort_error:
                    log.warning("%s: abort after %s failed: %s", self.transactional_id, error, abort_error)
                    raise abort_error from error
            if error is exc:
                raise
            raise error from exc

    def call(self, what: str, call: Callable[[], T], *, timeout_s: float | None = None) -> T:
        """Run a blocking producer call on the helper thread, bounded by ``timeout_s`` (default:
        ``call_timeout_s`` plus :data:`GUARD_GRACE_S`); KafkaException comes back classified.

        A fenced, fatal or wedged outcome marks the channel unusable (``state``, ``error``).
        """
        if self._caller is None or self._caller.wedged or self._caller.state not in _LIVE:
            self._caller = BoundedCaller(f"txn-{self.transactional_id}")
        bound = self.call_timeout_s + GUARD_GRACE_S if timeout_s is None else timeout_s
        try:
            return self._caller.call(f"{self.transactional_id}: {what}", call, bound)
        except KafkaException as exc:
            raise self._noted(classify(exc, f"{self.transactional_id}: {what}")) from exc
        except KafkaOperationError as error:
            self._noted(error)
            raise

    def _noted(self, error: KafkaOperationError) -> KafkaOperationError:
        """Mark the channel unusable when ``error`` says so; return ``error``."""
        state = None
        if isinstance(error, WedgedCallError):
            state = ChannelState.ABANDONED
        elif isinstance(error, ProducerFencedError):
            state = ChannelState.FENCED
        elif error.fatal:
            state = ChannelState.FAILED
        if state is not None and self.state is ChannelState.OPEN:
            log.warning("%s: channel %s: %s", self.transactional_id, state.value, error)
            self.state, self.error, self._producer = state, error, None
        return error


def fence(settings: KafkaSettings, transactional_id: str, *, what: str, call_timeout_s: float = 30.0) -> None:
    """Fence every earlier producer of ``transactional_id``: open it once (``init_transactions`` bumps
    the producer epoch and aborts the old producer's open transaction) and close it. ``what`` names
    the channel in the error (KafkaOperationError) when that fails."""
    channel = TransactionalChannel(settings, transactional_id, call_timeout_s=call_timeout_s)
    try:
        channel.open()
    except KafkaOperationError as exc:
        raise KafkaOperationError(f"cannot fence {what} {transactional_id}: {exc}", exc.kafka_error) from exc
    finally:
        channel.close()


FENCE_PARALLELISM = 8
"""How many transactional ids :func:`fence_all` fences at once."""


def fence_all(
    settings: KafkaSettings,
    transactional_ids: Sequence[str],
    *,
    what: str,
    call_timeout_s: float = 30.0,
    parallelism: int = FENCE_PARALLELISM,
) -> None:
    """:func:`fence` every id of ``transactional_ids``, ``parallelism`` at a time (each is a
    producer's FindCoordinator and InitProducerId round trips: hundreds of ids one after the other
    take tens of seconds). Returns once all are fenced; otherwise raises the first failure, a fatal
    one before any other, after every fence has ended."""
    ids = list(dict.fromkeys(transactional_ids))
    if len(ids) <= 1 or parallelism <= 1:
        for txn_id in ids:
            fence(settings, txn_id, what=what, call_timeout_s=call_timeout_s)
        return
    with ThreadPoolExecutor(min(parallelism, len(ids)), thread_name_prefix="shoal-fence") as pool:
        futures = [pool.submit(fence, settings, txn_id, what=what, call_timeout_s=call_timeout_s) for txn_id in ids]
        errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        fatal = [e for e in errors if isinstance(e, KafkaOperationError) and e.fatal]
        raise (fatal or errors)[0]
