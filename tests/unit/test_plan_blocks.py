"""topology/block: every multi-node job inside one block, as Slurm's ``eval_nodes_block`` places it.

On such a cluster Slurm starts a job without ``--segment`` only inside one block
(of the smallest ``BlockSizes`` level that holds it) and leaves a job whose node
list crosses two base blocks pending for ever (``BadConstraints``, checked on
24.11 in ``tests/integration/test_block_segments.py``).  So the planner never pins
a gang across blocks, and a job larger than any base block is left to Slurm.
"""

from __future__ import annotations

from pathlib import Path

from slurmopt.fabric import Fabric
from slurmopt.model import Job, Node
from slurmopt.policy.decisions import Plan
from slurmopt.policy.plan import PlanRequest, Policy, Reason, plan
from slurmopt.sim.fabrics import parse_fabric_spec
from tests.unit.test_plan_helpers import gpu_node, pending, running, snapshot

NODES = tuple(f"cn{i:02d}" for i in range(1, 17))
BLOCKS = "".join(
    f"BlockName=b{b + 1} Nodes=cn[{4 * b + 1:02d}-{4 * b + 4:02d}]\n" for b in range(4)
) + "BlockSizes=4,8,16\n"


def _fabric(tmp_path: Path) -> Fabric:
    conf = tmp_path / "topology.conf"
    conf.write_text(BLOCKS)
    return parse_fabric_spec(str(conf))


def _plan(tmp_path: Path, busy: tuple[str, ...], *jobs: Job) -> Plan:
    nodes: list[Node] = []
    all_jobs: list[Job] = list(jobs)
    for i, name in enumerate(NODES):
        nodes.append(gpu_node(name, alloc=8 if name in busy else 0))
        if name in busy:
            all_jobs.append(running(500 + i, [name], ends_in=600))
    request = PlanRequest(snapshot(nodes, all_jobs), _fabric(tmp_path), Policy(backfill_depth=0))
    return plan(request)


def _block(node: str) -> int:
    return (int(node[2:]) - 1) // 4


def test_a_plain_gang_never_spans_two_blocks(tmp_path: Path) -> None:
    # Three free nodes in every block: 12 free, yet no block holds 4 (Slurm: pending).
    busy = ("cn01", "cn05", "cn09", "cn13")
    result = _plan(tmp_path, busy, pending(1, nodes=4))
    assert not result.actions
    assert result.unplaced[0].reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN
    # Two nodes fit in one block: they start there, not one in each of two blocks.
    two = _plan(tmp_path, busy, pending(2, nodes=2))
    (start,) = two.actions
    assert len({_block(n) for n in start.nodes}) == 1


def test_a_job_larger_than_a_block_is_left_to_slurm(tmp_path: Path) -> None:
    result = _plan(tmp_path, (), pending(1, nodes=8))
    assert not result.actions
    (left,) = result.unplaced
    assert left.reason is Reason.UNSUPPORTED_REQUEST
    assert "left to Slurm" in left.detail and "8 nodes" in left.detail


def test_required_nodes_across_blocks_wait(tmp_path: Path) -> None:
    job = pending(1, nodes=2, required_nodes=("cn04", "cn05"))
    result = _plan(tmp_path, (), job)
    assert not result.actions
    assert result.unplaced[0].reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN
