"""A standalone ZooKeeper server on 127.0.0.1 for the embedded local cluster."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from shoal.cluster_file import ProcessRecord
from shoal.jvm import jars
from shoal.jvm.java import java_executable, jvm_options
from shoal_app.runtime.process import spawn

_LOGBACK = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5level [%thread] %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
"""


def write_config(directory: Path, port: int) -> Path:
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    cfg = directory / "zoo.cfg"
    cfg.write_text(
        "\n".join(
            [
                "tickTime=2000",
                "initLimit=10",
                "syncLimit=5",
                f"dataDir={data}",
                f"clientPort={port}",
                "clientPortAddress=127.0.0.1",
                "maxClientCnxns=0",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,srvr,mntr,stat",
                "autopurge.snapRetainCount=3",
                "autopurge.purgeInterval=1",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    (directory / "logback.xml").write_text(_LOGBACK, encoding="utf-8")
    return cfg


def start(directory: Path, port: int, cache_dir: Path, heap_mb: int = 256) -> ProcessRecord:
    cfg = write_config(directory, port)
    argv = [
        java_executable(),
        *jvm_options(heap_mb),
        f"-Dlogback.configurationFile={directory / 'logback.xml'}",
        f"-Dzookeeper.log.dir={directory}",
        "-cp",
        jars.classpath(jars.zookeeper_bundle(), cache_dir),
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(cfg),
    ]
    return spawn("zookeeper", argv, log_path=directory / "zookeeper.log", marker=str(cfg), port=port)


def four_letter(port: int, word: str = "ruok", timeout_s: float = 2.0) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def is_healthy(port: int) -> bool:
    """Serving requests, not merely listening: `ruok` answers imok even when the server thread died,
    so ask `srvr` for the mode it serves in."""
    reply = four_letter(port, "srvr")
    return any(f"Mode: {mode}" in reply for mode in ("standalone", "leader", "follower"))


def wait_ready(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_healthy(port):
            return True
        time.sleep(0.25)
    return False
