"""A process that used the producer and never closed it exits promptly (its threads do not hold it),
and a CLI command whose broker refuses connections prints no librdkafka log lines without ``-v``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
from producer_it_support import create, events_table, make_store

from metadata.coordinator import MetadataCoordinator

pytestmark = pytest.mark.integration

SCRIPT = """
import sys
from producer import Producer, ProducerConfig
from shoal.kafka.settings import ConnectionSettings

bootstrap, zk, prefix = sys.argv[1:4]
p = Producer(ProducerConfig(ConnectionSettings.plain(bootstrap, zk, topic_prefix=prefix)))
p.write("events", [{"k": k, "v": str(k)} for k in range(100)]).wait(60)
p.flush(30)
print("written", flush=True)
# no close(): the interpreter must still exit
"""


def test_a_process_that_never_closed_its_producer_exits_promptly(
    cluster: Any, zk: Any, zk_hosts: str, topic_prefix: str
) -> None:
    with make_store(cluster, topic_prefix) as store:
        create(MetadataCoordinator(zk, store), events_table(), [])
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, cluster.bootstrap_servers, zk_hosts, topic_prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert b"written" in out, err.decode(errors="replace")[-3000:]
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]


def test_a_command_with_a_refused_broker_prints_no_librdkafka_lines(tmp_path: Any, zk_hosts: str) -> None:
    with socket.socket() as s:  # a port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    conn = ["--zk", zk_hosts, "--bootstrap-servers", f"127.0.0.1:{port}"]
    started = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "shoal_app.cli.main", "offsets", *conn],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=str(tmp_path),
    )
    assert time.monotonic() - started < 180
    noise = [line for line in res.stderr.splitlines() if line.startswith("%") and "|FAIL|" in line]
    assert not noise, res.stderr[-3000:]
