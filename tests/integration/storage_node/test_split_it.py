"""A split under continuous writes and a scanner loop, on real servers (seed 000 section 3.8).

Three in-process nodes, replication factor 2. A writer thread keeps writing batches of fresh keys
through the producer (which re-routes on the new METADATA), a scanner thread keeps reading every
partition from its leader; ``shoal table split --at KEY --wait --output json`` splits the one
partition. Then: every acknowledged row is present exactly once, in the right child, on every
replica; ``shoal verify`` agrees, the parent's channels included; no scan ever returned fewer rows
than an earlier one; bad split input is refused naming the input, with METADATA unchanged; rows a
stale producer writes to the parent afterwards are forwarded by the low child's leader, also after
that leader's node stopped.
"""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, ConfigResource
from node_it_support import in_process_nodes, make_table

from metadata.client import MetadataClient, MetadataConfig
from metadata.discovery import ReplicaState
from metadata.election import read_epoch
from metadata.node_registry import lookup_node
from producer import Producer, ProducerConfig
from shoal.errors import ShoalError
from shoal.kafka.settings import ConnectionSettings
from shoal.scan import ScanRequest, scan_remote
from shoal_app.cli.main import cli
from shoal_app.cli.verify import verify
from shoal_app.testing.wait import wait_until

pytestmark = pytest.mark.integration

NODES = ("node-1", "node-2", "node-3")
POINT = 1_000_000


