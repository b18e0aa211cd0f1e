"""The Kafka ingest job against real Spark, Kafka, ZooKeeper and a storage node.

JSON and Avro sources; a restart continues from the checkpoint (nothing read twice, new records
read); malformed records land in deadletter with a reason and are counted, never dropped; the
query's offsets are mirrored into its consumer group.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from spark_it_support import SparkCluster, spark_cluster

from shoal.kafka import clients
from shoal.kafka.admin import create_topic
from shoal.kafka.settings import KafkaSettings, TopicPolicy
from shoal.topics import TopicNames
from shoal_app.cli.spark import spark_group
from shoal_app.schemas import validate
from shoal_app.testing.wait import wait_until
from spark_jobs.ingest import IngestConfig, SourceFormat, start_ingest

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _produce(bootstrap: str, topic: str, values: list[bytes | None]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0


def _read(bootstrap: str, topic: str) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-it-read", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, low)])
        out: list[Any] = []
        while len(out) < high - low:
            m = c.poll(5)
            assert m is not None, f"only {len(out)} of {high - low} records of {topic}"
            if m.error() is None:
                out.append(m)
        return out
    finally:
        c.close()


def _group_offset(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        c.close()


def _run(spark: Any, cfg: IngestConfig) -> int:
    job = start_ingest(spark, cfg)
    try:
        job.await_termination(300)
        assert job.query.exception() is None, job.query.exception()
        return job.malformed_count
    finally:
        job.close()


def _config(sc: SparkCluster, source: str, tmp_path: Path, **kw: Any) -> IngestConfig:
    return IngestConfig(
        source_topic=source,
        table=sc.table.name,
        connection=sc.meta,
        checkpoint=tmp_path / "ck",
        query_name="ingest-it",
        available_now=True,
        **kw,
    )


def test_json_ingest_restart_and_malformed_records(
    spark: Any, cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    source = f"{topic_prefix}.src-json"
    create_topic(clients.admin(KafkaSettings(bs)), source, policy=TopicPolicy())
    with spark_cluster(bs, zk_hosts, topic_prefix, tmp_path) as sc:
        good = [json.dumps({"k": k, "v": f"v{k}", "n": k}).encode() for k in [*range(1, 21), *range(1000, 1010)]]
        bad = [
            b"not json at all",
            json.dumps({"k": "abc", "v": "x"}).encode(),
            json.dumps({"v": "no key"}).encode(),
            json.dumps({"k": -5, "v": "negative"}).encode(),
            None,
            json.dumps({"k": 7, "v": "x" * 300_000}).encode(),  # the sink's validation refuses it
        ]
        _produce(bs, source, good[:10] + bad + good[10:])
        cfg = _config(sc, source, tmp_path, max_offsets_per_trigger=7)
        assert _run(spark, cfg) == len(bad)
        assert sc.rows() == {k: (f"v{k}", k) for k in [*range(1, 21), *range(1000, 1010)]}

        dead = _read(bs, TopicNames(topic_prefix).deadletter)
        assert len(dead) == len(bad)
        assert [m.value() for m in dead] == bad
        headers = [dict(m.headers()) for m in dead]
        assert [int(h["shoal.source.offset"]) for h in headers] == list(range(10, 16))
        assert all(h["shoal.reason"] == b"spark-ingest" and h["shoal.source.topic"] == source.encode() for h in headers)
        assert b"is null" in headers[2]["shoal.detail"] and b"negative" in headers[3]["shoal.detail"]
        assert headers[5]["shoal.detail"].startswith(b"column 'v': value is longer than")
        assert _group_offset(bs, cfg.group, source) == len(good) + len(bad)

        # restart from the checkpoint: only the new records are read (nothing deadlettered twice)
        _produce(
            bs,
            source,
            [
                json.dumps({"k": 1, "v": "new", "n": 0}).encode(),
                b"{broken",
                json.dumps({"k": 2001, "v": "x", "n": 1}).encode(),
            ],
        )
        args = [
            "ingest",
            "--topic",
            source,
            "--table",
            sc.table.name,
            "--checkpoint",
            str(cfg.checkpoint),
            "--query-name",
            cfg.query_name,
            "--max-offsets-per-trigger",
            "7",
            "--available-now",
            "-o",
            "json",
        ]
        res = CliRunner().invoke(spark_group, args, env=sc.env)  # `shoal spark ingest`, in this Spark session
        assert res.exit_code == 0, res.output
        summary = json.loads(res.output[res.output.index("{") :])
        validate("cli-spark-ingest", summary)
        assert summary["malformed_to_deadletter"] == 1 and summary["error"] is None
        assert summary["consumer_group"] == cfg.group
        assert summary["mirrored_offsets"] == {f"{source}/0": len(good) + len(bad) + 3}
        rows = sc.rows()
        assert rows[1] == ("new", 0) and rows[2001] == ("x", 1) and len(rows) == len(good) + 1
        assert len(_read(bs, TopicNames(topic_prefix).deadletter)) == len(bad) + 1
        assert wait_until(lambda: _group_offset(bs, cfg.group, source) == len(good) + len(bad) + 3, 30)


def test_avro_ingest_with_garbage(spark: Any, cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path) -> None:
    import fastavro

    bs = cluster.bootstrap_servers
    source = f"{topic_prefix}.src-avro"
    create_topic(clients.admin(KafkaSettings(bs)), source, policy=TopicPolicy())
    with spark_cluster(bs, zk_hosts, topic_prefix, tmp_path) as sc:
        schema = {
            "type": "record",
            "name": "ev",
            "fields": [
                {"name": "k", "type": "long"},
                {"name": "v", "type": ["null", "string"]},
                {"name": "n", "type": ["null", "long"]},
            ],
        }
        parsed = fastavro.parse_schema(schema)

        def enc(rec: dict[str, Any]) -> bytes:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, rec)
            return buf.getvalue()

        records = [enc({"k": k, "v": f"a{k}", "n": None}) for k in [3, 4, 1500]]
        _produce(bs, source, [*records[:2], b"\xff\xfe garbage", enc({"k": -1, "v": "neg", "n": 1}), *records[2:]])
        schema_file = tmp_path / "ev.avsc"
        schema_file.write_text(json.dumps(schema))
        cfg = _config(sc, source, tmp_path, format=SourceFormat.AVRO, avro_schema=schema_file.read_text())
        assert _run(spark, cfg) == 2
        assert sc.rows() == {3: ("a3", None), 4: ("a4", None), 1500: ("a1500", None)}
        dead = _read(bs, TopicNames(topic_prefix).deadletter)
        assert [m.value() for m in dead] == [b"\xff\xfe garbage", enc({"k": -1, "v": "neg", "n": 1})]
        assert b"Avro decoding failed" in dict(dead[0].headers())["shoal.detail"]


def _parsed_json(spark: Any, table: Any, values: list[bytes]) -> dict[int, Any]:
    """``parse_json`` over ``values`` as one source partition's records, by the key ``k``."""
    from spark_jobs.ingest import parse_json

    raw = spark.createDataFrame(
        [(v, "src", 0, i) for i, v in enumerate(values)], "value binary, topic string, partition int, offset bigint"
    )
    return {r["k"]: r for r in parse_json(raw, table).collect()}


