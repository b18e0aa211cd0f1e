"""`shoal demo`: the full demo and the foundation round trip (``--roundtrip``).

==============  ====================================================================================
``full``        the steps, in order, under one ExitStack (everything started is stopped by pid)
``processes``   cluster, node kill/restart from the launcher's node spec, monitor, ingest, compaction
``generator``   the event generator thread (JSON events to an external Kafka topic, acks counted)
``events``      the demo table, the events' JSON, and the check that every acknowledged event is there
``observe``     rows in shoal, rows per replica, leaders and epochs, lag from the monitor's snapshot
``report``      progress lines and the summary
``roundtrip``   ZooKeeper CAS, a Kafka transaction and a Spark read (the first, smallest demo)
==============  ====================================================================================
"""
