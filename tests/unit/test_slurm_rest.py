"""RestSlurmClient against recorded slurmrestd-shaped answers, through httpx's mock transport."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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


def openapi(*versions: str) -> dict[str, object]:
    """slurmrestd's ``/openapi/v3`` document, reduced to the paths that name versions."""
    paths: dict[str, object] = {
        f"/slurm/{v}/{e}": {"get": {}} for v in versions for e in ("jobs", "ping")}
    return {"openapi": "3.0.2", "info": {"version": "Slurm-x"}, "paths": paths}


def fake_slurmrestd(seen: list[httpx.Request], overrides: dict[str, httpx.Response] | None = None
                    ) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if overrides and path in overrides:
            return overrides[path]
        if path == "/openapi/v3":
            return httpx.Response(200, json=openapi("v0.0.38"))
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
    assert [r.url.path for r in seen] == ["/openapi/v3",
        "/slurm/v0.0.38/jobs", "/slurm/v0.0.38/nodes", "/slurm/v0.0.38/partitions"]
    assert seen[1].headers["X-SLURM-USER-NAME"] == "alice"
    assert seen[1].headers["X-SLURM-USER-TOKEN"] == "abc"
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


# What slurmrestd answers when slurmctld refuses an expired JWT, as recorded on each release.
EXPIRED = {
    "22.05": (500, {"errors": [{"description": "Failed while looking for jobs",
                                "error_number": -1, "error": "Unspecified error",
                                "source": "slurm_load_jobs"}], "jobs": []}),
    "24.11": (511, {"errors": [{"description": "Unable to query jobs", "error_number": 1007,
                                "error": "Protocol authentication error",
                                "source": "slurm_load_jobs()"}], "warnings": []}),
}


def jwt_slurmrestd(seen: list[httpx.Request], valid: set[str],
                   release: str = "24.11") -> httpx.MockTransport:
    """The 22.05 fake behind a JWT check: tokens outside ``valid`` get ``release``'s refusal."""
    inner = fake_slurmrestd([])

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.startswith("/slurm/") and (
                request.headers["X-SLURM-USER-TOKEN"] not in valid):
            status, body = EXPIRED[release]
            return httpx.Response(status, json=body)
        return inner.handle_request(request)

    return httpx.MockTransport(handler)


def file_token_client(token: Path, first: str, valid: set[str], release: str
                      ) -> tuple[RestSlurmClient, list[httpx.Request]]:
    """A JWT client reading ``token`` (holding ``first``), and the requests it sends."""
    token.write_text(first)
    seen: list[httpx.Request] = []
    client = RestSlurmClient("http://h:1", user="u", token_file=str(token),
                             transport=jwt_slurmrestd(seen, valid, release))
    return client, seen


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_an_expired_token_is_read_again_once_then_the_request_succeeds(
        release: str, tmp_path: Path) -> None:
    token = tmp_path / "jwt"
    valid = {"old"}
    client, seen = file_token_client(token, "SLURM_JWT=old\n", valid, release)
    client.snapshot()
    assert client.token_rereads == 0
    token.write_text("SLURM_JWT=new\n")  # renewed by the site before the old one expired
    valid.clear()  # the old one expires
    valid.add("new")
    seen.clear()
    snap = client.snapshot()
    assert [(r.url.path, r.headers["X-SLURM-USER-TOKEN"]) for r in seen] == [
        ("/slurm/v0.0.38/jobs", "old"), ("/slurm/v0.0.38/jobs", "new"),
        ("/slurm/v0.0.38/nodes", "new"), ("/slurm/v0.0.38/partitions", "new")]
    assert client.token_rereads == 1 and len(snap.nodes) == 8


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_a_token_still_refused_after_one_reread_is_one_clear_error(
        release: str, tmp_path: Path) -> None:
    token = tmp_path / "jwt"
    client, seen = file_token_client(token, "new", set(), release)
    client.served, client.api_version = ("v0.0.38",), "v0.0.38"  # negotiated before
    token.write_text("newer")
    with pytest.raises(SlurmUnavailable) as info:
        client.snapshot()
    assert [r.headers["X-SLURM-USER-TOKEN"] for r in seen] == ["new", "newer"]
    assert client.token_rereads == 1
    msg = str(info.value)
    assert msg.startswith("slurmrestd http://h:1/slurm/v0.0.38/jobs: JWT refused (HTTP ")
    assert msg.endswith(f"again with a fresh token from rest_token_file {token}")
    assert "\n" not in msg


