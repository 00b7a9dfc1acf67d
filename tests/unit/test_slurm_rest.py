"""RestSlurmClient against recorded slurmrestd-shaped answers, through httpx's mock transport."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from slurmopt.errors import ConfigError, SlurmResponseError, SlurmUnavailable, UsageError
from slurmopt.slurm import connect
from slurmopt.slurm.cli import CliSlurmClient, CommandResult, Env
from slurmopt.slurm.rest import RestSlurmClient

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm-json"

# slurmrestd v0.0.38 serves the same job and node objects as 22.05's squeue/sinfo --json.
V0038_PARTITIONS = {
    "meta": {"Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}, "release": "22.05.8"}},
    "errors": [],
    "partitions": [{"flags": ["default"], "name": "gpu", "nodes": "gpu[001-008]", "state": "UP",
                    "max_time_limit": -1, "maximum_nodes_per_job": -1}],
}


def fake_slurmrestd(seen: list[httpx.Request], overrides: dict[str, httpx.Response] | None = None
                    ) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if overrides and path in overrides:
            return overrides[path]
        if path == "/slurm/v0.0.38/jobs":
            return httpx.Response(200, text=(FIXTURES / "22.05/squeue.json").read_text())
        if path == "/slurm/v0.0.38/nodes":
            return httpx.Response(200, text=(FIXTURES / "22.05/sinfo.json").read_text())
        if path == "/slurm/v0.0.38/partitions":
            return httpx.Response(200, json=V0038_PARTITIONS)
        return httpx.Response(404, text="Unable find requested URL.")

    return httpx.MockTransport(handler)


def test_jwt_snapshot_sends_user_and_token() -> None:
    seen: list[httpx.Request] = []
    client = RestSlurmClient("http://127.0.0.1:6820", token="SLURM_JWT=abc", user="alice",
                             transport=fake_slurmrestd(seen))
    snap = client.snapshot()
    assert [r.url.path for r in seen] == [
        "/slurm/v0.0.38/jobs", "/slurm/v0.0.38/nodes", "/slurm/v0.0.38/partitions"]
    assert seen[0].headers["X-SLURM-USER-NAME"] == "alice"
    assert seen[0].headers["X-SLURM-USER-TOKEN"] == "abc"
    assert snap.source == "rest" and snap.slurm_version == "22.05.8"
    assert dict(snap.jobs[4].gpu_indices) == {"gpu003": (3, 4)}
    assert snap.nodes["gpu003"].alloc_gpu_indices == frozenset(range(5))
    assert snap.partitions["gpu"].default and snap.partitions["gpu"].max_time_s is None


def test_token_defaults_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JWT", "from-env")
    seen: list[httpx.Request] = []
    RestSlurmClient("http://h:1", user="u", transport=fake_slurmrestd(seen)).snapshot()
    assert seen[0].headers["X-SLURM-USER-TOKEN"] == "from-env"


def test_tcp_without_token_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JWT", raising=False)
    with pytest.raises(ConfigError, match="needs a JWT"):
        RestSlurmClient("http://127.0.0.1:6820")


def test_unix_socket_sends_no_token() -> None:
    seen: list[httpx.Request] = []
    RestSlurmClient("unix:/run/slurmrestd.sock", transport=fake_slurmrestd(seen)).snapshot()
    assert "X-SLURM-USER-TOKEN" not in seen[0].headers


def test_missing_socket_is_unavailable(tmp_path: Path) -> None:
    client = RestSlurmClient(f"unix:{tmp_path}/nothing.sock", timeout=2)
    with pytest.raises(SlurmUnavailable, match="cannot connect"):
        client.snapshot()


def test_refused_tcp_is_unavailable() -> None:
    client = RestSlurmClient("http://127.0.0.1:9", token="t", timeout=2)
    with pytest.raises(SlurmUnavailable, match="cannot connect"):
        client.snapshot()


def test_authentication_failure_is_unavailable() -> None:
    seen: list[httpx.Request] = []
    bad = {"/slurm/v0.0.38/jobs": httpx.Response(401, text="Authentication failure")}
    client = RestSlurmClient("http://h:1", token="t", transport=fake_slurmrestd(seen, bad))
    with pytest.raises(SlurmUnavailable, match="authentication refused .HTTP 401"):
        client.snapshot()


def test_controller_down_behind_slurmrestd_is_unavailable() -> None:
    body = {"errors": [{"error": "Unable to contact slurm controller (connect failure)"}],
            "jobs": []}
    bad = {"/slurm/v0.0.38/jobs": httpx.Response(500, text=json.dumps(body))}
    client = RestSlurmClient("unix:/x.sock", transport=fake_slurmrestd([], bad))
    with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller"):
        client.snapshot()


def test_garbage_nodes_fail_the_whole_snapshot() -> None:
    bad = {"/slurm/v0.0.38/nodes": httpx.Response(200, text='{"nodes": [{"name": "gpu001"}]}')}
    client = RestSlurmClient("unix:/x.sock", transport=fake_slurmrestd([], bad))
    with pytest.raises(SlurmResponseError, match="node gpu001: missing required field 'state'"):
        client.snapshot()


def test_unserved_api_version_is_a_response_error() -> None:
    client = RestSlurmClient("unix:/x.sock", api_version="v0.0.42",
                             transport=fake_slurmrestd([]))
    with pytest.raises(SlurmResponseError, match="HTTP 404"):
        client.snapshot()


def test_newer_api_paths_parse_the_same() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        name = request.url.path.rsplit("/", 1)[-1]
        files = {"jobs": "squeue.json", "nodes": "scontrol_show_nodes.json",
                 "partitions": "scontrol_show_partitions.json"}
        return httpx.Response(200, text=(FIXTURES / "26.05" / files[name]).read_text())

    client = RestSlurmClient("unix:/x.sock", api_version="v0.0.45",
                             transport=httpx.MockTransport(handler))
    snap = client.snapshot()
    assert seen[0].url.path == "/slurm/v0.0.45/jobs"
    assert snap.slurm_version == "26.05.5" and snap.jobs[3].gpu_indices["gpu003"] == (0, 1, 2)


def test_v0042_takes_the_default_partition_from_scontrol() -> None:
    """24.11's /partitions has no flags; the default comes from ``scontrol show partition -o``."""
    asked: list[tuple[str, ...]] = []

    def runner(argv: Sequence[str], stdin: str | None, timeout: float, env: Env = None, /
               ) -> CommandResult:
        asked.append(tuple(argv))
        name = {"-o": "scontrol_show_partition_o.txt", "--version": "sinfo_version.txt"}[argv[-1]]
        return CommandResult(0, (FIXTURES / "24.11" / name).read_text(), "")

    def handler(request: httpx.Request) -> httpx.Response:
        name = request.url.path.rsplit("/", 1)[-1]
        files = {"jobs": "squeue.json", "nodes": "scontrol_show_nodes.json",
                 "partitions": "scontrol_show_partitions.json"}
        return httpx.Response(200, text=(FIXTURES / "24.11" / files[name]).read_text())

    client = RestSlurmClient("unix:/x.sock", api_version="v0.0.42",
                             cli=CliSlurmClient(runner=runner),
                             transport=httpx.MockTransport(handler))
    snap = client.snapshot()
    assert snap.partitions["gpu"].default and snap.slurm_version == "24.11.5"
    assert client.slurm_version == "24.11.5"
    assert asked == [("scontrol", "show", "partition", "-o"), ("sinfo", "--version")]


def test_connect_rest_needs_an_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURMOPT_REST_URL", raising=False)
    with pytest.raises(ConfigError, match="SLURMOPT_REST_URL"):
        connect("rest")


def test_connect_rest_reads_the_address_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMOPT_REST_URL", "unix:/tmp/x.sock")
    client = connect("rest", transport=fake_slurmrestd([]))
    assert client.name == "rest" and len(client.snapshot().nodes) == 8


def test_connect_unknown_backend() -> None:
    with pytest.raises(UsageError, match="unknown Slurm backend 'slurmdb'"):
        connect("slurmdb")


@pytest.mark.parametrize("url", ["127.0.0.1:6820", "unix:", "ftp://x"])
def test_bad_addresses(url: str) -> None:
    with pytest.raises(ConfigError):
        RestSlurmClient(url, token="t")