def test_split_under_writes_and_scans(cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path) -> None:
    bs = cluster.bootstrap_servers
    meta = MetadataConfig(zk_hosts=zk_hosts, bootstrap_servers=bs, topic_prefix=topic_prefix)
    env = {"SHOAL_ZK_CONNECT": zk_hosts, "SHOAL_BOOTSTRAP_SERVERS": bs, "SHOAL_TOPIC_PREFIX": topic_prefix}
    table = make_table(replication_factor=2)
    acked: list[int] = []
    counts: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    with MetadataClient(meta) as client, in_process_nodes(meta, tmp_path, NODES) as nodes:
        parent = client.coordinator.create_table(table, ["node-1", "node-2"], []).partitions[0].partition_id

        def scan_all() -> int | None:
            file = client.coordinator.current("events")
            total = 0
            for entry in file.partitions:
                leader = read_epoch(client.zk, client.layout, entry.partition_id).server_id
                if leader is None:
                    return None
                try:
                    got = scan_remote(
                        lookup_node(client.zk, client.layout, leader), ScanRequest("events", entry.partition_id)
                    )
                except ShoalError:
                    return None  # a leader taking over refuses scans (retryable)
                total += got.num_rows
            return total

        def writer() -> None:
            config = ProducerConfig(ConnectionSettings.plain(bs, zk_hosts, topic_prefix=topic_prefix))
            try:
                with Producer(config) as p:
                    batch = 0
                    while not stop.is_set():
                        # keys on both sides of the split point, never written twice
                        keys = [POINT - 1 - batch * 10 - i for i in range(5)] + [
                            POINT + batch * 10 + i for i in range(5)
                        ]
                        p.write("events", [{"k": k, "v": f"v{k}"} for k in keys]).wait(30)
                        acked.extend(keys)
                        batch += 1
                        stop.wait(0.2)  # a segment or two per second: the copy keeps up on a loaded machine
            except BaseException as exc:
                errors.append(exc)

        def scanner() -> None:
            while not stop.is_set():
                n = scan_all()
                if n is not None:
                    counts.append(n)
                stop.wait(0.1)

        assert wait_until(lambda: scan_all() is not None, 90)
        threads = [threading.Thread(target=writer), threading.Thread(target=scanner)]
        for t in threads:
            t.start()
        try:
            assert wait_until(lambda: len(acked) >= 100, 60)
            result = CliRunner().invoke(
                cli, ["table", "split", "events", "--at", str(POINT), "--wait", "--output", "json"], env=env
            )
            assert result.exit_code == 0, result.output
            report = json.loads(result.stdout)
            assert report["state"] == "FINALIZED" and report["split_point"] == POINT
            low, high = report["low"]["partition_id"], report["high"]["partition_id"]
            assert "finalized" in result.stderr
            # the children's ingest topics are truncated by their Tail only, never by time
            admin = AdminClient({"bootstrap.servers": bs})
            for child in (low, high):
                res = ConfigResource(ConfigResource.Type.TOPIC, f"{topic_prefix}.ingest.{child}")
                assert admin.describe_configs([res])[res].result(30)["retention.ms"].value == "-1", child
            n_at_split = len(acked)
            assert wait_until(lambda: len(acked) >= n_at_split + 50, 60)  # writes go on, to the children
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert not errors, errors

        # every acknowledged row exactly once, in the right child, on every replica
        want_low = sorted(k for k in acked if k < POINT)
        want_high = sorted(k for k in acked if k >= POINT)

        def replicas_of(pid: str) -> list[Any]:
            return [n.partitions()[pid].replica for n in nodes.values() if pid in n.partitions()]

        def converged() -> bool:
            for pid, want in ((low, want_low), (high, want_high)):
                reps = replicas_of(pid)
                if len(reps) != 2:
                    return False
                for r in reps:
                    if sorted(r.scan().column("k").to_pylist()) != want:
                        return False
            return True

        assert wait_until(converged, 90), {
            pid: [r.scan().num_rows for r in replicas_of(pid)] for pid in (low, high)
        } | {"want": (len(want_low), len(want_high))}

        # the parent is retired everywhere: UNLOAD (no scans, no role) until the lifecycle removes it
        def parent_retired() -> bool:
            held = [n.partitions().get(parent) for n in nodes.values()]
            return all(h is None or (h.state is not ReplicaState.LIVE and h.leader is None) for h in held)

        assert wait_until(parent_retired, 30)
        (splitter,) = [s for n in nodes.values() for s in n.splitters().values()]
        stats = splitter.stats
        assert stats.pieces >= 2 and stats.through is not None and set(stats.acked.values()) == {stats.through}
        print(f"split: {stats}")  # pieces, rows, bytes, freeze seconds, acks
        # the stragglers are forwarded by the node leading the low child (and only there)
        low_leader = read_epoch(client.zk, client.layout, low).server_id
        forwarding = {name: list(n.forwarders()) for name, n in nodes.items() if n.forwarders()}
        assert forwarding == {low_leader: [parent]}, (forwarding, low_leader)
        print(f"forwarded: {nodes[str(low_leader)].forwarders()[parent].stats}")

        # scans never short: the count only grows
        assert counts and all(b >= a for a, b in itertools.pairwise(counts)), counts

        assert wait_until(lambda: verify(client, "events").ok, 60), verify(client, "events")
        # the parent's channels are read too (until UNLOAD_FINAL deletes them): every write on them
        # is on the child replica that holds its key now
        (retired,) = verify(client, "events").retired
        assert retired.partition_id == parent and retired.covered is True, retired
        print(
            f"parent's channels: {[(c.topic, c.records) for c in (*retired.wal_channels, *retired.segments_channels)]}"
        )

        # bad input: a clear error naming the input, METADATA unchanged
        before = client.coordinator.head("events").metadata_sequence
        for at, why in ((str(POINT), "equals a boundary"), ("abc", "UINT64 key"), ("-5", "UINT64 key")):
            bad = CliRunner().invoke(cli, ["table", "split", "events", "--at", at], env=env)
            assert bad.exit_code != 0 and why in bad.output, bad.output
        bad = CliRunner().invoke(cli, ["table", "split", "events", "--at", "5", "--partition", high], env=env)
        assert bad.exit_code != 0 and "outside partition" in bad.output, bad.output
        assert client.coordinator.head("events").metadata_sequence == before

        # forwarding follows the low child's leadership: with its leader's node gone, a producer that
        # still routes by the map before the split writes to the parent, and its rows reach the child
        before_split = client.coordinator.history("events")[0]
        config = ProducerConfig(ConnectionSettings.plain(bs, zk_hosts, topic_prefix=topic_prefix), watch_metadata=False)

        def straggler(key: int) -> None:
            with Producer(config, map_loader=lambda _t: before_split) as stale:
                stale.write("events", [{"k": key, "v": f"late{key}"}])
                stale.sync(90)  # accepted = forwarded, in the transaction that commits the parent's group

        def child_holds(key: int) -> bool:
            return all(key in r.scan().column("k").to_pylist() for r in replicas_of(low))

        straggler(7)
        assert wait_until(lambda: child_holds(7), 60)
        gone = nodes.pop(str(low_leader))
        gone.stop()
        gone._test_thread.join(60)  # type: ignore[attr-defined]
        assert wait_until(lambda: read_epoch(client.zk, client.layout, low).server_id not in (None, low_leader), 60)
        straggler(8)
        assert wait_until(lambda: child_holds(8), 60)
        (owner,) = [n for n in nodes.values() if n.forwarders()]
        assert list(owner.forwarders()) == [parent]
