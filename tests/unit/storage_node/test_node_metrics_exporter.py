"""A storage node's exporter: counters from the provider at every scrape, over real HTTP."""

from __future__ import annotations

import urllib.request

import pytest

from storage_node.errors import MetricsError
from storage_node.metrics import start_node_metrics


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


def test_counters_are_read_at_every_scrape() -> None:
    counts = {"fast_forwards": 0.0}

    def provider() -> dict[str, dict[str, float]]:
        counts["fast_forwards"] += 1
        return {"p1": {"fast_forwards": counts["fast_forwards"], "merges_total": 2}, "": {"leader_changes": 1}}

    with start_node_metrics(0, provider, server_id="node-1") as exp:
        first = _get(exp.url)
        second = _get(exp.url)
    assert 'shoal_node_fast_forwards_total{partition="p1",server="node-1"} 1.0' in first
    assert 'shoal_node_fast_forwards_total{partition="p1",server="node-1"} 2.0' in second
    assert 'shoal_node_merges_total{partition="p1",server="node-1"} 2.0' in first
    assert 'shoal_node_leader_changes_total{partition="",server="node-1"} 1.0' in first
    assert "# HELP shoal_node_fast_forwards_total Segments added without reading their data" in first


def test_a_failing_provider_is_counted_not_fatal() -> None:
    def provider() -> dict[str, dict[str, float]]:
        raise RuntimeError("boom")

    with start_node_metrics(0, provider) as exp:
        text = _get(exp.url)
        text = _get(exp.url)
    assert "shoal_node_stats_errors_total 2.0" in text


def test_bad_counter_name_is_an_error_in_the_scrape() -> None:
    with start_node_metrics(0, lambda: {"p": {"Bad Name": 1}}) as exp:
        text = _get(exp.url)
    assert "shoal_node_stats_errors_total 1.0" in text
    assert "Bad Name" not in text


def test_provider_must_be_callable() -> None:
    with pytest.raises(MetricsError, match="callable"):
        start_node_metrics(0, 42)  # type: ignore[arg-type]
