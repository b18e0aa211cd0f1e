"""The node process's Arrow memory pool (every Arrow buffer the node allocates comes from it).

pyarrow's default pool on Linux is mimalloc, which keeps a heap per allocating thread and returns
little of it. A node runs several threads per partition (:mod:`storage_node.node`), and each
leader's thread allocates the buffers of its flushes: with 50 partitions leading under load the
node's RSS rose from 349 MiB idle to a 717 MiB plateau after the first flush wave, although the
memtables held ~6 MiB of rows. The same load with the system allocator (glibc malloc) peaked at
379 MiB (1.12x idle) and used less CPU (38% against 42%); jemalloc peaked at 438 MiB (1.28x).
Measured with ``python -m bench.node_memory`` (README, "Performance at RF 3"). The system allocator
is the default. It was not at first: in two of three fresh-clone CI runs with ``system`` as the
default, the short random fault schedule ended with every node a candidate and no leader. That also
showed once with mimalloc, and its cause was found in the election, not the allocator (one session
entering the line twice: :meth:`metadata.election.PartitionElection.start`). ``shoal node
--arrow-memory-pool mimalloc`` (or ``jemalloc``) chooses another pool.

Arrow has two defaults: pyarrow's (:func:`pyarrow.set_memory_pool`, what pyarrow's Python calls
allocate from) and Arrow C++'s, which the Parquet and IPC readers and the compute kernels use and
which Arrow reads once, from the :data:`ARROW_POOL_ENV` environment variable, when the process
first allocates. Setting pyarrow's alone left the node at 1.75x. So a node's launch spec sets that
variable (:func:`shoal_app.runtime.node_spec.node_spec`: ``shoal up``, docker compose), ``shoal
node`` (the process's edge) re-executes itself with it when it still differs, and
:func:`use_arrow_memory_pool` sets pyarrow's and logs both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pyarrow as pa

from shoal.errors import ConfigError

log = logging.getLogger(__name__)

ARROW_MEMORY_POOLS: dict[str, Callable[[], pa.MemoryPool]] = {
    "system": pa.system_memory_pool,
    "jemalloc": pa.jemalloc_memory_pool,
    "mimalloc": pa.mimalloc_memory_pool,
}
"""The pools a node may use, by name (``MemoryPool.backend_name``)."""

DEFAULT_ARROW_MEMORY_POOL = "system"

ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
"""Arrow C++'s choice of its default pool, read once per process (``system``, ``jemalloc``, ``mimalloc``)."""


def validate_pool_name(name: str) -> str:
    """``name`` if it names one of :data:`ARROW_MEMORY_POOLS`, else :class:`ConfigError`."""
    if not isinstance(name, str) or name not in ARROW_MEMORY_POOLS:
        raise ConfigError(f"arrow_memory_pool must be one of {sorted(ARROW_MEMORY_POOLS)}, got {name!r:.40}")
    return name


def use_arrow_memory_pool(name: str) -> pa.MemoryPool:
    """Make ``name`` this process's default Arrow pool (buffers allocated before keep theirs).

    Raises :class:`ConfigError` for an unknown name or a pool this pyarrow build lacks."""
    cpp_default = pa.default_memory_pool().backend_name  # Arrow C++'s, unless pyarrow's was set before
    try:
        pool = ARROW_MEMORY_POOLS[validate_pool_name(name)]()
    except NotImplementedError as exc:  # a pyarrow built without that allocator
        raise ConfigError(f"this pyarrow has no {name} memory pool") from exc
    pa.set_memory_pool(pool)
    log.info("Arrow memory pool: %s (default before: %s)", pool.backend_name, cpp_default)
    return pool
