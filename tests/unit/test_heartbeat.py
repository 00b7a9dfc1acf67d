"""The heartbeat file: atomic writes, a fixed text format, and a reader that fails open."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurmopt.daemon.heartbeat import (
    MAX_BYTES,
    Heartbeat,
    parse_heartbeat,
    read_heartbeat,
    write_heartbeat,
)

NOW = 1_750_000_000.0


def test_written_format_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    write_heartbeat(path, enforce=True, now=NOW + 0.9, pid=4242, holder="ctl1:4242")
    # The Lua plugin parses exactly this; changing it is a protocol change (docs/config.md).
    assert path.read_text() == "version=1\ntime=1750000000\nenforce=1\npid=4242\nholder=ctl1:4242\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_default_holder_is_host_and_pid(tmp_path: Path) -> None:
    beat = write_heartbeat(tmp_path / "hb", enforce=False)
    assert beat.pid == os.getpid()
    assert beat.holder.endswith(f":{os.getpid()}") and len(beat.holder) > len(f":{beat.pid}")


def test_rewrite_replaces_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    write_heartbeat(path, enforce=True, now=NOW, pid=1, holder="a:1")
    inode = path.stat().st_ino
    write_heartbeat(path, enforce=False, now=NOW + 5, pid=1, holder="a:1")
    assert os.listdir(tmp_path) == ["heartbeat"]
    assert path.stat().st_ino != inode  # renamed over, not rewritten in place
    status = read_heartbeat(path, now=NOW + 5, max_age_s=30)
    assert status.heartbeat == Heartbeat(time=int(NOW) + 5, enforce=False, pid=1, holder="a:1")


def test_failed_write_keeps_old_file_and_cleans_up(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    write_heartbeat(path, enforce=True, now=NOW, pid=1, holder="a:1")
    before = path.read_text()
    with pytest.raises(ValueError):
        write_heartbeat(path, enforce=False, now=NOW, pid=1, holder="a\nenforce=1")
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["heartbeat"]


def test_missing_directory_raises_for_the_writer(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_heartbeat(tmp_path / "no" / "heartbeat", enforce=True)


def test_fresh_and_enforcing(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    write_heartbeat(path, enforce=True, now=NOW, pid=9, holder="ctl:9")
    status = read_heartbeat(path, now=NOW + 10, max_age_s=30)
    assert status.fresh and status.enforcing
    assert status.age_s == 10
    assert status.heartbeat is not None and status.heartbeat.holder == "ctl:9"


def test_fresh_but_observing(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    write_heartbeat(path, enforce=False, now=NOW)
    status = read_heartbeat(path, now=NOW, max_age_s=30)
    assert status.fresh and not status.enforcing


@pytest.mark.parametrize("offset", [31, -31, 10**9])
def test_stale_is_not_enforcing(tmp_path: Path, offset: float) -> None:
    path = tmp_path / "heartbeat"
    write_heartbeat(path, enforce=True, now=NOW)
    status = read_heartbeat(path, now=NOW + offset, max_age_s=30)
    assert not status.fresh and not status.enforcing
    assert status.reason.startswith("stale")


def test_boundary_age_is_still_fresh(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    write_heartbeat(path, enforce=True, now=NOW)
    assert read_heartbeat(path, now=NOW + 30, max_age_s=30).enforcing


def test_missing_is_not_enforcing(tmp_path: Path) -> None:
    status = read_heartbeat(tmp_path / "absent", now=NOW)
    assert (status.fresh, status.enforcing, status.reason) == (False, False, "missing")


def test_unreadable_is_not_enforcing(tmp_path: Path) -> None:
    status = read_heartbeat(tmp_path, now=NOW)  # a directory
    assert not status.enforcing and status.reason.startswith("unreadable")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\xff\xfe binary",
        b"time=1750000000\n",  # no enforce
        b"enforce=1\n",  # no time
        b"time=yesterday\nenforce=1\n",
        b"time=1750000000\nenforce=yes\n",
        b"time=1750000000\nenforce=1\njunk line\n",
        b"version=2\ntime=1750000000\nenforce=1\n",
        b"time=1750000000\nenforce=1\n" + b"#" * MAX_BYTES,
    ],
)
def test_garbage_is_not_enforcing(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "heartbeat"
    path.write_bytes(data)
    status = read_heartbeat(path, now=NOW, max_age_s=30)
    assert not status.fresh and not status.enforcing
    assert status.reason.startswith("garbage")


def test_unknown_keys_and_comments_are_ignored() -> None:
    beat = parse_heartbeat("# note\nversion=1\ntime=5\nenforce=0\nplan=42\n")
    assert beat == Heartbeat(time=5, enforce=False, pid=0, holder="")


def test_partitions_and_sequence_survive_the_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    write_heartbeat(
        path, True, now=NOW, pid=1, holder="X-ctl:1", managed_partitions=("gpu", "a100"), seq=7
    )
    beat = read_heartbeat(path, now=NOW, max_age_s=30).heartbeat
    assert beat is not None and beat.holder == "X-ctl:1"  # any printable holder is kept
    assert (beat.managed_partitions, beat.seq) == (("gpu", "a100"), 7)


def test_a_file_of_exactly_the_maximum_size_is_read(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    body = b"version=1\ntime=1750000000\nenforce=1\n"
    path.write_bytes(body + b"#" * (MAX_BYTES - len(body) - 1) + b"\n")
    assert len(path.read_bytes()) == MAX_BYTES
    assert read_heartbeat(path, now=NOW, max_age_s=30).enforcing
    path.write_bytes(b"version=1\ntime=\xff\n")
    status = read_heartbeat(path, now=NOW, max_age_s=30)
    assert status.fresh is False and status.enforcing is False
