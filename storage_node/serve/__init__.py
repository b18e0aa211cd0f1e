"""Serving reads: scans of the partitions a node holds, over Arrow Flight."""

from storage_node.serve.flight import ScanRequest, ScanServer, describe_remote, scan_remote
from storage_node.serve.registry import lookup_node, node_path, register_node

__all__ = ["ScanRequest", "ScanServer", "describe_remote", "lookup_node", "node_path", "register_node", "scan_remote"]
