"""shoal's metadata: tables, key-range partitions and the METADATA file committed by CAS in ZooKeeper.

One module per concept of the EventQL table partitioning design:

- ``table`` / ``keyspace``: table definitions; UINT64 and STRING keyspaces, empty begin/end rules.
- ``metadata_file``: the METADATA file and its Avro encoding (``shoal/wire/schemas/metadata_file.avsc``).
- ``operations``: create / split / finalize-split / join / finalize-join / leave / finalize-leave /
  force-join as pure transitions.
- ``store``: the compacted ``<prefix>.metadata`` topic where file versions are stored before the CAS.
- ``zk_layout`` / ``zk_client`` / ``security``: znode paths and codecs, kazoo clients, digest ACLs.
- ``coordinator``: the commit (build, store, then compare-and-swap; tombstone on a lost race).
- ``metadata_servers``: join / leave / catch-up / serve of metadata servers.
- ``notify`` / ``discovery``: change notification and partition discovery (LOAD, LIVE, UNLOAD, UNLOAD_FINAL).
- ``partition_map``: key -> partition routing, refreshed on change.
- ``election`` / ``placements``: leader election with epochs; placement ids.
"""
