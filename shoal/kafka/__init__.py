"""The Kafka layer of the core (DESIGN.md sections 1 and 11): typed settings, the client factory,
transactional channels, channel readers, the channel indexes and topic administration.

- :mod:`shoal.kafka.settings`: ``Secret``, ``KafkaSettings``, ``ConnectionSettings.resolve``.
- :mod:`shoal.kafka.clients`: ``producer``, ``consumer``, ``admin`` (the only librdkafka configs).
- :mod:`shoal.kafka.errors`: ``classify``, ``ProducerFencedError``, ``WedgedCallError``.
- :mod:`shoal.kafka.transaction`: ``TransactionalChannel``.
- :mod:`shoal.kafka.readers`: ``read_to_end``, ``read_wal_channel``, ``read_manifests``.
- :mod:`shoal.kafka.indexes`: ``ChannelIndexes`` (Append, Tail, Consume, Ack).
- :mod:`shoal.kafka.admin`: ``create_topic``, ``delete_topics``, ``log_start_and_end``.
"""
