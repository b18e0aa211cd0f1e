"""The committed JSON Schemas (docs/schemas/) match the models, and real documents match the schemas.

Documents that need no server are made here for real (the cluster file written and read back,
``shoal status`` and ``shoal down`` on a cluster file with nothing running, the monitor's history
file saved to disk, the demo's summary of a run that stopped early); the others are examples built
from their models, including the shapes a model allows but a quiet cluster rarely shows (absent
channels, a splitting partition, a replica the node could not describe). The integration tests
check the documents of the commands that need servers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from monitor import models as m
from monitor.history import History
from monitor.status import Sample, Status
from producer import DeliveryReport
from shoal import cluster_file
from shoal.cluster_file import ClusterInfo, ProcessRecord
from shoal.errors import ClusterFileError
from shoal_app import schemas
from shoal_app.cli import models as cli
from shoal_app.cli.main import cli as shoal_cli
from shoal_app.demo import full
from shoal_app.demo.report import Console
from spark_jobs.compaction.service import CompactionOutcome

PID = "a" * 32
TXNID = "b" * 40


def test_committed_schemas_match_the_models(tmp_path: Path) -> None:
    assert schemas.stale() == [], "run: python -m shoal_app.schemas --write"
    schemas.write(tmp_path)
    for name in schemas.SCHEMAS:
        committed = (schemas.SCHEMA_DIR / f"{name}.json").read_text(encoding="utf-8")
        assert (tmp_path / f"{name}.json").read_text(encoding="utf-8") == committed, name
        jsonschema.Draft202012Validator.check_schema(json.loads(committed))
    assert sorted(p.stem for p in schemas.SCHEMA_DIR.glob("*.json")) == sorted(schemas.SCHEMAS)


def test_check_reports_a_stale_schema(tmp_path: Path) -> None:
    schemas.write(tmp_path)
    (tmp_path / "cli-status.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "gone.json").write_text("{}\n", encoding="utf-8")
    assert schemas.stale(tmp_path) == ["cli-status", "gone"]
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 1
    assert schemas.main(["--write", "--dir", str(tmp_path)]) == 0 and schemas.stale(tmp_path) == []


# -- the cluster file ------------------------------------------------------------------------


def _info(tmp_path: Path, processes: tuple[ProcessRecord, ...] = ()) -> ClusterInfo:
    return ClusterInfo(
        data_dir=str(tmp_path),
        bootstrap_servers="127.0.0.1:1",
        zk_connect="127.0.0.1:2",
        kafka_cluster_id="cid",
        brokers=1,
        processes=processes,
        extra={"nodes": 0, "zk_root": "/shoal"},
    )


def test_cluster_file_written_and_read_matches_its_schema(tmp_path: Path) -> None:
    records = (
        ProcessRecord("zookeeper", 42, "/d/zoo.cfg", "/d/zk.log", 2181),
        ProcessRecord("node-1", 43, "marker", "/d/node.log", 9000, 9100),
    )
    path = tmp_path / "cluster.json"
    cluster_file.write(path, _info(tmp_path, records))
    written = json.loads(path.read_text(encoding="utf-8"))
    schemas.validate("cluster-file", written)
    assert cluster_file.read(path) == _info(tmp_path, records)


def test_a_cluster_file_of_the_earlier_writer_still_reads(tmp_path: Path) -> None:
    """Exactly what the dataclass-and-dict writer before the models wrote."""
    text = {
        "version": 1,
        "data_dir": "/d",
        "bootstrap_servers": "127.0.0.1:1",
        "zk_connect": "127.0.0.1:2",
        "kafka_cluster_id": "cid",
        "brokers": 3,
        "topic_prefix": "shoal",
        "started_at": 1700000000.5,
        "processes": [
            {"name": "zookeeper", "pid": 1, "marker": "m", "log_path": "/l", "port": 2, "metrics_port": None},
        ],
        "extra": {"nodes": 2},
    }
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(text, indent=2) + "\n", encoding="utf-8")
    schemas.validate("cluster-file", text)
    info = cluster_file.read(path)
    assert info.process("zookeeper") == ProcessRecord("zookeeper", 1, "m", "/l", 2)
    assert info.to_json() == text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 2}, "unsupported cluster file version 2"),
        ({"brokers": "three"}, "bad field"),
        ({"processes": [{"name": "x"}]}, "bad field"),
    ],
)
def test_a_bad_cluster_file_is_refused_with_a_cluster_file_error(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({**_info(tmp_path).to_json(), **change}), encoding="utf-8")
    with pytest.raises(ClusterFileError, match=message):
        cluster_file.read(path)


# -- commands run for real -------------------------------------------------------------------


def test_status_and_down_json_of_a_stopped_cluster(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    cluster_file.write(path, _info(tmp_path))
    runner = CliRunner()
    status = runner.invoke(shoal_cli, ["--cluster-file", str(path), "status", "--output", "json"])
    assert status.exit_code == 1, status.output
    schemas.validate("cli-status", json.loads(status.stdout))
    assert json.loads(status.stdout)["running"] is False
    down = runner.invoke(shoal_cli, ["--cluster-file", str(path), "down", "--output", "json"])
    assert down.exit_code == 0, down.output
    schemas.validate("cli-stopped", json.loads(down.stdout))


def test_status_for_people_is_plain_text_off_a_terminal(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    cluster_file.write(path, _info(tmp_path))
    res = CliRunner().invoke(shoal_cli, ["--cluster-file", str(path), "status"])
    assert res.exit_code == 1
    assert res.stdout.startswith("cluster cid  healthy=False\n")
    assert "nothing is running" in res.stdout and "\x1b[" not in res.stdout
    assert all(line == line.rstrip() for line in res.stdout.splitlines())


def test_history_file_saved_matches_its_schema_and_loads(tmp_path: Path) -> None:
    hist = History(keep_samples=10, keep_s=3600.0, cluster_id="cid", topic_ids={"t": "id1"})
    hist.add("wal|t|g", Sample(100.0, None, 0, 5, 5, 1))
    hist.add("wal|t|g", Sample(101.0, 3, 0, 5, 2, 1))
    hist.add_event("topic:t", 100.5, "recreated")
    hist.note_leader(PID, 1, "node-1")
    path = hist.save(tmp_path, now=102.0)
    schemas.validate("monitor-history-file", json.loads(path.read_text(encoding="utf-8")))
    loaded = History.load(tmp_path, keep_samples=10, keep_s=3600.0, now=102.0)
    assert loaded.series["wal|t|g"][-1] == Sample(101.0, 3, 0, 5, 2, 1)
    assert loaded.events == {"topic:t": [(100.5, "recreated")]} and loaded.partitions[PID].epoch == 1


def test_summary_of_a_demo_that_stopped_at_once_matches_its_schema(tmp_path: Path) -> None:
    config = full.FullDemoConfig(data_dir=tmp_path / "demo", cache_dir=tmp_path / "cache")
    run = full._Run(config, Console(lambda _line: None, 12))
    run.errors.append("ClusterError: could not start")
    summary = {**full._summary(run, kept=False), "processes": [], "seconds": 1.0}
    schemas.validate("cli-demo", summary)
    assert cli.DemoSummary.model_validate(summary).to_json() == summary


# -- examples from the models ----------------------------------------------------------------


def _lag(status: Status = Status.OK) -> dict[str, Any]:
    return {
        "lag_records": 0,
        "lag_seconds": None,
        "lag_bytes_estimate": None,
        "status": status,
        "reason": "ok",
        "series": "k",
    }


def _snapshot() -> m.Snapshot:
    owner = m.ChannelOwner(server_id="node-1", placement_id=1, role="servers")
    head = {"topic_id": "tid", "owner": owner, "is_leader_channel": True}
    seg_replica = m.SegmentsReplica(
        server_id="node-2", placement_id=2, role="servers", ack_group="g", ack_index=None, unacked_segments=1, **_lag()
    )
    part = m.PartitionReport(
        partition_id=PID,
        leader=m.Leader(server_id="node-1", placement_id=1, alive=True),
        epoch=1,
        leader_changes=0,
        ingest=m.Ingest(
            topic="i", exists=True, group="g", log_start=0, log_end=3, accepted_index=3, **_lag(Status.WARN)
        ),
        segments=[
            m.SegmentsChannel(
                topic="s",
                exists=True,
                **head,
                log_start=0,
                log_end=2,
                manifests=1,
                majors=1,
                minors_awaiting_compaction=0,
                invalid_manifests=0,
                recent=[
                    m.RecentSegment(
                        offset=0,
                        segment_id="c" * 32,
                        is_major=True,
                        created_at_ms=1,
                        size_bytes=10,
                        row_count=2,
                        acked_by=[2],
                    )
                ],
                replicas=[seg_replica],
                status=Status.OK,
                reason="all replicas OK",
            ),
            m.AbsentSegmentsChannel(
                topic="s2", exists=False, **head, replicas=[], recent=[], status=Status.OK, reason="no topic"
            ),
        ],
        wal=[
            m.WalChannel(
                topic="w",
                exists=True,
                **head,
                covered_index=None,
                append_index=5,
                tail_index=0,
                replicas=[
                    m.WalReplica(
                        server_id="node-2",
                        placement_id=2,
                        role="servers",
                        ack_group="g",
                        ack_index=5,
                        consume_group=None,
                        consume_index=None,
                        consume_lag_records=None,
                        **_lag(),
                    )
                ],
                status=Status.OK,
                reason="all replicas OK",
            ),
            m.AbsentWalChannel(topic="w2", exists=False, **head, replicas=[], status=Status.ERR, reason="deleted"),
        ],
        status=Status.ERR,
    )
    absent = part.model_copy(
        update={
            "leader": None,
            "ingest": m.AbsentIngest(topic="i", exists=False, group="g", status=Status.OK, reason="no topic"),
        }
    )
    return m.Snapshot(
        generated_at=1.5,
        cluster_id=None,
        status=Status.ERR,
        window=m.Window(samples=6, interval_s=0.5, warn_samples=3),
        tables=[m.TableReport(table="t", status=Status.ERR, partitions=[part, absent])],
        spark_queries=[
            m.SparkQuery(
                query="q",
                group="shoal.spark.q",
                status=Status.OK,
                lag_records=0,
                partitions=[
                    m.SparkPartition(topic="src", partition=0, committed=None, log_start=0, log_end=0, **_lag())
                ],
            )
        ],
        problems=[m.Problem(where="t/x wal#1", status=Status.ERR, reason="deleted")],
    )


def test_monitor_snapshot_example_keeps_its_json_shape() -> None:
    snap = _snapshot().to_json()
    schemas.validate("monitor-snapshot", snap)
    part, absent = snap["tables"][0]["partitions"]
    assert set(part["wal"][1]) == {"topic", "exists", "topic_id", "owner", "is_leader_channel"} | {
        "replicas",
        "status",
        "reason",
    }
    assert "log_end" not in absent["ingest"] and absent["leader"] is None
    assert part["ingest"]["status"] == "WARN" and snap["version"] == 1
    assert m.Snapshot.model_validate(snap) == _snapshot()
    view = m.HistoryView(window_s=3.0, series={"k": m.Series(label="t/x wal", points=[(1.0, 2)])})
    schemas.validate("monitor-history-view", view.to_json())


def test_a_snapshot_with_an_unknown_key_fails_the_schema() -> None:
    snap = _snapshot().to_json()
    snap["tables"][0]["partitions"][0]["wal"][0]["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        schemas.validate("monitor-snapshot", snap)


def _placements() -> list[cli.PlacementJson]:
    return [cli.PlacementJson(server_id="node-1", placement_id=1)]


def test_cli_examples_match_their_schemas() -> None:
    split = cli.SplitJson(
        split_point=100,
        split_partition_id_low="d" * 32,
        split_partition_id_high="e" * 32,
        split_servers_low=_placements(),
        split_servers_high=_placements(),
    )
    partition = {
        "partition_id": PID,
        "begin": None,
        "end": "m",
        "servers": _placements(),
        "servers_joining": [],
        "servers_leaving": _placements(),
        "preferred_leader": cli.PlacementJson(server_id="node-1", placement_id=1),
        "epoch": 2,
    }
    balance = cli.LeaderBalanceJson(
        leaders_per_node={"node-1": 1, "node-2": 0},
        preferred_per_node={"node-1": 1, "node-2": 1},
        on_preferred=1,
        partitions=2,
        balanced=False,
    )
    describe = cli.TableDescription(
        table=cli.TableJson(
            name="t",
            columns=[cli.ColumnJson(name="k", type="uint64", nullable=False)],
            primary_key=["k"],
            partition_key="k",
            keyspace="uint64",
            replication_factor=3,
        ),
        metadata_txnid=TXNID,
        metadata_sequence=2,
        metadata_servers=["node-1"],
        partitions=[
            cli.PartitionJson(
                **partition,
                leader=None,
                splitting=False,
                replicas=[
                    cli.ReplicaLifecycleJson(
                        server_id="node-4", placement_id=7, state="LOAD", leader=False, segments_ack=3, segments_end=9
                    )
                ],
            ),
            cli.PartitionJson(
                **partition,
                leader=cli.PartitionLeader(server_id="node-1", placement_id=1, alive=False),
                splitting=True,
                split=split,
            ),
        ],
        balance=balance,
    )
    described = describe.to_json()
    assert "split" not in described["partitions"][0] and "split" in described["partitions"][1]
    replica = {"server_id": "node-1", "placement_id": 1}
    examples: dict[str, Any] = {
        "cli-table-describe": describe,
        "cli-table-rebalance": cli.TableRebalance(
            table="t",
            request_id="ab" * 8,
            waited=True,
            seconds=3.5,
            balanced=False,
            partitions=[
                cli.PartitionRebalance(
                    partition_id=PID,
                    preferred_leader="node-2",
                    leader_before="node-1",
                    leader_after=None,
                    epoch_before=2,
                    epoch_after=3,
                    on_preferred=False,
                )
            ],
            before=balance,
            after=balance,
        ),
        "cli-table-list": cli.TableList([cli.TableHead(table="t", metadata_txnid=TXNID, metadata_sequence=1)]),
        "cli-table-history": cli.TableHistory(
            [
                cli.HistoryEntry(
                    sequence=1,
                    txnid=TXNID,
                    parent_txnid=None,
                    change="CREATE",
                    summary="created",
                    created_at_ms=1,
                    partitions=1,
                )
            ]
        ),
        "cli-table-split": cli.SplitResult(
            table="t",
            partition_id=PID,
            split_point=100,
            low=cli.SplitChildJson(partition_id="d" * 32, begin=None, end=100, servers=[cli.PlacementJson(**replica)]),
            high=cli.SplitChildJson(partition_id="e" * 32, begin=100, end=None, servers=[cli.PlacementJson(**replica)]),
            state="FINALIZED",
            metadata_sequence=3,
            seconds=1.5,
        ),
        "cli-write": cli.WriteResult(
            table="t",
            rows=2,
            batches=1,
            synced=True,
            deliveries=[DeliveryReport(table="t", partition_id=PID, topic="i", rows=2, deletes=False, offset=7)],
        ),
        "cli-verify": cli.Verification(
            table="t",
            ok=False,
            partitions=[
                cli.PartitionVerification(
                    partition_id=PID,
                    agree=False,
                    chains_equal=False,
                    replicas=[
                        cli.ReplicaError(**replica, error="UnknownNodeError: node-1"),
                        cli.ReplicaDescription(
                            **replica,
                            partition_id=PID,
                            root=None,
                            chain=[],
                            row_count=0,
                            content_hash="0" * 64,
                            memtable_rows=0,
                        ),
                    ],
                    wal_channels=[cli.WalChannelCheck(topic="w", records=0, tail=0, append=0, ok=True, error=None)],
                    wal_chains_ok=True,
                    segments_channels=[
                        cli.WalChannelCheck(topic="s", records=1, tail=0, append=2, ok=False, error="GtidOrderError: x")
                    ],
                    gtids_ok=False,
                    gtid_error="epoch 2 was used by two leaders: a and b",
                )
            ],
            time_retained={"p.wal.x.1": "retention.ms=604800000"},
        ),
        "cli-acl-plan": cli.AclPlan(
            [
                cli.AclRuleJson(
                    role="node",
                    principal="User:node",
                    resource_type="TOPIC",
                    name="p.",
                    pattern="PREFIXED",
                    operation="ALTER_CONFIGS",
                    permission="ALLOW",
                    host="*",
                )
            ]
        ),
        "cli-jars": cli.Jars({"kafka": cli.JarBundle(version="4.1.1", dir="/c/kafka", cached=True, jars=93)}),
        "cli-table-replica-change": cli.ReplicaChange(
            table="t",
            partition_id=PID,
            server_id="node-4",
            placement_id=7,
            action="add-replica",
            state="LIVE",
            metadata_sequence=3,
            waited=True,
            seconds=4.2,
        ),
        "cli-node-drain": cli.DrainResult(
            server_id="node-1",
            moves=[
                cli.DrainMove(
                    table="t",
                    partition_id=PID,
                    from_placement_id=1,
                    to_server_id="node-4",
                    to_placement_id=7,
                    was_leader=True,
                    state="REMOVED",
                )
            ],
            complete=True,
            seconds=12.5,
        ),
        "cli-spark-ingest": cli.IngestSummary(
            query="q",
            query_id="id",
            checkpoint="/c",
            malformed_to_deadletter=1,
            batches=2,
            consumer_group="shoal.spark.q",
            mirrored_offsets={"src/0": 10},
            error=None,
        ),
        "cli-spark-compact": cli.Compactions(
            [
                CompactionOutcome(
                    partition_id=PID,
                    segment_id="f" * 32,
                    reason="8 minors",
                    rows=10,
                    bytes=100,
                    epoch=1,
                    base_segment_id=None,
                    folded=8,
                    committed=None,
                )
            ]
        ),
        "cli-demo-roundtrip": cli.Roundtrip(
            ok=True, seconds=3.0, steps=[cli.RoundtripStep(name="zookeeper", ok=True, seconds=0.1, version=3)]
        ),
        "cli-started": cli.Started(started=["kafka-2", "node-1"]),
        "cli-admin-fix-replication": cli.ReplicationFix(
            replication_factor=3,
            min_insync_replicas=2,
            complete=True,
            topics=[
                cli.TopicFix(
                    topic="shoal.metadata",
                    replication_factor_before=1,
                    replication_factor=3,
                    min_insync_replicas_before=1,
                    min_insync_replicas=2,
                    status="raised",
                )
            ],
        ),
    }
    assert sorted(examples) == sorted(n for n in schemas.SCHEMAS if n.startswith("cli-") and n not in _REAL)
    for name, model in examples.items():
        schemas.validate(name, model.to_json())
    verified = examples["cli-verify"].to_json()["partitions"][0]["replicas"]
    assert verified[0] == {**replica, "error": "UnknownNodeError: node-1"} and verified[1]["memtable_rows"] == 0


_REAL = {"cli-status", "cli-stopped", "cli-demo"}
"""CLI documents made for real above."""
