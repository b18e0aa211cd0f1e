"""The WAL channel of a placement (LinDB, seed 001): reading it back, and its four indexes."""

from shoal.wire.wal_channel import ChannelRecord, read_channel, read_record_at
from storage_node.wal.indexes import ChannelIndexes, channel_indexes

__all__ = ["ChannelIndexes", "ChannelRecord", "channel_indexes", "read_channel", "read_record_at"]
