"""format("shoal") options: table required, connection precedence options > env > cluster file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.errors import SinkOptionError
from spark_jobs.settings import DEFAULT_WRITE_ROWS, ReaderSettings, SinkSettings, resolve_connection
from spark_jobs.sink import gathered


def _cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "data_dir": str(tmp_path),
                "bootstrap_servers": "file-kafka:9092",
                "zk_connect": "file-zk:2181",
                "kafka_cluster_id": "x",
                "brokers": 1,
                "topic_prefix": "fromfile",
            }
        )
    )
    return path


def test_options_win_over_env_and_env_over_the_cluster_file(tmp_path: Path) -> None:
    env = {"SHOAL_CLUSTER_FILE": str(_cluster_file(tmp_path)), "SHOAL_ZK_CONNECT": "env-zk:2181"}
    c = resolve_connection({"bootstrapservers": "opt-kafka:9092"}, env)
    assert (c.zk_hosts, c.bootstrap_servers, c.topic_prefix) == ("env-zk:2181", "opt-kafka:9092", "shoal")
    c = resolve_connection({"zk": "opt-zk:1/chroot", "topicPrefix": "p1"}, env)
    assert (c.zk_hosts, c.bootstrap_servers, c.topic_prefix) == ("opt-zk:1/chroot", "file-kafka:9092", "p1")


def test_defaults_without_options_env_or_cluster_file(tmp_path: Path) -> None:
    c = resolve_connection({}, {"SHOAL_DATA_DIR": str(tmp_path / "none")})
    assert (c.zk_hosts, c.bootstrap_servers, c.topic_prefix, c.zk_root) == (
        "127.0.0.1:2181",
        "127.0.0.1:9092",
        "shoal",
        "/shoal",
    )


def test_sink_settings_need_a_valid_table_and_options(tmp_path: Path) -> None:
    env = {"SHOAL_DATA_DIR": str(tmp_path)}
    with pytest.raises(SinkOptionError, match=r"needs .option\('table', NAME\)"):
        SinkSettings.from_options({}, env)
    with pytest.raises(SinkOptionError, match="table"):
        SinkSettings.from_options({"table": "bad name!"}, env)
    with pytest.raises(SinkOptionError, match="'sync' must be true or false"):
        SinkSettings.from_options({"table": "t", "sync": "maybe"}, env)
    with pytest.raises(SinkOptionError, match="'syncTimeout' must be > 0"):
        SinkSettings.from_options({"table": "t", "synctimeout": "0"}, env)
    with pytest.raises(SinkOptionError, match="topic prefix"):
        SinkSettings.from_options({"table": "t", "topicprefix": "a..b"}, env)
    for bad in ("0", "-3", "1.5", "many"):
        with pytest.raises(SinkOptionError, match="'writeRows' must be"):
            SinkSettings.from_options({"table": "t", "writerows": bad}, env)
    s = SinkSettings.from_options({"table": "t", "SYNC": "false", "syncTimeout": "5", "writeRows": "500"}, env)
    assert (s.table, s.sync, s.sync_timeout_s, s.write_rows) == ("t", False, 5.0, 500)
    assert SinkSettings.from_options({"table": "t"}, env).write_rows == DEFAULT_WRITE_ROWS
    assert SinkSettings.from_options({"table": "t"}, env).transaction_timeout_s == 300.0
    assert SinkSettings.from_options({"table": "t", "transactionTimeout": "60"}, env).transaction_timeout_s == 60.0
    for bad in ("0.5", "901", "nan", "inf"):
        with pytest.raises(SinkOptionError, match="transaction_timeout_s must be in"):
            SinkSettings.from_options({"table": "t", "transactiontimeout": bad}, env)
    # a commit tries again for commitTimeout: 600 s, or syncTimeout when that is longer
    assert SinkSettings.from_options({"table": "t"}, env).commit_timeout_s == 600.0
    assert SinkSettings.from_options({"table": "t", "syncTimeout": "900"}, env).commit_timeout_s == 900.0
    assert (
        SinkSettings.from_options({"table": "t", "commitTimeout": "30", "syncTimeout": "10"}, env).commit_timeout_s
        == 30
    )
    with pytest.raises(SinkOptionError, match=r"commit_timeout_s \(5.0\) must be at least sync_timeout_s \(10.0\)"):
        SinkSettings.from_options({"table": "t", "commitTimeout": "5", "syncTimeout": "10"}, env)
    with pytest.raises(SinkOptionError, match="'commitTimeout' must be > 0"):
        SinkSettings.from_options({"table": "t", "commitTimeout": "-1"}, env)


class _Clock:
    """time.monotonic and time.sleep of the sink module, advanced by sleeps and by each try."""

    def __init__(self, step_s: float) -> None:
        self.now, self.step_s, self.sleeps = 1000.0, step_s, []  # type: ignore[var-annotated]

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _retrying(monkeypatch: pytest.MonkeyPatch, failures: list[Exception], commit_timeout_s: float, step_s: float):  # type: ignore[no-untyped-def]
    import spark_jobs.sink as sink

    clock = _Clock(step_s)
    monkeypatch.setattr(sink.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(sink.time, "sleep", clock.sleep)
    settings = SinkSettings("t", resolve_connection({}, {}), sync_timeout_s=10, commit_timeout_s=commit_timeout_s)
    timeouts: list[float] = []

    def step(timeout: float) -> str:
        timeouts.append(timeout)
        clock.now += min(step_s, timeout)
        if failures:
            raise failures.pop(0)
        return "done"

    outcome = sink.retrying(settings, "batch 3: wait", step, deadline=clock.now + commit_timeout_s)
    return outcome, timeouts, clock.sleeps


def test_a_commit_tries_a_retriable_failure_again_until_commit_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.errors import SinkCommitError

    late = [SinkCommitError("not accepted", retriable=True) for _ in range(3)]
    outcome, timeouts, sleeps = _retrying(monkeypatch, late, commit_timeout_s=100, step_s=10)
    assert outcome == "done" and timeouts == [10, 10, 10, 10] and sleeps == [1, 2, 4]
    # each try gets syncTimeout, the last what is left; then the last error, counted
    with pytest.raises(SinkCommitError, match=r"not accepted \(after 3 tries in commitTimeout\)") as exc:
        _retrying(monkeypatch, [SinkCommitError("not accepted", retriable=True) for _ in range(9)], 25, 10)
    assert exc.value.retriable
    # a refusal (not retriable) fails at once, as a fatal Kafka error does
    with pytest.raises(SinkCommitError, match=r"^refused$"):
        _retrying(monkeypatch, [SinkCommitError("refused"), SinkCommitError("x", retriable=True)], 600, 1)


def test_a_sink_task_transactional_id_names_the_query_and_partition() -> None:
    from spark_jobs.errors import SinkCommitError
    from spark_jobs.sink import sink_transactional_id

    query = "0b6a1a30-6f0e-4c2e-9a57-1c1c2b7d6f10"
    assert sink_transactional_id("shoal", query, 3) == f"shoal.sink.{query}.3"
    for bad_query, bad_partition in (("../x", 0), (query, -1), (query, True)):
        with pytest.raises(SinkCommitError):
            sink_transactional_id("shoal", bad_query, bad_partition)  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [1, 7, 10, 25, 1000])
def test_a_sink_task_gathers_sparks_batches_into_writes_of_write_rows(rows: int) -> None:
    sizes = [10, 0, 3, 10, 10, 1, 0, 10]
    batches = [pa.record_batch({"k": list(range(sum(sizes[:i]), sum(sizes[: i + 1])))}) for i in range(len(sizes))]
    parts = list(gathered(iter(batches), rows))
    assert [k for p in parts for k in p.column("k").to_pylist()] == list(range(sum(sizes)))  # all, in order
    assert all(p.num_rows >= rows for p in parts[:-1]) and all(p.num_rows > 0 for p in parts)
    assert all(p.num_rows < rows + max(sizes) for p in parts)  # at most write_rows plus one batch held
    assert list(gathered(iter([]), rows)) == [] and list(gathered(iter(batches[1:2]), rows)) == []


def test_reader_settings_validate_the_node(tmp_path: Path) -> None:
    env = {"SHOAL_DATA_DIR": str(tmp_path)}
    assert ReaderSettings.from_options({"table": "t", "node": "node-2"}, env).node == "node-2"
    with pytest.raises(SinkOptionError):
        ReaderSettings.from_options({"table": "t", "node": "../etc"}, env)
