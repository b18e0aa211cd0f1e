"""Spark applications of shoal (DESIGN.md section 9): sink, reader, Kafka ingest, compaction.

==================  ==============================================================================
``session``         the SparkSession factory (Kafka connector jars from the cache)
``datasource``      ``format("shoal")``: the PySpark 4 Python data source; ``register(spark)``
``settings``        its options; connection defaults resolved on the driver
``schema_map``      table schema <-> Spark schema, the sink's type check
``sink``            stream / batch writers through the producer; ``commit_log``: batch-id fence
``reader``          one input partition per shoal partition, scanned over Arrow Flight
``ingest``          Kafka topic -> parse (JSON / ``avro_source``) -> sink; ``deadletter``;
                    ``offsets_mirror`` (query offsets -> consumer group)
``compaction``      the compaction service (see its package docstring)
==================  ==============================================================================
"""
