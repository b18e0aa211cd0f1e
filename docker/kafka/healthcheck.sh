#!/usr/bin/env python3
"""Healthy when the PLAINTEXT listener answers a Kafka ApiVersions request (v0) with error code 0."""
import os
import re
import socket
import struct
import sys

conf = open("/opt/kafka/config/server.properties", encoding="utf-8").read()
m = re.search(r"^listeners=.*?PLAINTEXT://[^:,]*:(\d+)", conf, re.M)
port = int(m.group(1)) if m else 9092
client = b"hc"
body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
try:
    with socket.create_connection(("127.0.0.1", port), timeout=4) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = s.recv(10)
        sys.exit(0 if len(head) >= 10 and struct.unpack(">h", head[8:10])[0] == 0 else 1)
except OSError:
    sys.exit(1)
