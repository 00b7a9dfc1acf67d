"""systemd's sd_notify protocol in plain Python, so the daemon needs no libsystemd.

A service with ``Type=notify`` tells systemd it is ready, that it is alive
(``WatchdogSec=``), that it is stopping, and a one-line status for
``systemctl status``, by sending datagrams such as ``READY=1`` to the
``AF_UNIX`` socket named in ``$NOTIFY_SOCKET``: a path, or an ``@`` name in
the abstract namespace.  Without ``$NOTIFY_SOCKET`` (a shell, a test, another
init) every call is a no-op, so the daemon never needs to know how it runs.

Send failures are logged and reported as False rather than raised: a lost
notification must not take down the scheduler (systemd's watchdog, not an
exception, is what notices a daemon that stopped pinging).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


def _address(value: str) -> str | None:
    """The socket address for ``$NOTIFY_SOCKET``, or None when it is not one we can use."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    return None


def notify(state: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (``KEY=value`` lines) to systemd; True if a datagram was sent."""
    env = os.environ if env is None else env
    target = env.get("NOTIFY_SOCKET", "")
    if not target:
        return False
    address = _address(target)
    if address is None:
        log.warning("NOTIFY_SOCKET=%r is neither a path nor an @name; not notifying", target)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode("utf-8"), address)
    except OSError as exc:
        log.warning("cannot notify systemd at %s: %s", target, exc)
        return False
    return True


def ready(env: Mapping[str, str] | None = None) -> bool:
    """Startup is complete: systemd marks the unit active and starts the watchdog."""
    return notify("READY=1", env)


def watchdog(env: Mapping[str, str] | None = None) -> bool:
    """Still alive: resets the ``WatchdogSec=`` timer."""
    return notify("WATCHDOG=1", env)


def stopping(env: Mapping[str, str] | None = None) -> bool:
    """Shutdown has begun, so a slow exit is not mistaken for a hang."""
    return notify("STOPPING=1", env)


def status(text: str, env: Mapping[str, str] | None = None) -> bool:
    """Set the one-line status ``systemctl status`` shows (newlines become spaces)."""
    return notify("STATUS=" + " ".join(text.splitlines()), env)


def watchdog_interval_s(
    env: Mapping[str, str] | None = None, pid: int | None = None
) -> float | None:
    """How often to call :func:`watchdog`, in seconds, or None when no watchdog is armed.

    Half of ``$WATCHDOG_USEC``, as sd_watchdog_enabled(3) recommends, so one
    late ping is not fatal.  When ``$WATCHDOG_PID`` is set and is not this
    process (``pid``, default ours), the watchdog belongs to someone else.
    """
    env = os.environ if env is None else env
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    owner = env.get("WATCHDOG_PID", "")
    if owner:
        try:
            if int(owner) != (os.getpid() if pid is None else pid):
                return None
        except ValueError:
            return None
    return usec / 2 / 1_000_000


__all__ = ["notify", "ready", "status", "stopping", "watchdog", "watchdog_interval_s"]
