"""Wire formats: everything shoal puts on Kafka.

- :mod:`shoal.wire.avro`: control records as Avro single-object encoding (``schemas/*.avsc``).
- :mod:`shoal.wire.records`: typed control records (segment manifest and chunk, WAL record
  envelope) and the WAL hash chain (:func:`~shoal.wire.records.chain_hash`,
  :func:`~shoal.wire.records.verify_chain`).
- :mod:`shoal.wire.arrow_ipc`: row batches as Arrow IPC streams
  (:func:`~shoal.wire.arrow_ipc.encode_batch`, :func:`~shoal.wire.arrow_ipc.decode_batch`).

Nothing is imported here, so importing one format does not load the others' libraries.
"""
