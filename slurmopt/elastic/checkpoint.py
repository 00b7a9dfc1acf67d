"""Atomic checkpoints with a checksummed manifest, copied to shared storage.

Layout, in the node-local directory and (copied) in the shared one::

    step-00000120/            one checkpoint: its files and manifest.json
        model.pt
        manifest.json         {"step": 120, "created_at": ..., "files": {"model.pt": SHA256}}
    latest                    "step-00000120": the newest checkpoint known complete in shared

A checkpoint is written into a temporary directory, every file fsynced,
the manifest written last, then the directory renamed into place, so a
crash leaves either a whole checkpoint or a ``.tmp-*`` directory that is
ignored.  The copy to shared storage runs in a background thread, checks
every checksum of the copy, then renames it into place; only then does
``latest`` move.  Resuming takes the newest checkpoint (local or shared)
whose manifest and checksums verify, so a partial or corrupt one is
skipped, not trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurmopt.fsutil import atomic_directory, atomic_write

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
LATEST = "latest"
_STEP_DIR = re.compile(r"step-(\d{8})")


class CheckpointError(Exception):
    """A checkpoint that cannot be written or does not verify."""


def step_dir_name(step: int) -> str:
    """``step-00000120``: sorts by step as text too."""
    return f"step-{step:08d}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_file(path: Path, data: bytes) -> None:
    with path.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` all at once (temporary file, fsync, rename).

    The file gets the mode a plain ``open()`` gives it, as the checkpoint's own files do.
    """
    atomic_write(path, text, mode=None)


@dataclass(frozen=True)
class Checkpoint:
    """One verified checkpoint on disk."""

    step: int
    path: Path
    files: Mapping[str, str]
    created_at: float

    def read(self, name: str) -> bytes:
        """One of the checkpoint's files."""
        return (self.path / name).read_bytes()


def verify(path: Path) -> Checkpoint:
    """The checkpoint in ``path`` if its manifest and every checksum hold; else CheckpointError."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        step = int(manifest["step"])
        files = {str(k): str(v) for k, v in manifest["files"].items()}
        created_at = float(manifest["created_at"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{path}: no valid manifest ({exc})") from None
    for name, expected in files.items():
        target = path / name
        if Path(name).name != name or not target.is_file():
            raise CheckpointError(f"{path}: missing file {name!r}")
        if _sha256(target) != expected:
            raise CheckpointError(f"{path}: checksum mismatch in {name!r}")
    return Checkpoint(step=step, path=path, files=files, created_at=created_at)


def write_checkpoint(root: Path, step: int, files: Mapping[str, bytes], now: float) -> Path:
    """Write a whole checkpoint under ``root`` atomically; return its directory."""
    root.mkdir(parents=True, exist_ok=True)

    def fill(tmp: Path) -> None:
        sums = {}
        for name, data in files.items():
            if Path(name).name != name or name == MANIFEST:
                raise CheckpointError(f"bad checkpoint file name {name!r}")
            _write_file(tmp / name, data)
            sums[name] = hashlib.sha256(data).hexdigest()
        manifest = {"step": step, "created_at": now, "files": sums}
        _write_file(tmp / MANIFEST, json.dumps(manifest, sort_keys=True).encode())

    return atomic_directory(root / step_dir_name(step), fill)


def copy_verified(source: Path, shared_root: Path) -> Path:
    """Copy a checkpoint directory to ``shared_root``, verify the copy, rename it into place."""
    shared_root.mkdir(parents=True, exist_ok=True)

    def fill(tmp: Path) -> None:
        for item in source.iterdir():
            with item.open("rb") as src, (tmp / item.name).open("wb") as dst:
                shutil.copyfileobj(src, dst)
                dst.flush()
                os.fsync(dst.fileno())
        verify(tmp)  # the copy, before it takes the checkpoint's name

    return atomic_directory(shared_root / source.name, fill)


def candidates(*roots: Path) -> list[Path]:
    """Checkpoint directories under ``roots``, newest step first (temporary ones excluded)."""
    found: list[tuple[int, int, Path]] = []
    for order, root in enumerate(roots):
        if not root.is_dir():
            continue
        for entry in root.iterdir():
            match = _STEP_DIR.fullmatch(entry.name)
            if match and entry.is_dir():
                found.append((-int(match[1]), order, entry))
    return [path for _, _, path in sorted(found)]


def newest_valid(*roots: Path) -> Checkpoint | None:
    """The newest checkpoint under ``roots`` that verifies; partial or corrupt ones are skipped."""
    for path in candidates(*roots):
        try:
            return verify(path)
        except CheckpointError as exc:
            log.warning("skipping checkpoint: %s", exc)
    return None


class CheckpointManager:
    """Saves locally, copies to shared storage in the background, moves ``latest`` last.

    States of one checkpoint::

        writing (.tmp dir) --rename--> local --copy+verify (thread)--> shared --> latest

    ``save(..., wait=True)`` (used for a preemption) returns only once the
    checkpoint is in shared storage and ``latest`` points at it, so the job
    may acknowledge it and be requeued onto other nodes.
    """

    def __init__(self, local: Path, shared: Path) -> None:
        self.local = local
        self.shared = shared
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    def resume(self) -> Checkpoint | None:
        """The newest valid checkpoint, shared storage preferred at equal steps."""
        return newest_valid(self.shared, self.local)

    def latest(self) -> str | None:
        """What the shared ``latest`` pointer names, if anything."""
        try:
            return (self.shared / LATEST).read_text().strip() or None
        except OSError:
            return None

    def save(self, step: int, files: Mapping[str, bytes], *, wait: bool = False) -> Path:
        """Write the checkpoint locally now; copy it to shared storage (in the background)."""
        self.wait()
        path = write_checkpoint(self.local, step, files, time.time())
        self._thread = threading.Thread(
            target=self._publish, args=(path,), name=f"ckpt-copy-{step}", daemon=True
        )
        self._thread.start()
        if wait:
            self.wait()
            if self.last_error is not None:
                raise CheckpointError(self.last_error)
        return path

    def wait(self) -> None:
        """Wait for the copy in flight, if any."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _publish(self, path: Path) -> None:
        try:
            copied = copy_verified(path, self.shared)
            with self._lock:
                write_atomic(self.shared / LATEST, copied.name + "\n")
            self.last_error = None
        except (OSError, CheckpointError) as exc:
            self.last_error = f"copy of {path.name} to {self.shared} failed: {exc}"
            log.error("%s", self.last_error)


__all__ = [
    "LATEST",
    "MANIFEST",
    "Checkpoint",
    "CheckpointError",
    "CheckpointManager",
    "candidates",
    "copy_verified",
    "newest_valid",
    "step_dir_name",
    "verify",
    "write_atomic",
    "write_checkpoint",
]