def test_an_unchanged_token_is_not_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JWT", "stale")
    seen: list[httpx.Request] = []
    client = RestSlurmClient("http://h:1", user="u", transport=jwt_slurmrestd(seen, set()))
    with pytest.raises(SlurmUnavailable, match=r"Protocol authentication error\); "
                       r"\$SLURM_JWT still holds the same token$"):
        client.snapshot()
    assert [r.url.path for r in seen] == ["/openapi/v3", "/slurm/v0.0.38/jobs"]


def test_a_token_given_as_text_is_never_read_again() -> None:
    seen: list[httpx.Request] = []
    client = RestSlurmClient("http://h:1", token="stale", user="u",
                             transport=jwt_slurmrestd(seen, set()))
    with pytest.raises(SlurmUnavailable, match="JWT refused"):
        client.snapshot()
    assert client.token_rereads == 0 and len(seen) == 2


def test_a_token_command_runs_again_when_the_token_expires() -> None:
    asked: list[tuple[str, ...]] = []

    def runner(argv: Sequence[str], stdin: str | None, timeout: float, env: Env = None, /
               ) -> CommandResult:
        asked.append(tuple(argv))
        return CommandResult(0, f"SLURM_JWT=t{len(asked)}\n", "")

    seen: list[httpx.Request] = []
    client = RestSlurmClient("http://h:1", user="u", cli=CliSlurmClient(runner=runner),
                             token_command="scontrol token lifespan=3600",
                             transport=jwt_slurmrestd(seen, {"t2"}))
    client.snapshot()
    assert asked == [("scontrol", "token", "lifespan=3600")] * 2
    assert [r.headers["X-SLURM-USER-TOKEN"] for r in seen[1:3]] == ["t1", "t2"]


def test_a_failing_token_command_is_one_line(tmp_path: Path) -> None:
    def runner(argv: Sequence[str], stdin: str | None, timeout: float, env: Env = None, /
               ) -> CommandResult:
        return CommandResult(1, "", "scontrol: error: JWT authentication: disabled\nmore\n")

    with pytest.raises(ConfigError, match="needs a JWT: rest_token_command 'scontrol token' "
                       "failed: scontrol: error: JWT authentication: disabled "):
        RestSlurmClient("http://h:1", cli=CliSlurmClient(runner=runner),
                        token_command="scontrol token")
    with pytest.raises(ConfigError, match="give one of token_file or token_command, not both"):
        RestSlurmClient("http://h:1", token_file="/f", token_command="c")
    with pytest.raises(ConfigError, match=f"cannot read rest_token_file {tmp_path}/none"):
        RestSlurmClient("http://h:1", token_file=str(tmp_path / "none"))


@pytest.mark.parametrize("body", [
    {"errors": [{"error": "Unable to contact slurm controller (connect failure)",
                 "error_number": 1001}]},
    {"errors": {"odd": 1}},
    {"errors": []},
])
def test_other_server_errors_do_not_read_the_token_again(
        body: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JWT", "t")
    seen: list[httpx.Request] = []
    bad = {"/slurm/v0.0.38/jobs": httpx.Response(500, json=body)}
    client = RestSlurmClient("http://h:1", user="u", transport=fake_slurmrestd(seen, bad))
    with pytest.raises((SlurmUnavailable, SlurmResponseError)):
        client.snapshot()
    assert client.token_rereads == 0 and len(seen) == 2


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


def release_handler(release: str, seen: list[str], served: Sequence[str],
                    alt: Mapping[str, str] | None = None) -> httpx.MockTransport:
    """A slurmrestd of ``release`` listing ``served``; ``alt`` maps a version to its captures'."""
    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        seen.append(path)
        if path == "/openapi/v3":
            return httpx.Response(200, json=openapi(*served))
        version, name = path.split("/")[2:4]
        files = {"jobs": "squeue.json", "nodes": "scontrol_show_nodes.json",
                 "partitions": "scontrol_show_partitions.json"}
        if alt and version in alt and name != "partitions":
            files = {"jobs": f"squeue.{version}.json", "nodes": f"sinfo.{version}.json"}
            return httpx.Response(200, text=(FIXTURES / alt[version] / files[name]).read_text())
        return httpx.Response(200, text=(FIXTURES / release / files[name]).read_text())

    return httpx.MockTransport(handler)


SID_SERVES = ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")


def test_negotiation_takes_the_newest_version_both_sides_speak() -> None:
    seen: list[str] = []
    # A newer slurmrestd also offers a version slurmopt cannot read yet.
    client = RestSlurmClient("unix:/x.sock",
                             transport=release_handler("26.05", seen, (*SID_SERVES, "v0.0.46")))
    assert client.api_version is None
    snap = client.snapshot()
    client.snapshot()
    assert client.api_version == "v0.0.45"
    assert client.served == (*SID_SERVES, "v0.0.46")
    assert seen.count("/openapi/v3") == 1  # asked once per client
    assert seen[1:4] == ["/slurm/v0.0.45/jobs", "/slurm/v0.0.45/nodes",
                         "/slurm/v0.0.45/partitions"]
    assert snap.slurm_version == "26.05.5" and snap.jobs[3].gpu_indices["gpu003"] == (0, 1, 2)


def test_a_pinned_version_is_used_when_served() -> None:
    seen: list[str] = []
    client = RestSlurmClient("unix:/x.sock", api_version="v0.0.43",
                             transport=release_handler("26.05", seen, SID_SERVES))
    client.snapshot()
    assert client.api_version == "v0.0.43"
    assert seen == ["/openapi/v3", "/slurm/v0.0.43/jobs", "/slurm/v0.0.43/nodes",
                    "/slurm/v0.0.43/partitions"]


def test_a_pinned_version_the_server_lacks_names_both_lists() -> None:
    client = RestSlurmClient("unix:/x.sock", api_version="v0.0.42",
                             transport=fake_slurmrestd([]))
    with pytest.raises(ConfigError) as info:
        client.snapshot()
    msg = str(info.value)
    assert "rest_api v0.0.42 is not served" in msg and "serves v0.0.38;" in msg
    assert "slurmopt reads v0.0.38, v0.0.40," in msg and "\n" not in msg


def test_a_pin_slurmopt_cannot_read_is_refused_at_once() -> None:
    with pytest.raises(ConfigError, match="'v0.0.39' is not one slurmopt reads"):
        RestSlurmClient("unix:/x.sock", api_version="v0.0.39")


def test_no_version_in_common_is_a_response_error() -> None:
    client = RestSlurmClient("unix:/x.sock",
                             transport=release_handler("26.05", [], ("v0.0.39", "v0.0.99")))
    with pytest.raises(SlurmResponseError, match="no openapi version in common: .*"
                       "serves v0.0.39, v0.0.99; slurmopt reads v0.0.38"):
        client.snapshot()


@pytest.mark.parametrize(("release", "versions", "alt"), [
    ("24.11", ("v0.0.40", "v0.0.41", "v0.0.42"), "24.11/alt_data_parser"),
    ("26.05", SID_SERVES, "26.05/alt_data_parser"),
])
def test_every_served_version_gives_the_same_snapshot(release: str, versions: Sequence[str],
                                                      alt: str) -> None:
    def runner(argv: Sequence[str], stdin: str | None, timeout: float, env: Env = None, /
               ) -> CommandResult:
        name = {"-o": "scontrol_show_partition_o.txt", "--version": "sinfo_version.txt"}[argv[-1]]
        return CommandResult(0, (FIXTURES / release / name).read_text(), "")

    snaps = []
    for version in versions:
        seen: list[str] = []
        transport = release_handler(release, seen, versions, {v: alt for v in versions[:-1]})
        client = RestSlurmClient("unix:/x.sock", api_version=version,
                                 cli=CliSlurmClient(runner=runner), transport=transport)
        snaps.append(client.snapshot())
        assert seen[1] == f"/slurm/{version}/jobs"
    for snap in snaps[1:]:
        assert (snap.jobs, snap.nodes, snap.partitions) == (
            snaps[0].jobs, snaps[0].nodes, snaps[0].partitions)
    assert snaps[0].partitions["gpu"].default and len(snaps[0].jobs) >= 5


def test_v0042_takes_the_default_partition_from_scontrol() -> None:
    """24.11's /partitions has no flags; the default comes from ``scontrol show partition -o``."""
    asked: list[tuple[str, ...]] = []

    def runner(argv: Sequence[str], stdin: str | None, timeout: float, env: Env = None, /
               ) -> CommandResult:
        asked.append(tuple(argv))
        name = {"-o": "scontrol_show_partition_o.txt", "--version": "sinfo_version.txt"}[argv[-1]]
        return CommandResult(0, (FIXTURES / "24.11" / name).read_text(), "")

    client = RestSlurmClient("unix:/x.sock", cli=CliSlurmClient(runner=runner),
                             transport=release_handler("24.11", [], ("v0.0.40", "v0.0.42")))
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
