"""Atomic file and directory replacement: whole or not at all, nothing left behind on failure."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmopt.fsutil import atomic_directory, atomic_write, atomic_write_bytes


@pytest.fixture
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_text_replaces_the_file_with_the_mode_given(tmp_path: Path, umask_027: None) -> None:
    target = tmp_path / "f"
    target.write_text("old")
    atomic_write(target, "new\n", 0o640)
    assert target.read_text() == "new\n"
    assert _mode(target) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_mode_none_is_what_open_would_give(tmp_path: Path, umask_027: None) -> None:
    atomic_write_bytes(tmp_path / "f", b"\x00\xff", mode=None)
    assert (tmp_path / "f").read_bytes() == b"\x00\xff"
    assert _mode(tmp_path / "f") == 0o640


def test_encoding_failure_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        atomic_write(target, "\u00e9", encoding="ascii")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_directory_replaces_an_older_one(tmp_path: Path) -> None:
    final = tmp_path / "d"
    final.mkdir()
    (final / "stale").write_text("x")

    def fill(tmp: Path) -> None:
        (tmp / "a").write_text("a")

    assert atomic_directory(final, fill) == final
    assert [p.name for p in final.iterdir()] == ["a"]
    assert [p.name for p in tmp_path.iterdir()] == ["d"]


def test_directory_fill_failure_keeps_the_old_one_and_no_temp(tmp_path: Path) -> None:
    final = tmp_path / "d"
    final.mkdir()
    (final / "keep").write_text("x")

    def fill(tmp: Path) -> None:
        (tmp / "half").write_text("h")
        raise ValueError("abandon")

    with pytest.raises(ValueError, match="abandon"):
        atomic_directory(final, fill)
    assert [p.name for p in final.iterdir()] == ["keep"]
    assert [p.name for p in tmp_path.iterdir()] == ["d"]
