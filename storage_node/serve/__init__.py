"""Serving reads: scans of the partitions a node holds, over Arrow Flight."""

from storage_node.serve.flight import ScanRequest, ScanServer, scan_remote
from storage_node.serve.registry import lookup_node, node_path, register_node

__all__ = ["ScanRequest", "ScanServer", "lookup_node", "node_path", "register_node", "scan_remote"]
