"""Old home of the segments-channel manifest reader (now :mod:`shoal.kafka.readers`), kept while
the storage node is ported."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shoal.kafka import readers
from shoal.kafka.readers import ChannelManifest
from shoal.kafka.settings import KafkaSettings

__all__ = ["ChannelManifest", "read_manifests"]


def read_manifests(
    bootstrap_servers: str, topic: str, *, extra: Mapping[str, Any] | None = None, timeout_s: float = 30.0
) -> list[ChannelManifest]:
    return readers.read_manifests(KafkaSettings(bootstrap_servers), topic, timeout_s=timeout_s, **dict(extra or {}))
