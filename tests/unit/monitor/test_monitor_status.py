"""Burrow's lag evaluation rules (wiki "Consumer Lag Evaluation Rules") and the false alarms fixed."""

from __future__ import annotations

from collections.abc import Sequence

from monitor.status import Sample, Status, evaluate, worst

N = 6


def win(
    offsets: Sequence[int | None], lags: list[int], *, members: int = 0, start: list[int] | None = None
) -> list[Sample]:
    out = []
    for i, (off, lag) in enumerate(zip(offsets, lags, strict=True)):
        end = (off or 0) + lag
        out.append(Sample(1000.0 + i, off, 0 if start is None else start[i], end, lag, members))
    return out


def ev(window: list[Sample], **kw: object) -> Status:
    return evaluate(window, window_samples=N, warn_samples=3, **kw).status  # type: ignore[arg-type]


# -- Burrow's documented cases ------------------------------------------------------------------


def test_rule1_zero_lag_anywhere_and_now_is_ok() -> None:
    assert ev(win([10, 20, 30, 40, 50, 60], [0, 0, 0, 0, 0, 0])) is Status.OK


def test_lag_decreasing_somewhere_is_ok() -> None:
    # offsets advance, lag goes up and down: the consumer keeps up
    assert ev(win([10, 20, 30, 40, 50, 60], [5, 8, 4, 9, 7, 8])) is Status.OK


def test_rule5_offsets_advance_but_lag_never_decreases_is_warn() -> None:
    v = evaluate(win([10, 20, 30, 40, 50, 60], [5, 6, 7, 8, 9, 10]), window_samples=N, warn_samples=3)
    assert v.status is Status.WARN
    assert "not decreasing" in v.reason and "advancing" in v.reason


def test_rule4_offsets_constant_with_lag_and_live_members_is_stall() -> None:
    v = evaluate(win([10] * 6, [5, 6, 7, 8, 9, 10], members=1), window_samples=N)
    assert v.status is Status.STALL
    assert "has live members" in v.reason


def test_rule3_no_commit_for_a_full_window_without_members_is_stop() -> None:
    v = evaluate(win([10] * 6, [5] * 6), window_samples=N)
    assert v.status is Status.STOP
    assert "no live member" in v.reason


def test_rule2_offset_going_back_is_rewind() -> None:
    v = evaluate(win([10, 20, 30, 15, 16, 17], [1, 1, 1, 16, 16, 16]), window_samples=N)
    assert v.status is Status.REWIND
    assert "30 to 15" in v.reason


def test_rewind_is_seen_even_with_zero_lag_before_it() -> None:
    # Burrow PR #716: rule 1 (a zero lag in the window) used to hide the rewind
    assert ev(win([10, 20, 30, 5, 6, 7], [0, 0, 0, 25, 24, 23])) is Status.REWIND


def test_rewind_that_recovered_is_not_reported() -> None:
    assert ev(win([10, 20, 5, 25, 30, 35], [0, 0, 15, 0, 0, 0])) is Status.OK


def test_group_offsets_deleted_is_rewind() -> None:
    assert ev(win([10, 20, 30, None, None, None], [0, 0, 0, 30, 30, 30])) is Status.REWIND


def test_statuses_order_by_severity() -> None:
    assert worst([Status.OK, Status.WARN, Status.STOP, Status.STALL]) is Status.STOP
    assert worst([]) is Status.OK
    assert [s.code for s in Status] == [0, 1, 2, 3, 4, 5]


# -- false alarms fixed -------------------------------------------------------------------------


def test_idle_channel_with_zero_lag_is_ok_however_old_the_commit() -> None:
    # Burrow: nothing committed for hours + lag 0 -> fine; the monitor's samples say the same
    window = [Sample(1000.0 + i * 3600, 42, 0, 42, 0, 0) for i in range(N)]
    assert ev(window) is Status.OK


def test_first_record_after_a_long_idle_is_not_stop() -> None:
    # Burrow #303: an idle, caught-up consumer was reported STOP as soon as one record arrived
    window = win([42] * 6, [0, 0, 0, 0, 0, 1])
    assert ev(window) is Status.OK
    window = win([42] * 6, [0, 0, 0, 0, 1, 1])
    assert ev(window) is Status.OK  # still inside the grace of warn_samples polls


def test_incomplete_window_is_never_stop() -> None:
    # one or two samples with lag prove nothing (Burrow says STOP with a single offset)
    assert ev(win([10], [5])) is Status.OK
    assert ev(win([10, 10], [5, 5])) is Status.OK


def test_stopped_follower_escalates_warn_then_stop() -> None:
    offs = [10, 20, 30, 30, 30, 30, 30, 30, 30]
    lags = [0, 0, 0, 4, 8, 12, 16, 20, 24]
    seen = [evaluate(win(offs[: i + 1], lags[: i + 1]), window_samples=N, warn_samples=3).status for i in range(9)]
    assert seen[:5] == [Status.OK] * 5
    assert Status.WARN in seen
    assert seen[-1] is Status.STOP
    assert seen.index(Status.WARN) < seen.index(Status.STOP)


def test_resumed_follower_is_ok_again() -> None:
    window = win([30] * 6 + [60], [6, 7, 8, 9, 10, 11, 0])
    assert ev(window) is Status.OK


def test_default_warn_samples_is_half_the_window() -> None:
    window = win([10, 20, 30], [1, 2, 3])
    assert evaluate(window, window_samples=10).status is Status.OK
    window = win([10, 20, 30, 40, 50], [1, 2, 3, 4, 5])
    assert evaluate(window, window_samples=10).status is Status.WARN


# -- what Burrow cannot see ---------------------------------------------------------------------


def test_truncated_past_the_committed_offset_is_err_with_explanation() -> None:
    window = win([10, 10], [0, 5], start=[0, 12])
    v = evaluate(window, window_samples=N)
    assert v.status is Status.ERR
    assert "log start 12 > committed 10" in v.reason and "never acknowledged" in v.reason


def test_truncation_status_is_chosen_by_the_caller() -> None:
    window = win([10, 10], [0, 5], start=[0, 12])
    assert evaluate(window, window_samples=N, truncated_status=Status.REWIND).status is Status.REWIND


def test_committed_beyond_log_end_is_err() -> None:
    window = [Sample(1.0, 50, 0, 50, 0), Sample(2.0, 50, 0, 3, 0)]
    v = evaluate(window, window_samples=N)
    assert v.status is Status.ERR
    assert "beyond the log end" in v.reason


def test_log_end_going_back_is_err() -> None:
    window = [Sample(1.0, 5, 0, 50, 45), Sample(2.0, 5, 0, 20, 15)]
    v = evaluate(window, window_samples=N)
    assert v.status is Status.ERR and "moved back from 50 to 20" in v.reason


def test_events_make_err() -> None:
    v = evaluate(win([1], [0]), window_samples=N, events=["topic t was recreated"])
    assert v == v.__class__(Status.ERR, "topic t was recreated")


def test_no_samples_is_ok() -> None:
    assert evaluate([], window_samples=N).status is Status.OK
