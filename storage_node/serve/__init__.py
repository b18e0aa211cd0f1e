"""Serving reads: the Arrow Flight server over the partitions a node holds (clients use shoal.scan)."""

from storage_node.serve.flight import FlightServing, ScanServer

__all__ = ["FlightServing", "ScanServer"]
