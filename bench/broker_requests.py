"""What the brokers spent their request handling on, per Kafka API, over given time windows.

Reads the request logs that brokers started with ``kafka_request_log`` write (Kafka's
``kafka.request.logger`` at DEBUG: one line per completed request, its API, client id, listener and
times; ``shoal_app.runtime.kafka.log4j2_properties``) and adds them up per API for the requests
completed inside the windows (epoch seconds), leaving out the KRaft controller listener.
``python -m bench.replicated --broker-requests`` uses it to split the brokers' handler time between
moving bytes (Produce, Fetch) and everything else (metadata, connections, coordinators,
transactions), the question docs/wal-by-reference.md section 5 asks. The request logger itself
costs the brokers time, so a run with it is for this split, not for the ratio.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PREFIX = re.compile(r"^(\d+) Completed request:")
_REPLICA_CLIENT = re.compile(r"^broker-\d+-fetcher-\d+$")

DATA_APIS = ("PRODUCE", "FETCH (replica)", "FETCH (consumer)")
"""The APIs that move record bytes: the producers' and leaders' appends, the followers' and the
brokers' replica fetches."""


@dataclass(frozen=True)
class Request:
    at_ms: int
    api: str
    listener: str
    local_ms: float
    send_ms: float


@dataclass
class ApiLoad:
    requests: int = 0
    local_ms: float = 0.0
    """Time on a request handler thread (``localTimeMs``: the append to the log, the fetch's read)."""
    send_ms: float = 0.0
    """Time a network thread took to send the response (``sendTimeMs``: a fetch's bytes)."""

    def add(self, r: Request) -> None:
        self.requests += 1
        self.local_ms += r.local_ms
        self.send_ms += r.send_ms


def parse_line(line: str) -> Request | None:
    """One request logger line (``<epoch ms> Completed request:<json>``), or None for anything else."""
    m = _PREFIX.match(line)
    if m is None:
        return None
    try:
        doc = json.loads(line[m.end() :])
        header = doc["requestHeader"]
        api = str(header["requestApiKeyName"])
        if api == "FETCH":
            api = "FETCH (replica)" if _REPLICA_CLIENT.match(str(header.get("clientId", ""))) else "FETCH (consumer)"
        return Request(
            int(m.group(1)),
            api,
            str(doc.get("listener", "")),
            float(doc.get("localTimeMs", 0.0)),
            float(doc.get("sendTimeMs", 0.0)),
        )
    except (ValueError, KeyError, TypeError):
        return None


def profile(
    lines: Iterable[str], windows: Sequence[tuple[float, float]], *, controller_listener: str = "CONTROLLER"
) -> dict[str, ApiLoad]:
    """{api: load} of the requests completed inside any of ``windows`` ((start, end) epoch seconds),
    the controller listener's (KRaft) left out."""
    bounds = [(int(a * 1000), int(b * 1000)) for a, b in windows]
    out: dict[str, ApiLoad] = {}
    for line in lines:
        r = parse_line(line)
        if r is None or r.listener == controller_listener:
            continue
        if any(a <= r.at_ms <= b for a, b in bounds):
            out.setdefault(r.api, ApiLoad()).add(r)
    return out


def summary(loads: dict[str, ApiLoad], seconds: float) -> dict[str, Any]:
    """The profile as JSON: every API's requests (and per second), handler and send ms, and the share
    of the handler time spent on the :data:`DATA_APIS`."""
    local = sum(v.local_ms for v in loads.values())
    data = sum(v.local_ms for k, v in loads.items() if k in DATA_APIS)
    apis = sorted(loads.items(), key=lambda kv: -kv[1].local_ms)
    return {
        "seconds": seconds,
        "requests": sum(v.requests for v in loads.values()),
        "handler_ms": local,
        "data_share": data / local if local else None,
        "apis": {
            k: {
                "requests": v.requests,
                "per_s": v.requests / seconds if seconds else None,
                "handler_ms": v.local_ms,
                "send_ms": v.send_ms,
            }
            for k, v in apis
        },
    }


def log_files(data_dir: Path) -> list[Path]:
    """The request logs of the brokers of a local cluster in ``data_dir`` (``kafka-<id>/logs``)."""
    from shoal_app.runtime.kafka import REQUEST_LOG_NAME

    return sorted(data_dir.glob(f"kafka-*/logs/{REQUEST_LOG_NAME}"))


def read_profile(data_dir: Path, windows: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """:func:`summary` of every broker's requests inside ``windows`` (all logs read as one stream)."""
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(p.open(encoding="utf-8", errors="replace")) for p in log_files(data_dir)]
        loads = profile(itertools.chain.from_iterable(files), windows)
    return summary(loads, sum(b - a for a, b in windows))


def describe(name: str, s: dict[str, Any], top: int = 6) -> str:
    """One line for people: requests per second, the data share of the handler time, the top APIs."""
    share = "-" if s["data_share"] is None else f"{100 * s['data_share']:.0f}%"
    tops = ", ".join(
        f"{api} {v['handler_ms'] / 1000:.2f} s ({v['requests']})" for api, v in list(s["apis"].items())[:top]
    )
    rate = s["requests"] / s["seconds"] if s["seconds"] else 0.0
    return (
        f"brokers during {name}: {rate:,.0f} requests/s, handler time "
        f"{s['handler_ms'] / 1000:.2f} s, Produce+Fetch {share} of it; by handler time: {tops}"
    )
