"""Every id, name and checksum check refuses a trailing newline.

``re.match`` with ``^...$`` accepts ``"node-1\\n"`` (``$`` also matches before a final newline): a
server listed twice as ``node-1`` and ``node-1\\n`` passed the duplicate check, a table name became a
ZooKeeper path and a topic name with a newline in it. Each check uses ``fullmatch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from metadata.metadata_file import validate_txnid
from metadata.security import ZkSecurity
from metadata.table import validate_column_name
from metadata.zk_layout import ZkLayout
from shoal.errors import ShoalError
from shoal.ids import validate_partition_id, validate_segment_id, validate_server_id, validate_table_name
from shoal.topics import TopicNames

HEX = "0123456789abcdef" * 2

CHECKS: list[tuple[str, Callable[[str], Any], str]] = [
    ("partition id", validate_partition_id, HEX),
    ("segment id", validate_segment_id, HEX),
    ("server id", validate_server_id, "node-1"),
    ("table name", validate_table_name, "events"),
    ("txnid", validate_txnid, "a" * 40),
    ("column name", validate_column_name, "id"),
    ("zookeeper root", lambda v: ZkLayout(v), "/shoal"),
    ("topic prefix", lambda v: TopicNames(v), "shoal"),
    ("query name", lambda v: TopicNames("shoal").spark_group(v), "q1"),
    ("zookeeper user", lambda v: ZkSecurity(username=v, password="p"), "admin"),
]


@pytest.mark.parametrize(("what", "check", "good"), CHECKS, ids=[c[0] for c in CHECKS])
def test_a_trailing_newline_is_refused(what: str, check: Callable[[str], Any], good: str) -> None:
    check(good)
    for bad in (good + "\n", good + "\n\n"):
        with pytest.raises((ShoalError, ValueError)):
            check(bad)
