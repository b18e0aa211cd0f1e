"""Process identity by pid plus marker (psutil): start, find, stop and kill real short-lived processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.cluster_file import ProcessRecord
from shoal_app.runtime import process
from shoal_app.runtime.process import cmdline, is_running, kill, spawn, stop, tail

SLEEPER = [sys.executable, "-c", "import sys, time; time.sleep(60)"]


def test_spawned_child_runs_until_stopped(tmp_path: Path) -> None:
    marker = str(tmp_path / "marker")
    rec = spawn("sleeper", [*SLEEPER, marker], log_path=tmp_path / "s.log", marker=marker)
    assert is_running(rec)  # at once after spawn: Popen returns after exec
    assert cmdline(rec) == (*SLEEPER, marker)
    assert stop(rec, timeout_s=10) is True
    assert not is_running(rec) and cmdline(rec) is None
    assert stop(rec) is False


def test_a_process_started_elsewhere_is_found_by_its_marker_and_killed(tmp_path: Path) -> None:
    marker = str(tmp_path / "elsewhere")
    proc = subprocess.Popen([*SLEEPER, marker], start_new_session=True)  # not through spawn: not in _CHILDREN
    try:
        rec = ProcessRecord("other", proc.pid, marker, str(tmp_path / "none.log"))
        assert is_running(rec)
        kill(rec)
        assert proc.wait(timeout=10) == -9
        assert not is_running(rec)  # a zombie until reaped, then gone: never running
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_pid_without_the_marker_is_never_signalled() -> None:
    """A recycled pid (here: this test's own) whose command line lacks the marker is somebody else."""
    rec = ProcessRecord("recycled", os.getpid(), "no-such-marker-in-pytest", "/nonexistent.log")
    assert not is_running(rec)
    assert stop(rec, timeout_s=0.1) is False
    kill(rec)  # would end this test run if it signalled
    assert not is_running(ProcessRecord("gone", 2**22 + 12345, "x", "/nonexistent.log"))


def test_a_remembered_process_is_checked_by_create_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once seen, a pid is the record's only while psutil finds the same process (pid and create time)."""
    marker = str(tmp_path / "remembered")
    proc = subprocess.Popen([*SLEEPER, marker], start_new_session=True)
    try:
        rec = ProcessRecord("other", proc.pid, marker, str(tmp_path / "none.log"))
        assert is_running(rec)
        remembered = process._KNOWN[(rec.pid, rec.marker)]
        monkeypatch.setattr(remembered, "is_running", lambda: False)  # as if the pid had been recycled
        assert is_running(rec)  # looked up again: the marker is still in this pid's command line
        assert process._KNOWN[(rec.pid, rec.marker)] is not remembered
    finally:
        proc.kill()
        proc.wait()


def test_tail(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail(log, 2) == "line 98\nline 99"
    assert tail(tmp_path / "missing.log") == "(no log)"


def test_a_marker_that_is_only_part_of_an_argument_never_matches(tmp_path: Path) -> None:
    """A cluster file naming a word ("sleep", "python") or "" as a marker must not let ``shoal down``
    signal somebody's process group: the marker is one whole argument (or ``--opt=MARKER``)."""
    marker = str(tmp_path / "whole-marker")
    proc = subprocess.Popen([*SLEEPER, marker], start_new_session=True)
    try:
        assert is_running(ProcessRecord("other", proc.pid, marker, "/nonexistent.log"))
        for part in (marker[:-3], "time", "python"):
            rec = ProcessRecord("other", proc.pid, part, "/nonexistent.log")
            assert not is_running(rec), part
            assert stop(rec, timeout_s=0.1) is False
        assert proc.poll() is None  # never signalled
    finally:
        proc.kill()
        proc.wait()
    for bad in ({"marker": ""}, {"marker": "  "}, {"pid": 0}, {"pid": -1}):
        fields = {"name": "x", "pid": 5, "marker": "m", "log_path": "/l", **bad}
        with pytest.raises(ValueError, match=r"marker|pid"):
            ProcessRecord(**fields)  # type: ignore[arg-type]


def test_up_fresh_refuses_a_directory_shoal_did_not_make(tmp_path: Path) -> None:
    from shoal.errors import RuntimeLaunchError
    from shoal_app.runtime import launcher

    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "important.txt").write_text("keep me")
    config = launcher.LocalClusterConfig(data_dir=project, cache_dir=tmp_path / "cache", fresh=True)
    with pytest.raises(RuntimeLaunchError, match="not a shoal data dir"):
        launcher.up(config)
    assert (project / "src" / "important.txt").read_text() == "keep me"


def test_a_cluster_file_that_cannot_be_read_is_a_cluster_file_error(tmp_path: Path) -> None:
    from shoal.cluster_file import read
    from shoal.errors import ClusterFileError

    (tmp_path / "adir.json").mkdir()
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "latin1.json").write_bytes(b'{"a": "\xff"}')
    for name in ("adir.json", "deep.json", "latin1.json", "file.json/below"):
        if name == "file.json/below":
            (tmp_path / "file.json").write_text("{}")
        with pytest.raises(ClusterFileError):
            read(tmp_path / name)
