"""``shoal monitor``'s page, JSON API and /metrics, with the page loaded in headless Chromium.

The page is checked twice: its DOM after the scripts ran (``--dump-dom``: the partitions table
has the replica rows, and an SVG lag chart is drawn), and a screenshot (a PNG that is not blank
and has pixels of the chart line colour)."""

from __future__ import annotations

import json
import shutil
import signal
import struct
import subprocess
import sys
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from monitor_it_support import ChannelWriter, StandInFollower, make_collector, make_env

from monitor.web import CHART_COLOUR, MonitorService
from shoal_app.schemas import validate
from shoal_app.testing.wait import wait_until

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read().decode()


def _chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    assert Path(CHROMIUM).exists(), "Debian's chromium package is needed (apt-get install chromium)"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={tmp / 'profile'}",
        "--virtual-time-budget=3000",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def read_png(path: Path) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into an HxWxC array."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, ctype, _c, _f, interlace = header
    assert depth == 8 and ctype in (2, 6) and interlace == 0, header
    ch = 3 if ctype == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * ch)
    out = np.zeros((height, width * ch), dtype=np.int32)
    prev = np.zeros(width * ch, dtype=np.int32)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 0xFF
        else:  # Sub, Average, Paeth depend on the pixel to the left: one pass over the row
            cur = np.zeros_like(line)
            for x in range(len(line)):
                a = cur[x - ch] if x >= ch else 0
                b = prev[x]
                c = prev[x - ch] if x >= ch else 0
                if f == 1:
                    pred = a
                elif f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[x] = (line[x] + pred) & 0xFF
        out[y] = cur
        prev = cur
    return out.reshape(height, width, ch)[:, :, :3]


def test_page_shows_partitions_and_lag_charts_in_chromium(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    env = make_env(bs, zk_hosts, topic_prefix)
    writer = ChannelWriter(bs, env.wal)
    follower = StandInFollower(bs, env.wal, env.topics.replica_group(env.pid, env.follower.placement_id))
    service = MonitorService(make_collector(env, tmp_path / "history", interval_s=0.3), port=0).start()
    try:
        for i in range(6):  # lag goes up and down while the monitor polls
            last = writer.write(3)
            if i % 2:
                follower.catch_up(last)
            n = service.collector.polls
            assert wait_until(lambda: service.collector.polls > n, 30)  # noqa: B023
        key = f"wal|{env.wal}|{env.topics.replica_group(env.pid, env.follower.placement_id)}"
        hist = service.collector.history_view().to_json()
        assert len(hist["series"][key]["points"]) >= 5

        status, body = _get(f"{service.url}/api/snapshot")
        assert status == 200 and json.loads(body)["tables"][0]["partitions"][0]["partition_id"] == env.pid
        validate("monitor-snapshot", json.loads(body))
        status, body = _get(f"{service.url}/api/history")
        assert status == 200 and key in json.loads(body)["series"]
        validate("monitor-history-view", json.loads(body))
        validate("monitor-history-file", json.loads((tmp_path / "history" / "monitor-history.json").read_text()))
        status, metrics = _get(f"{service.url}/metrics")
        assert status == 200
        labels = (
            f'partition="{env.pid}",placement="{env.leader.placement_id}",'
            f'replica_placement="{env.follower.placement_id}",replica_server="node-2",server="node-1",'
            f'table="events"'
        )
        assert f"shoal_wal_ack_index{{{labels}}}" in metrics
        assert f"shoal_wal_status_code{{{labels}}}" in metrics
        assert f'shoal_partition_leader_epoch{{partition="{env.pid}",table="events"}} 1.0' in metrics
        assert "shoal_segments_minors_awaiting_compaction{" in metrics
        assert "shoal_monitor_polls_total" in metrics and "shoal_monitor_status_code 0.0" in metrics
        assert _get(f"{service.url}/healthz")[1] == "ok\n"

        dom = _chromium(["--dump-dom", f"{service.url}/"], tmp_path)
        assert dom.returncode == 0, dom.stderr[-2000:]
        html = dom.stdout
        assert 'id="partitions"' in html
        assert html.count('class="replica-row"') >= 2  # WAL and segments rows of node-2
        assert env.pid[:12] in html and "node-2#" in html and "node-1#" in html
        assert 'class="lag-chart"' in html and f'data-series="{key}"' in html
        assert 'class="lag-line"' in html and f'stroke="{CHART_COLOUR}"' in html

        shot = tmp_path / "page.png"
        res = _chromium([f"--screenshot={shot}", "--window-size=1400,1200", f"{service.url}/"], tmp_path)
        assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
        img = read_png(shot)
        assert img.shape[:2] == (1200, 1400)
        assert len(np.unique(img.reshape(-1, 3), axis=0)) > 20  # not blank: text, table, badges, chart
        target = np.array([int(CHART_COLOUR[i : i + 2], 16) for i in (1, 3, 5)])
        chart_pixels = int((np.abs(img - target).sum(axis=2) <= 30).sum())
        assert chart_pixels >= 100, chart_pixels  # the lag lines are drawn
        green = int((np.abs(img - np.array([0x2A, 0x9D, 0x3A])).sum(axis=2) <= 30).sum())
        assert green >= 50  # OK badges in the partitions table
    finally:
        service.close()
        follower.close()
        writer.close()
        env.close()


def test_shoal_monitor_command_serves_and_keeps_history(
    cluster: Any, zk_hosts: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = make_env(cluster.bootstrap_servers, zk_hosts, topic_prefix)
    history = tmp_path / "hist"
    cmd = [
        sys.executable,
        "-m",
        "shoal_app.cli.main",
        "monitor",
        env.table,
        "--port",
        "0",
        "--interval",
        "0.3",
        "--window",
        "4",
        "--history-dir",
        str(history),
        "--zk",
        zk_hosts,
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--topic-prefix",
        topic_prefix,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), (url, proc.poll())

        def healthy() -> bool:
            try:
                return _get(f"{url}/healthz")[0] == 200
            except OSError:
                return False

        assert wait_until(healthy, 60, 0.2)
        _status, metrics = _get(f"{url}/metrics")
        assert f'shoal_partition_leader_epoch{{partition="{env.pid}",table="events"}} 1.0' in metrics
        _status, page = _get(f"{url}/")
        assert "<title>shoal monitor</title>" in page and env.pid in page
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        saved = json.loads((history / "monitor-history.json").read_text())
        assert any(env.wal in key for key in saved["series"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        env.close()
