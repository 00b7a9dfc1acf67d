"""The heartbeat file: how the Slurm job-submit plugin knows slurmopt is alive and enforcing.

The daemon rewrites the file every loop; the plugin (Lua, inside slurmctld)
holds new GPU jobs for slurmopt only while the file is fresh and says
``enforce=1``.  A stale, missing or unreadable file means "slurmopt is not
there": the plugin fails open and Slurm schedules as if slurmopt did not
exist.  So the format is as small as a Lua pattern can parse (``key=value``
lines, integers and one comma-separated list; see ``docs/config.md``), the
write is atomic (a reader sees the old file or the new one, never half of
one), and the Python reader, like the plugin, never raises.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass

from slurmopt.fsutil import atomic_write

FORMAT_VERSION = 1
#: Anything larger is not a heartbeat; the reader stops there.
MAX_BYTES = 4096
#: What a managed partition name on the ``partitions=`` line may look like.
_PARTITION_NAME = re.compile(r"[^,=\s]+")


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What one heartbeat file says.

    ``managed_partitions`` is the daemon's list of partitions whose GPU jobs
    the plugin holds (``*`` means every partition); it is carried here so a
    configuration change needs no plugin reinstall.  Empty, no line is
    written and only jobs tagged by ``slurmopt submit`` are held.
    """

    time: int
    enforce: bool
    pid: int
    holder: str
    version: int = FORMAT_VERSION
    managed_partitions: tuple[str, ...] = ()
    #: Grows with every write; the plugin stamps the one it read into each job it tags,
    #: so the daemon can prove the plugin reads this very file (0: not numbered).
    seq: int = 0

    def render(self) -> str:
        """The file's text: one ``key=value`` per line, newline-terminated."""
        text = (
            f"version={self.version}\n"
            f"time={self.time}\n"
            f"enforce={1 if self.enforce else 0}\n"
            f"pid={self.pid}\n"
            f"holder={self.holder}\n"
        )
        if self.managed_partitions:
            text += f"partitions={','.join(self.managed_partitions)}\n"
        if self.seq:
            text += f"seq={self.seq}\n"
        return text


@dataclass(frozen=True, slots=True)
class HeartbeatStatus:
    """The reader's verdict: ``enforcing`` is what the plugin acts on."""

    fresh: bool
    enforcing: bool
    reason: str
    age_s: float | None = None
    heartbeat: Heartbeat | None = None


def write_heartbeat(
    path: str | os.PathLike[str],
    enforce: bool,
    now: float | None = None,
    pid: int | None = None,
    holder: str | None = None,
    managed_partitions: Sequence[str] = (),
    seq: int = 0,
) -> Heartbeat:
    """Atomically replace the heartbeat at ``path``: temp file, fsync, rename, fsync the dir.

    ``now`` defaults to the wall clock (the plugin compares with its own
    ``os.time()``, so a monotonic clock would be wrong here); ``holder``
    defaults to ``host:pid``.  The file is made world-readable, because the
    reader is slurmctld, which may run as another user.  A partition name
    the plugin could not read back (empty, or with a comma, ``=`` or
    whitespace) is a ValueError, raised before anything is written.
    """
    pid = os.getpid() if pid is None else pid
    beat = Heartbeat(
        time=int(time.time() if now is None else now),
        enforce=enforce,
        pid=pid,
        holder=f"{socket.gethostname()}:{pid}" if holder is None else holder,
        managed_partitions=tuple(managed_partitions),
        seq=seq,
    )
    if any(c in beat.holder for c in "\n\r"):
        raise ValueError(f"heartbeat holder must be one line, got {beat.holder!r}")
    for name in beat.managed_partitions:
        if not _PARTITION_NAME.fullmatch(name):
            raise ValueError(f"bad partition name for the heartbeat: {name!r}")
    atomic_write(path, beat.render(), 0o644, encoding="ascii")
    return beat


def parse_heartbeat(text: str) -> Heartbeat:
    """The heartbeat in ``text``; ValueError if it is not one.

    Unknown keys are ignored (a later version may add some); ``time`` and
    ``enforce`` are required; a ``version`` other than 1 is refused;
    ``partitions`` is optional (empty names between commas are dropped).
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"not a key=value line: {line[:40]!r}")
        fields[key.strip()] = value.strip()
    version = int(fields.get("version", str(FORMAT_VERSION)))
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported heartbeat version {version}")
    if "time" not in fields or "enforce" not in fields:
        raise ValueError("heartbeat lacks time= or enforce=")
    enforce = fields["enforce"]
    if enforce not in ("0", "1"):
        raise ValueError(f"enforce must be 0 or 1, got {enforce!r}")
    return Heartbeat(
        time=int(fields["time"]),
        enforce=enforce == "1",
        pid=int(fields.get("pid", "0")),
        holder=fields.get("holder", ""),
        version=version,
        managed_partitions=tuple(
            name.strip() for name in fields.get("partitions", "").split(",") if name.strip()
        ),
        seq=int(fields.get("seq", "0")),
    )


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """At most ``limit`` bytes of a regular file, opened without blocking.

    A FIFO or device at the path would block a plain ``open`` (and so
    whoever waits on it); it is refused as not a regular file instead.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return os.read(fd, limit)
    finally:
        os.close(fd)


def read_heartbeat(
    path: str | os.PathLike[str], now: float | None = None, max_age_s: float = 30.0
) -> HeartbeatStatus:
    """Whether the heartbeat at ``path`` is fresh and enforcing; never raises.

    Fresh means its time is within ``max_age_s`` of ``now`` (either way, so
    a clock stepped back does not make a years-old file look fresh).  A
    missing, unreadable, oversized or garbled file is not fresh and not
    enforcing: the same fail-open answer the plugin gives.
    """
    now = time.time() if now is None else now
    try:
        data = read_regular(path, MAX_BYTES + 1)
    except FileNotFoundError:
        return HeartbeatStatus(False, False, "missing")
    except OSError as exc:
        return HeartbeatStatus(False, False, f"unreadable: {exc.strerror or exc}")
    if len(data) > MAX_BYTES:
        return HeartbeatStatus(False, False, f"garbage: larger than {MAX_BYTES} bytes")
    try:
        beat = parse_heartbeat(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        return HeartbeatStatus(False, False, f"garbage: {exc}")
    age = now - beat.time
    if abs(age) > max_age_s:
        return HeartbeatStatus(False, False, f"stale: {age:.0f}s old", age, beat)
    if not beat.enforce:
        return HeartbeatStatus(True, False, "fresh, observing only", age, beat)
    return HeartbeatStatus(True, True, "fresh, enforcing", age, beat)


__all__ = [
    "FORMAT_VERSION",
    "Heartbeat",
    "HeartbeatStatus",
    "parse_heartbeat",
    "read_heartbeat",
    "read_regular",
    "write_heartbeat",
]
