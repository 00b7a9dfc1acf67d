"""sd_notify over a real AF_UNIX datagram socket, path and abstract forms."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmopt.daemon import notify


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket standing in for systemd, and its NOTIFY_SOCKET value."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    sock.settimeout(5)
    yield sock, str(path)
    sock.close()


def test_each_message_arrives(
    listener: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, address = listener
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    assert notify.ready()
    assert sock.recv(4096) == b"READY=1"
    assert notify.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notify.status("planning 3 jobs\non 2 leaves")
    assert sock.recv(4096) == b"STATUS=planning 3 jobs on 2 leaves"
    assert notify.stopping()
    assert sock.recv(4096) == b"STOPPING=1"
    assert notify.notify("READY=1\nSTATUS=up")
    assert sock.recv(4096) == b"READY=1\nSTATUS=up"


def test_env_can_be_passed_explicitly(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    assert notify.ready(env={"NOTIFY_SOCKET": address})
    assert sock.recv(4096) == b"READY=1"


def test_abstract_namespace_socket() -> None:
    name = f"slurmopt-test-{os.getpid()}-{id(object())}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        assert notify.watchdog(env={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"WATCHDOG=1"
    finally:
        sock.close()


def test_no_socket_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify.ready() is False
    assert notify.watchdog(env={"NOTIFY_SOCKET": ""}) is False


@pytest.mark.parametrize("value", ["relative.sock", "@", "vsock:2:1234"])
def test_unusable_address_is_not_an_error(value: str) -> None:
    assert notify.ready(env={"NOTIFY_SOCKET": value}) is False


def test_send_failure_is_reported_not_raised(tmp_path: Path) -> None:
    assert notify.ready(env={"NOTIFY_SOCKET": str(tmp_path / "gone.sock")}) is False


@pytest.mark.parametrize(
    ("env", "pid", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 7, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"}, 7, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "8"}, 7, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}, 7, None),
        ({"WATCHDOG_USEC": "0"}, 7, None),
        ({"WATCHDOG_USEC": "soon"}, 7, None),
        ({}, 7, None),
    ],
)
def test_watchdog_interval(env: dict[str, str], pid: int, expected: float | None) -> None:
    assert notify.watchdog_interval_s(env, pid=pid) == expected


def test_watchdog_pid_defaults_to_this_process() -> None:
    env = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    assert notify.watchdog_interval_s(env) == 1.0
