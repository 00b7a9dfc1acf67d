"""The heartbeat's ``partitions=`` line: how the plugin learns which partitions are managed."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmopt.daemon.heartbeat import parse_heartbeat, read_heartbeat, write_heartbeat

NOW = 1_750_000_000.0


def test_partitions_line_is_written_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    write_heartbeat(
        path, enforce=True, now=NOW, pid=7, holder="c:7", managed_partitions=["gpu", "a100"]
    )
    assert path.read_text() == (
        "version=1\ntime=1750000000\nenforce=1\npid=7\nholder=c:7\npartitions=gpu,a100\n"
    )
    status = read_heartbeat(path, now=NOW, max_age_s=30)
    assert status.enforcing and status.heartbeat is not None
    assert status.heartbeat.managed_partitions == ("gpu", "a100")


def test_no_partitions_writes_no_line(tmp_path: Path) -> None:
    beat = write_heartbeat(tmp_path / "hb", enforce=True, now=NOW, pid=1, holder="c:1")
    assert beat.managed_partitions == ()
    assert "partitions" not in (tmp_path / "hb").read_text()


def test_parse_drops_blank_names_and_tolerates_spaces() -> None:
    beat = parse_heartbeat("time=1\nenforce=1\npartitions= gpu , ,*\n")
    assert beat.managed_partitions == ("gpu", "*")
    assert parse_heartbeat("time=1\nenforce=0\npartitions=\n").managed_partitions == ()


@pytest.mark.parametrize("bad", ["", "a,b", "a b", "a=b", "a\nenforce=1"])
def test_unreadable_partition_names_are_refused_before_writing(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="partition"):
        write_heartbeat(tmp_path / "hb", enforce=True, managed_partitions=[bad])
    assert not (tmp_path / "hb").exists()
