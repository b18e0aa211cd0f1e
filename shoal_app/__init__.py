"""The application layer: the ``shoal`` command, the demo, the local runtime and the test backends.

It sits above every other package (DESIGN.md section 1): it may import the core, metadata, the
producer, the storage node, Spark jobs and monitoring; nothing imports it except tests, benchmarks
and the console script.
"""
