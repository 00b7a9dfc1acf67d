"""Crash-safe file replacement, shared by every writer whose readers must never see half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(
    path: str | os.PathLike[str],
    text: str,
    mode: int = 0o644,
    encoding: str = "utf-8",
    errors: str = "strict",
    sync_dir: bool = True,
) -> None:
    """Replace ``path`` with ``text``: temp file beside it, fsync, rename, then fsync the directory.

    A reader sees the old file or the new one, never a mix; after a crash
    the rename is durable once this returns.  The temp file is removed on any
    failure, so nothing half-written is left behind.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding, errors=errors) as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if sync_dir:
        dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
