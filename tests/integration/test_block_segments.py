"""slurmopt's NVLink-domain rule against real Slurm's topology/block (``--segment``).

These run on a trixie (Slurm 24.11) sandbox started with ``scripts/slurm-sandbox up --release
trixie --topology tests/fixtures/fabric/block-sandbox.conf --port-base 7417 --dir DIR``
(4 base blocks of 4 nodes, ``cn01``-``cn16``), with ``SLURMOPT_SANDBOX_DIR=DIR`` and
``SLURMOPT_SANDBOX_RELEASE=trixie``; they are marked ``block`` so runs against other sandboxes
leave them out.  slurmopt gives a topology/block fabric one NVLink domain per base block, so:

* Plain ``sbatch -N N --segment S`` jobs on partly occupied blocks: Slurm places every segment
  inside one block, and starts a job exactly when :func:`choose_domains` finds domains for it.
  Without ``--segment`` (N no larger than a block) the job lies in one block, as tight (fewest
  free nodes) as the one ``choose_domains`` picks; ties break differently (Slurm takes the last
  block, slurmopt the first name), so the blocks themselves are not compared.
* Required nodes (how slurmopt's daemon pins a job: ``scontrol update NodeList=``): Slurm runs
  the job exactly when :func:`required_domain` accepts the nodes; nodes over two blocks leave
  a plain job pending for ever (``BadConstraints``), and segments with required nodes are
  refused at submission.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from slurmopt.fabric import Fabric
from slurmopt.hostlist import expand
from slurmopt.policy.domains import choose_domains, required_domain
from tests.sandbox import SlurmSandbox, fixture_fabric

pytestmark = [pytest.mark.slurm, pytest.mark.block]

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "fabric" / "block-sandbox.conf"
#: How long a job that Slurm cannot place is watched before it counts as not started: two of
#: the sandbox's scheduling passes (sched_interval and bf_interval are 5 s).
SETTLE_S = 11.0

#: (busy nodes, nodes, segment or None): idle blocks, one partly used block, every block partly
#: used, blocks with exactly a segment free, and asks no block arrangement can meet.
PLACEMENTS = [
    ("", 4, 2),
    ("", 6, 3),
    ("cn01", 4, 2),
    ("cn01", 2, None),
    ("cn01,cn05", 8, 4),
    ("cn[01-02],cn05", 4, 2),
    ("cn[01-02],cn05", 2, None),
    ("cn01,cn05,cn09,cn13", 4, 2),
    ("cn01,cn05,cn09,cn13", 6, 3),
    ("cn01,cn05,cn09,cn13", 8, 4),
    ("cn01,cn05,cn09,cn13", 4, None),
    ("cn[01-03],cn[05-06],cn09", 4, 2),
    ("cn[01-03],cn[05-06],cn09", 3, None),
    ("cn[13-14]", 8, 2),
]


@pytest.fixture
def fabric(slurm: SlurmSandbox) -> Fabric:
    """The sandbox's own topology.conf, which must be the block fixture's (Slurm 23.11 on)."""
    return fixture_fabric(slurm, FIXTURE, "--release trixie --port-base 7417")


def _per_domain(fabric: Fabric, nodes: list[str]) -> Counter[str]:
    return Counter(d for n in nodes if (d := fabric.domain_of(n)) is not None)


def _started(slurm: SlurmSandbox, job: int) -> list[str] | None:
    """The job's nodes once it runs, or None when it is still pending after ``SETTLE_S``."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        if slurm.job_field(job, "%T") == "RUNNING":
            return expand(slurm.job_field(job, "%N"))
        time.sleep(0.3)
    return None


@pytest.mark.parametrize(("busy", "need", "segment"), PLACEMENTS)
def test_slurm_keeps_segments_in_blocks_where_slurmopt_finds_domains(
    slurm: SlurmSandbox, fabric: Fabric, busy: str, need: int, segment: int | None
) -> None:
    taken = expand(busy) if busy else []
    # One job per node: required nodes over two blocks are refused (see the test below).
    for node in taken:
        slurm.wait_state(slurm.sbatch("--exclusive", "-N", "1", "-w", node, "-t", "10"), "RUNNING")
    usable = _per_domain(fabric, [n for n in fabric.compute_nodes if n not in taken])
    group = segment or need
    planned = choose_domains(usable, need, group)
    args = ["--exclusive", "-N", str(need), "-t", "5"]
    if segment is not None:
        args += ["--segment", str(segment)]
    nodes = _started(slurm, slurm.sbatch(*args))

    if planned is None:
        assert nodes is None, f"Slurm placed {nodes}; slurmopt finds no domains for it"
        return
    assert nodes is not None, f"Slurm left the job pending; slurmopt would take {planned}"
    assert not set(nodes) & set(taken)
    placed = _per_domain(fabric, nodes)
    assert sum(placed.values()) == need
    assert all(c % group == 0 for c in placed.values()), f"a segment over two blocks: {placed}"
    if segment is None:
        (block,) = placed
        ((chosen, _),) = planned
        assert usable[block] == usable[chosen], f"Slurm took {block}, slurmopt {chosen}"


#: (nodes, required nodes, segment or None)
REQUIRED = [
    (2, "cn[03-04]", None),
    (2, "cn[04-05]", None),
    (4, "cn[01-04]", 4),
    (2, "cn[01-02]", 2),
    (2, "cn[01-02]", 1),
    (4, "cn[01-04]", 2),
]


@pytest.mark.parametrize(("need", "required", "segment"), REQUIRED)
def test_required_nodes_run_where_required_domain_accepts_them(
    slurm: SlurmSandbox, fabric: Fabric, need: int, required: str, segment: int | None
) -> None:
    group = segment or need
    domain, why = required_domain(
        expand(required), need, group, len(fabric.domains()), fabric.domain_of
    )
    args = ["-H", "-N", str(need), "-t", "5"]
    if segment is not None:
        args += ["--segment", str(segment), "-w", required]
    try:
        job = slurm.sbatch(*args)
    except RuntimeError as exc:
        assert why is not None, f"Slurm refused {required}: {exc}; slurmopt accepts them"
        return
    if segment is None:
        # As the daemon pins a pending job's nodes.
        slurm.run("scontrol", "update", f"JobId={job}", f"NodeList={required}")
    slurm.run("scontrol", "release", str(job))
    nodes = _started(slurm, job)
    if why is not None:
        assert nodes is None, f"Slurm ran {nodes}; slurmopt refuses them: {why}"
        assert slurm.job_field(job, "%r") == "BadConstraints"
    else:
        assert nodes == expand(required)
        assert {fabric.domain_of(n) for n in nodes} == {domain}
