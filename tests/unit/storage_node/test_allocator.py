"""The node's Arrow memory pool (storage_node.allocator): named pools only, set process-wide."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from shoal.errors import ConfigError
from shoal.kafka.settings import ConnectionSettings
from storage_node.allocator import ARROW_MEMORY_POOLS, ARROW_POOL_ENV, DEFAULT_ARROW_MEMORY_POOL, use_arrow_memory_pool
from storage_node.config import NodeConfig


@pytest.fixture
def restore_pool() -> Iterator[None]:
    before = pa.default_memory_pool()
    yield
    pa.set_memory_pool(before)


def test_the_default_is_the_system_allocator() -> None:
    assert DEFAULT_ARROW_MEMORY_POOL == "system"
    assert NodeConfig("node-1", Path("/tmp/x"), ConnectionSettings.resolve({}, {}, None)).arrow_memory_pool == "system"


@pytest.mark.parametrize("name", sorted(ARROW_MEMORY_POOLS))
def test_a_named_pool_becomes_the_default_and_serves_new_buffers(name: str, restore_pool: None) -> None:
    pool = use_arrow_memory_pool(name)
    assert pool.backend_name == name
    assert pa.default_memory_pool().backend_name == name
    before = pool.bytes_allocated()
    arr = pa.array(range(100_000), type=pa.int64())
    assert pool.bytes_allocated() >= before + arr.nbytes


@pytest.mark.parametrize("bad", ["", "glibc", "System", "system\n", "../x", 7, None])
def test_an_unknown_pool_is_refused_and_changes_nothing(bad: object, restore_pool: None) -> None:
    current = pa.default_memory_pool().backend_name
    with pytest.raises(ConfigError, match="arrow_memory_pool must be one of"):
        use_arrow_memory_pool(bad)  # type: ignore[arg-type]
    assert pa.default_memory_pool().backend_name == current
    with pytest.raises(ConfigError, match="arrow_memory_pool"):
        NodeConfig(
            "node-1",
            Path("/tmp/x"),
            ConnectionSettings.resolve({}, {}, None),
            arrow_memory_pool=bad,  # type: ignore[arg-type]
        )


def test_shoal_node_re_executes_itself_once_with_arrow_cpp_pool_set() -> None:
    """Arrow C++ reads ARROW_DEFAULT_MEMORY_POOL once: `shoal node` re-executes itself (same pid) with it."""
    code = (
        "import os, sys\n"
        "from shoal_app.cli.node import _exec_with_arrow_pool\n"
        "print(os.getpid(), os.environ.get('ARROW_DEFAULT_MEMORY_POOL'), flush=True)\n"
        "_exec_with_arrow_pool('system')\n"
        "import pyarrow as pa\n"
        "print(os.getpid(), pa.default_memory_pool().backend_name, flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != ARROW_POOL_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    lines = [line.split() for line in out.stdout.splitlines()]
    # the first run has no variable, execs; the second has it, goes on, and its Arrow C++ default is system
    assert [words[1:] for words in lines] == [["None"], ["system"], ["system"]]
    assert len({words[0] for words in lines}) == 1  # one pid throughout


def test_locally_started_nodes_get_the_variable_from_their_spec() -> None:
    from shoal_app.runtime.node_spec import local_target, node_spec

    spec = node_spec(1, local_target("/d", "/d/cluster.json", "127.0.0.1:1", "127.0.0.1:2"), 40001)
    assert spec.env_dict[ARROW_POOL_ENV] == DEFAULT_ARROW_MEMORY_POOL