def test_json_numbers_beyond_a_float_column_are_refused_not_stored_as_infinity(spark: Any) -> None:
    """Spark reads ``1e400`` as an infinity (float32 columns are parsed as doubles, and the sink
    refuses a finite value beyond float32), which would be stored; only the ``Infinity`` token
    (which ``shoal write`` takes too) means one."""
    from metadata.table import Column, ColumnType, TableDefinition
    from spark_jobs.deadletter import ERROR_COLUMN

    table = TableDefinition(
        "floats",
        (Column("k", ColumnType.UINT64, False), Column("d", ColumnType.FLOAT64), Column("f", ColumnType.FLOAT32)),
        ("k",),
        "k",
        1,
    )
    values = [
        b'{"k": 1, "d": 1e400}',
        b'{"k": 2, "d": -1e400}',
        b'{"k": 3, "f": 1e400}',
        b'{"k": 4, "d": Infinity, "f": -Infinity}',
        b'{"k": 5, "d": 1.5e308, "f": 3.0e38}',
        b'{"k": 6, "d": Infinity, "f": 1e400}',
    ]
    rows = _parsed_json(spark, table, values)
    assert rows[1][ERROR_COLUMN] == "column 'd': a number beyond the range of float64"
    assert rows[2][ERROR_COLUMN] == "column 'd': a number beyond the range of float64"
    assert rows[3][ERROR_COLUMN] == "column 'f': a number beyond the range of float32"
    assert rows[4][ERROR_COLUMN] is None and rows[4]["d"] == float("inf") and rows[4]["f"] == float("-inf")
    assert rows[5][ERROR_COLUMN] is None and rows[5]["d"] == 1.5e308
    assert rows[6][ERROR_COLUMN] == "column 'f': a number beyond the range of float32"  # the token is d's


