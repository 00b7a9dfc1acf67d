"""Crash-safe replacement of files and directories: readers never see half of one."""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

#: Tries at a free temporary name before giving up (each name has 48 random bits).
_NAME_TRIES = 100


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the entries of directory ``path`` (a rename into it, its new files) durable."""
    dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _create_beside(target: Path, perms: int) -> tuple[int, Path]:
    """A new temporary file beside ``target``, open for writing, ``perms`` less the umask."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for _ in range(_NAME_TRIES):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, perms), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def atomic_write(
    path: str | os.PathLike[str],
    text: str,
    mode: int | None = 0o644,
    encoding: str = "utf-8",
    errors: str = "strict",
    sync_dir: bool = True,
) -> None:
    """Replace ``path`` with ``text``, encoded; see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode(encoding, errors), mode, sync_dir)


def atomic_write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    mode: int | None = 0o644,
    sync_dir: bool = True,
) -> None:
    """Replace ``path`` with ``data``: temp file beside it, fsync, rename, then fsync the directory.

    A reader sees the old file or the new one, never a mix; after a crash
    the rename is durable once this returns.  The temp file is removed on any
    failure, so nothing half-written is left behind.  ``mode`` None gives the
    file the mode a plain ``open()`` would (0o666 less the umask).
    """
    target = Path(path)
    fd, tmp = _create_beside(target, 0o600 if mode is not None else 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if mode is not None:
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
        fsync_dir(target.parent)


def atomic_directory(final: Path, fill: Callable[[Path], None]) -> Path:
    """Replace directory ``final`` with one ``fill`` builds: temp dir beside it, fsync, rename.

    ``fill`` writes (and fsyncs) the files into the empty temporary directory
    it is given, and may raise to abandon it; the directory is then removed.
    The temporary name, ``.NAME.tmp-PID-THREAD``, is one per writer, so a
    leftover from a crash is cleared by that writer's next try; readers skip
    dot names.  An existing ``final`` is removed just before the rename.
    """
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        fill(tmp)
        fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    return final
