"""``shoal status`` counts the brokers that answer, whichever bootstrap address is down."""

from __future__ import annotations

import pytest

from shoal_app.runtime import kafka
from shoal_app.runtime.ports import free_port
from shoal_app.testing.cluster import TestCluster

pytestmark = pytest.mark.integration


def test_a_dead_first_bootstrap_address_does_not_hide_the_live_brokers(cluster: TestCluster) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there: a killed broker listed first
    assert kafka.broker_count(f"{dead},{cluster.bootstrap_servers}", timeout_s=5.0) >= 1
    assert kafka.broker_count(dead, timeout_s=1.0) == 0
