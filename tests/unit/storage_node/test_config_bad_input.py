"""Bad configuration input: non-finite thresholds, a malformed ZooKeeper connect string, a bad cluster file."""

from __future__ import annotations

import math

import pytest

from metadata.zk_client import make_client
from shoal.errors import ConfigError
from storage_node.config import FlushPolicy, ReplicaLagPolicy


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, -1.0])
def test_non_positive_or_non_finite_thresholds_are_refused(value: float) -> None:
    with pytest.raises(ConfigError):
        FlushPolicy(max_age_s=value)
    with pytest.raises(ConfigError):
        ReplicaLagPolicy(max_lag_s=value)


@pytest.mark.parametrize("hosts", ["127.0.0.1:notaport", "127.0.0.1:99999"])
def test_a_malformed_zookeeper_connect_string_is_a_config_error(hosts: str) -> None:
    with pytest.raises(ConfigError, match="ZooKeeper hosts"):
        make_client(hosts, start=False)


def test_a_cluster_file_that_is_there_but_bad_is_an_error_not_the_defaults(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Ignoring it would connect to 127.0.0.1's defaults: maybe another cluster."""
    from shoal.errors import ClusterFileError
    from shoal.kafka.settings import ConnectionSettings

    bad = tmp_path / "cluster.json"
    bad.write_text('{"version": 1, "brokers": "three"}')
    with pytest.raises(ClusterFileError):
        ConnectionSettings.resolve({}, {}, bad)
    settings = ConnectionSettings.resolve({}, {}, tmp_path / "missing.json")  # no file: the defaults
    assert settings.kafka is not None
