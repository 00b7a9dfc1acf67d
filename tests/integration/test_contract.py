"""Every SlurmClient implementation reports the same, known state of the real sandbox.

Known jobs are submitted with plain sbatch (pinned where placement matters),
one idle and one busy node are drained, and each implementation's snapshot
is compared with what was set up, not merely with the other implementations.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmopt.errors import SlurmCommandError, SlurmUnavailable
from slurmopt.model import ClusterSnapshot, JobState, NodeState
from slurmopt.slurm import connect
from slurmopt.slurm.base import SlurmClient
from slurmopt.slurm.cli import CliSlurmClient
from slurmopt.slurm.parse import REST_API_VERSIONS
from slurmopt.slurm.pyslurm_client import load_pyslurm
from slurmopt.slurm.rest import RestSlurmClient
from tests.sandbox import SlurmSandbox, env_file

pytestmark = pytest.mark.slurm

IMPLEMENTATIONS = ["cli", "rest-unix", "rest-jwt", "pyslurm"]


def make_client(kind: str, sandbox: SlurmSandbox) -> SlurmClient:
    """The implementation under test, or a skip saying why it cannot run here.

    Every client first shows that it reaches the sandbox's own Slurm release
    (never, say, the host's 22.05 when the tests target a chroot's 24.11).
    """
    if kind == "cli":
        cli = connect("cli", slurm_conf=sandbox.conf)
        assert isinstance(cli, CliSlurmClient)
        sandbox.assert_version(cli.slurm_version)
        return cli
    if kind.startswith("rest"):
        env = env_file(sandbox.conf)
        key = "SLURMOPT_RESTD_SOCKET" if kind == "rest-unix" else "SLURMOPT_RESTD_URL"
        if key not in env:
            pytest.skip(f"the sandbox was started without --restd ({key} not in env.sh)")
        cli = CliSlurmClient(slurm_conf=sandbox.conf)
        if kind == "rest-unix":
            rest = RestSlurmClient(f"unix:{env[key]}", cli=cli)
        else:
            token = sandbox.run("scontrol", "token", "lifespan=600").strip()
            rest = RestSlurmClient(env[key], token=token, user="root", cli=cli)
        sandbox.assert_version(rest.slurm_version)
        return rest
    try:
        load_pyslurm()
    except SlurmUnavailable as exc:
        pytest.skip(str(exc))
    return connect("pyslurm", cli=CliSlurmClient(slurm_conf=sandbox.conf))


@dataclass
class Scenario:
    twonode: int
    gpu3: int
    gpn2: int
    held: int
    too_big: int


@pytest.fixture
def scenario(slurm: SlurmSandbox) -> Iterator[Scenario]:
    """The reference job mix on gpu[001-003], gpu003 drained busy and gpu032 drained idle."""
    sc = Scenario(
        twonode=slurm.sbatch("-J", "twonode", "-N2", "--gres=gpu:8", "-t", "60",
                             "--nodelist=gpu[001-002]", "--comment=two-node comment"),
        gpu3=slurm.sbatch("-J", "onenode-gpu3", "-N1", "--gres=gpu:3", "--nodelist=gpu003"),
        gpn2=slurm.sbatch("-J", "gpn2", "-N1", "--gpus-per-node=2", "-t", "1-0",
                          "--nodelist=gpu003"),
        held=slurm.sbatch("-J", "held", "-N1", "--gres=gpu:8", "-t", "30", "--hold"),
        too_big=slurm.sbatch("-J", "pending", "-N32", "--gres=gpu:8", "-t", "10"),
    )
    for job in (sc.twonode, sc.gpu3, sc.gpn2):
        slurm.wait_state(job, "RUNNING")
    slurm.run("scontrol", "update", "NodeName=gpu003", "State=DRAIN", "Reason=drain while running")
    slurm.run("scontrol", "update", "NodeName=gpu032", "State=DRAIN", "Reason=maint: bad gpu")
    # A pending job has no reason until a scheduling pass has looked at it (26.05 can take
    # a moment under load): the snapshot must not race that pass.
    deadline = time.monotonic() + 30
    while slurm.job_field(sc.too_big, "%r") in ("", "None") and time.monotonic() < deadline:
        time.sleep(0.3)
    yield sc


def assert_known_state(snap: ClusterSnapshot, sc: Scenario, sandbox: SlurmSandbox) -> None:
    sandbox.assert_version(snap.slurm_version)
    # squeue --json also lists jobs that ended within MinJobAge (the fixture's cancelled ones).
    live = {i for i, j in snap.jobs.items() if j.is_active or j.is_pending}
    assert live == {sc.twonode, sc.gpu3, sc.gpn2, sc.held, sc.too_big}
    two, g3, g2 = snap.jobs[sc.twonode], snap.jobs[sc.gpu3], snap.jobs[sc.gpn2]
    held, big = snap.jobs[sc.held], snap.jobs[sc.too_big]

    assert (two.state, two.nodes, two.node_count, two.gpus_per_node, two.gpus) == (
        JobState.RUNNING, ("gpu001", "gpu002"), 2, 8, 16)
    assert dict(two.gpu_indices) == {"gpu001": tuple(range(8)), "gpu002": tuple(range(8))}
    assert (two.time_limit_s, two.comment, two.name, two.partition, two.user) == (
        3600, "two-node comment", "twonode", "gpu", "root")
    assert (g3.state, g3.nodes, g3.gpus_per_node, g3.time_limit_s) == (
        JobState.RUNNING, ("gpu003",), 3, None)
    assert (g2.state, g2.nodes, g2.gpus_per_node, g2.time_limit_s) == (
        JobState.RUNNING, ("gpu003",), 2, 86400)
    # The two jobs on gpu003 hold five distinct GPUs between them.
    assert len(g3.gpu_indices["gpu003"]) == 3 and len(g2.gpu_indices["gpu003"]) == 2
    assert set(g3.gpu_indices["gpu003"]) | set(g2.gpu_indices["gpu003"]) == set(range(5))
    assert (held.state, held.held, held.reason, held.priority, held.gpus_per_node) == (
        JobState.PENDING, True, "JobHeldUser", 0, 8)
    assert (held.nodes, held.time_limit_s) == ((), 1800)
    assert (big.state, big.held, big.node_count, big.gpus_per_node, big.nodes) == (
        JobState.PENDING, False, 32, 8, ())
    assert big.reason != "" and big.time_limit_s == 600

    assert sorted(snap.nodes) == [f"gpu{i:03d}" for i in range(1, 33)]
    for name, node in snap.nodes.items():
        assert node.gpus_total == 8 and node.partitions == ("gpu",), name
    for name in ("gpu001", "gpu002"):
        node = snap.nodes[name]
        assert (node.state, node.gpus_alloc, node.alloc_gpu_indices) == (
            NodeState.MIXED, 8, frozenset(range(8)))
        assert node.available
    busy = snap.nodes["gpu003"]
    assert (busy.state, busy.gpus_alloc, busy.alloc_gpu_indices, busy.reason) == (
        NodeState.MIXED, 5, frozenset(range(5)), "drain while running")
    assert "DRAIN" in busy.flags and not busy.available
    idle_drained = snap.nodes["gpu032"]
    assert (idle_drained.state, idle_drained.gpus_alloc, idle_drained.reason) == (
        NodeState.IDLE, 0, "maint: bad gpu")
    assert "DRAIN" in idle_drained.flags and not idle_drained.available
    for i in range(4, 32):
        node = snap.nodes[f"gpu{i:03d}"]
        assert (node.state, node.gpus_alloc, node.alloc_gpu_indices) == (
            NodeState.IDLE, 0, frozenset())
        assert node.available, node.name
    assert {n for n, node in snap.nodes.items() if not node.available} == {"gpu003", "gpu032"}

    part = snap.partitions["gpu"]
    assert list(snap.partitions) == ["gpu"]
    assert (part.default, part.state, part.max_time_s, len(part.nodes)) == (True, "UP", None, 32)


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_snapshot_equals_the_known_state(kind: str, slurm: SlurmSandbox,
                                         scenario: Scenario) -> None:
    client = make_client(kind, slurm)
    snap = client.snapshot()
    assert_known_state(snap, scenario, slurm)
    assert snap.source == kind.split("-")[0]


#: The newest openapi version each Slurm release's slurmrestd serves (all of them slurmopt reads).
NEWEST_API = {"22.05": "v0.0.38", "24.11": "v0.0.42", "26.05": "v0.0.45"}


@pytest.mark.parametrize("kind", ["rest-unix", "rest-jwt"])
def test_rest_negotiates_the_newest_version_it_reads(kind: str, slurm: SlurmSandbox) -> None:
    client = make_client(kind, slurm)
    assert isinstance(client, RestSlurmClient) and client.api_version is None
    snap = client.snapshot()
    slurm.assert_version(snap.slurm_version)  # from the documents' meta, not the commands
    # What slurmrestd lists agrees with the sandbox's own reading of /openapi/v3 (env.sh).
    assert client.served[-1] == env_file(slurm.conf)["SLURMOPT_RESTD_API"]
    common = [v for v in client.served if v in REST_API_VERSIONS]
    assert client.api_version == common[-1] == NEWEST_API[slurm.slurm_version[:5]]
    # The oldest served, pinned, reads the same jobs.
    token = slurm.run("scontrol", "token", "lifespan=600") if kind == "rest-jwt" else None
    pinned = RestSlurmClient(client.url, api_version=client.served[0], user="root",
                             token=token, cli=client.cli)
    assert pinned.snapshot().jobs.keys() == snap.jobs.keys()
    assert pinned.api_version == client.served[0]


def test_rest_rereads_an_expired_token(slurm: SlurmSandbox, tmp_path: Path) -> None:
    """A short-lived JWT in a file expires; the file renewed, the next snapshot succeeds."""
    url = env_file(slurm.conf).get("SLURMOPT_RESTD_URL")
    assert url, "the sandbox was started without --restd (SLURMOPT_RESTD_URL not in env.sh)"
    lifespan = 10
    token = tmp_path / "jwt"
    token.write_text(slurm.run("scontrol", "token", f"lifespan={lifespan}"))
    issued = time.time()
    client = RestSlurmClient(url, user="root", token_file=str(token),
                             cli=CliSlurmClient(slurm_conf=slurm.conf))
    client.snapshot()
    assert client.token_rereads == 0
    time.sleep(max(0.0, issued + lifespan + 2 - time.time()))
    with pytest.raises(SlurmUnavailable, match=f"JWT refused .*rest_token_file {token} "
                       "still holds the same token"):
        client.snapshot()
    assert client.token_rereads == 1
    token.write_text(slurm.run("scontrol", "token", "lifespan=600"))
    snap = client.snapshot()
    assert client.token_rereads == 2  # exactly one re-read for this snapshot
    slurm.assert_version(snap.slurm_version)
    assert len(snap.nodes) == 32


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_topology_text(kind: str, slurm: SlurmSandbox) -> None:
    text = make_client(kind, slurm).topology_text()
    assert text is not None
    assert "SwitchName=leaf1" in text and "Nodes=gpu[001-008]" in text
    assert "SwitchName=spine" in text and "Switches=leaf[1-4]" in text


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_writes_hold_pin_release_and_comment(kind: str, slurm: SlurmSandbox) -> None:
    client = make_client(kind, slurm)
    # Submitted under its owner's hold, as the job-submit plugin leaves a managed job: on an
    # idle cluster 24.11 and later start a free job at once, before any hold could reach it.
    job = client.submit(["-J", "pinme", "-N1", "--gres=gpu:2", "-o", "/dev/null", "-H",
                         "-D", str(slurm.workdir), "--wrap", "sleep 600"])
    client.hold(job)
    assert client.snapshot().jobs[job].held
    client.pin(job, ["gpu010"])
    client.set_comment(job, "placed by slurmopt", admin=False)
    client.release(job)
    slurm.wait_state(job, "RUNNING")
    got = client.snapshot().jobs[job]
    assert (got.nodes, got.comment, got.held, got.gpus_per_node) == (
        ("gpu010",), "placed by slurmopt", False, 2)
    with pytest.raises(SlurmCommandError) as info:
        client.hold(999999)
    assert "Invalid job id" in info.value.stderr


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_elastic_start_sets_the_node_count_then_pins(kind: str, slurm: SlurmSandbox) -> None:
    """What the actuator does for an elastic job started on fewer nodes than it asked for."""
    client = make_client(kind, slurm)
    job = client.submit(["-J", "elastic", "-N4", "--gres=gpu:8", "-t", "10", "-o", "/dev/null",
                         "-H", "-D", str(slurm.workdir), "--wrap", "sleep 600"])
    client.hold(job)
    client.shrink(job, 2)
    client.pin(job, ["gpu020", "gpu021"])
    client.release(job)
    slurm.wait_state(job, "RUNNING")
    got = client.snapshot().jobs[job]
    assert (got.nodes, got.node_count, got.gpus_per_node) == (("gpu020", "gpu021"), 2, 8)


def _unreachable_conf(slurm: SlurmSandbox, tmp_path: Path) -> str:
    """A copy of the sandbox config pointing at a port nothing listens on."""
    etc = tmp_path / "etc"
    shutil.copytree(Path(slurm.conf).parent, etc)
    conf = etc / "slurm.conf"
    text = re.sub(r"^SlurmctldPort=.*$", "SlurmctldPort=6999", conf.read_text(), flags=re.M)
    conf.write_text(text + "\nMessageTimeout=2\nTCPTimeout=1\n")
    return str(conf)


def test_unreachable_controller_is_unavailable_quickly(slurm: SlurmSandbox,
                                                       tmp_path: Path) -> None:
    client = CliSlurmClient(slurm_conf=_unreachable_conf(slurm, tmp_path))
    slurm.assert_version(client.slurm_version)  # the commands answer without a controller
    started = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="slurmctld unreachable"):
        client.snapshot()
    assert time.monotonic() - started < 20
    with pytest.raises(SlurmUnavailable):
        client.topology_text()


@pytest.mark.parametrize("make", [
    lambda tmp: RestSlurmClient(f"unix:{tmp}/no-such.sock"),
    lambda tmp: RestSlurmClient("http://127.0.0.1:9", token="t"),
], ids=["bad-socket", "refused-port"])
def test_bad_rest_address_is_unavailable(make: Callable[[Path], RestSlurmClient],
                                         slurm: SlurmSandbox, tmp_path: Path) -> None:
    with pytest.raises(SlurmUnavailable, match="cannot connect"):
        make(tmp_path).snapshot()
