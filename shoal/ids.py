"""Ids and names, and their validation.

Anything that arrives from outside (the wire, the CLI, a file) and later becomes part of a
topic name, a ZooKeeper path or a file name is validated here first. Nothing from the wire ever
becomes a path without passing one of these checks.
"""

from __future__ import annotations

import re
import secrets

from shoal.errors import InvalidIdError

_HEX128 = re.compile(r"^[0-9a-f]{32}$")
_SERVER_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_TABLE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,127}$")
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""Kafka's own rule for a topic name (``org.apache.kafka.common.internals.Topic.validate``)."""
_SASL_USER = re.compile(r"[A-Za-z0-9._@-]{1,255}")


def new_hex128() -> str:
    """A fresh random 128-bit id as 32 lowercase hex digits."""
    return secrets.token_hex(16)


def new_partition_id() -> str:
    return new_hex128()


def new_segment_id() -> str:
    return new_hex128()


def validate_hex128(value: object, what: str) -> str:
    """Return ``value`` if it is 32 lowercase hex digits, else raise InvalidIdError naming ``what``."""
    if not isinstance(value, str) or not _HEX128.fullmatch(value):
        raise InvalidIdError(f"{what} must be 32 lowercase hex digits (a 128-bit id), got {value!r:.80}")
    return value


def validate_partition_id(value: object) -> str:
    return validate_hex128(value, "partition_id")


def validate_segment_id(value: object) -> str:
    return validate_hex128(value, "segment_id")


def validate_server_id(value: object) -> str:
    """Server ids are short lowercase names such as ``node-1``."""
    if not isinstance(value, str) or not _SERVER_ID.fullmatch(value):
        raise InvalidIdError(
            f"server_id must match {_SERVER_ID.pattern} (lowercase letters, digits, '-', '_'), got {value!r:.80}"
        )
    return value


def validate_table_name(value: object) -> str:
    if not isinstance(value, str) or not _TABLE_NAME.fullmatch(value):
        raise InvalidIdError(
            f"table name must match {_TABLE_NAME.pattern} (a letter, then letters, digits or '_'), got {value!r:.80}"
        )
    return value


def validate_topic_name(value: object) -> str:
    """A name Kafka accepts for a topic: 1-249 of ``[A-Za-z0-9._-]``, not ``.`` or ``..``."""
    if not isinstance(value, str) or not _TOPIC_NAME.fullmatch(value) or value in (".", ".."):
        raise InvalidIdError(
            f"a Kafka topic name is 1-249 characters of letters, digits, '.', '_', '-' (not '.' or '..'), "
            f"got {value!r:.80}"
        )
    return value


def validate_sasl_user(value: object) -> str:
    """A SASL user name shoal writes into an ACL principal (``User:NAME``): letters, digits, ``._@-``."""
    if not isinstance(value, str) or not _SASL_USER.fullmatch(value):
        raise InvalidIdError(f"a user name is 1-255 of letters, digits, '.', '_', '@', '-', got {value!r:.80}")
    return value


def validate_placement_id(value: object) -> int:
    """Placement ids are positive integers allocated from a ZooKeeper counter."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value >= 2**63:
        raise InvalidIdError(f"placement_id must be a positive 64-bit integer, got {value!r:.80}")
    return value
