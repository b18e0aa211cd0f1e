#!/usr/bin/env python3
"""Healthy when `srvr` reports a serving mode (`ruok` answers imok even when the server thread died)."""
import os
import socket
import sys

try:
    with socket.create_connection(("127.0.0.1", int(os.environ.get("ZOO_PORT", "2181"))), timeout=4) as s:
        s.sendall(b"srvr")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
except OSError:
    sys.exit(1)
sys.exit(0 if any(f"Mode: {m}".encode() in reply for m in ("standalone", "leader", "follower")) else 1)