def test_json_values_that_are_not_strings_are_refused_in_string_and_binary_columns(spark: Any) -> None:
    """Spark reads any JSON value into a string column as its text (``5`` as "5", an object as its
    JSON, ``true`` as "true"); ``shoal write`` takes only a JSON string there, so the ingest sends
    such a record to deadletter instead of storing text the writer never wrote."""
    from metadata.table import Column, ColumnType, TableDefinition
    from spark_jobs.deadletter import ERROR_COLUMN

    table = TableDefinition(
        "texts",
        (Column("k", ColumnType.UINT64, False), Column("v", ColumnType.STRING), Column("b", ColumnType.BINARY)),
        ("k",),
        "k",
        1,
    )
    values = [
        b'{"k": 1, "v": 5}',
        b'{"k": 2, "v": "5", "b": "x"}',
        b'{"k": 3, "v": {"a": 1}}',
        b'{"k": 4, "v": null, "b": null}',
        b'{"k": 5, "v" :  "spaced"}',
        b'{"k": 6, "b": true}',
    ]
    rows = _parsed_json(spark, table, values)
    assert rows[1][ERROR_COLUMN] == "column 'v': a JSON string is expected"
    assert rows[2][ERROR_COLUMN] is None and (rows[2]["v"], rows[2]["b"]) == ("5", "x")
    assert rows[3][ERROR_COLUMN] == "column 'v': a JSON string is expected"
    assert rows[4][ERROR_COLUMN] is None and rows[4]["v"] is None
    assert rows[5][ERROR_COLUMN] is None and rows[5]["v"] == "spaced"
    assert rows[6][ERROR_COLUMN] == "column 'b': a JSON string is expected"


def test_json_times_and_binary_reach_the_ingest_as_their_json_text(spark: Any) -> None:
    """Spark's JSON parser would read 1700000000123 in a timestamp column as seconds and "aGk=" in a
    binary one as base64; read as text, the ingest converts them as ``shoal write`` does."""
    from metadata.table import Column, ColumnType, TableDefinition
    from spark_jobs.deadletter import ERROR_COLUMN

    table = TableDefinition(
        "times",
        (Column("k", ColumnType.UINT64, False), Column("ts", ColumnType.TIMESTAMP_MS), Column("b", ColumnType.BINARY)),
        ("k",),
        "k",
        1,
    )
    values = [
        b'{"k": 1, "ts": 1700000000123, "b": "aGk="}',
        b'{"k": 2, "ts": "2020-01-01T00:00:00Z", "b": "h\\u00e9llo"}',
        b'{"k": 3, "ts": -5}',
    ]
    rows = _parsed_json(spark, table, values)
    assert all(r[ERROR_COLUMN] is None for r in rows.values())
    assert (rows[1]["ts"], rows[1]["b"]) == ("1700000000123", "aGk=")
    assert (rows[2]["ts"], rows[2]["b"]) == ("2020-01-01T00:00:00Z", "héllo")
    assert rows[3]["ts"] == "-5" and rows[3]["b"] is None
