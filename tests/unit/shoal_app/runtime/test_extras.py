"""Optional extras: without PySpark or testcontainers, shoal imports and its other commands work; a
command that needs the missing extra fails in one line (exit 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from shoal_app.cli.main import cli
from shoal_app.runtime.extras import MissingExtraError, has_extra, require_extra
from shoal_app.testing import cluster


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # `import pyspark` now raises ImportError
    monkeypatch.setenv("SHOAL_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["spark", "ingest", "--topic", "t", "--table", "events"], "shoal spark ingest"),
        (["spark", "compact", "--once"], "shoal spark compact"),
        (["demo", "--roundtrip"], "shoal demo --roundtrip"),
    ],
)
def test_a_spark_command_without_the_spark_extra_says_so(no_spark: Path, args: list[str], command: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {command} needs the Spark extra: pip install 'shoal[spark]'\n"
    assert "Traceback" not in result.output
    assert not any(no_spark.iterdir())  # it failed before starting anything


def test_the_full_demo_without_the_spark_extra_says_so(no_spark: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", "--data-dir", str(no_spark / "demo")])
    assert result.exit_code == 2, result.output
    assert "shoal demo needs the Spark extra: pip install 'shoal[spark]'" in result.stderr
    assert not (no_spark / "demo").exists()


def test_jars_without_the_spark_extra_skips_the_connector(no_spark: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal.jvm import jars

    fetched: list[str] = []
    monkeypatch.setattr(jars, "is_complete", lambda bundle, cache_dir: True)
    monkeypatch.setattr(jars, "ensure_bundle", lambda bundle, cache_dir: fetched.append(bundle.name) or no_spark)
    result = CliRunner().invoke(cli, ["jars"])
    assert result.exit_code == 0, result.output
    assert fetched == ["zookeeper", "kafka"]
    assert "pip install 'shoal[spark]'" in result.stderr


def test_the_docker_backend_without_the_docker_extra_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "testcontainers", None)
    with pytest.raises(MissingExtraError) as info:
        cluster.from_environment({"SHOAL_TEST_BACKEND": "docker"}, tmp_path / "data", tmp_path / "cache")
    assert str(info.value) == "SHOAL_TEST_BACKEND=docker needs the Docker extra: pip install 'shoal[docker]'"
    assert (info.value.extra, info.value.module) == ("docker", "testcontainers")


def test_require_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    assert has_extra("spark") and has_extra("docker")  # dev installs both
    require_extra("spark", "x")
    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert not has_extra("spark")
    with pytest.raises(MissingExtraError, match=r"^x needs the Spark extra"):
        require_extra("spark", "x")


def test_nothing_imports_an_extra_at_import_time() -> None:
    """Every package but spark_jobs imports with PySpark and testcontainers hidden (a fresh interpreter)."""
    code = (
        "import sys\n"
        "sys.modules['pyspark'] = None\n"
        "sys.modules['testcontainers'] = None\n"
        "import shoal_app.cli.main, shoal_app.demo.full, shoal_app.testing.cluster, shoal_app.runtime.launcher\n"
        "import storage_node.node, metadata.client, producer, monitor.http_server\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
