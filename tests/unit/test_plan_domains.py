"""NVLink domains as units of placement: jobs that ask for one, and jobs that keep them whole."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurmopt.fabric import Fabric
from slurmopt.fabric.generators import leaf_spine
from slurmopt.model import Job, Node
from slurmopt.policy.decisions import Plan
from slurmopt.policy.domains import choose_domains, required_domain
from slurmopt.policy.plan import PlanRequest, Policy, Reason, plan
from slurmopt.tag import JobTag, format_comment, parse_comment
from tests.unit.test_plan_helpers import gpu_node, pending, running, snapshot

#: Two NVLink domains of four nodes, each over two leaves of two nodes.
NVL1 = ("gpu0001", "gpu0002", "gpu0003", "gpu0004")
NVL2 = ("gpu0005", "gpu0006", "gpu0007", "gpu0008")
WHOLE = format_comment(JobTag(domain=0))


def _fabric() -> Fabric:
    return leaf_spine(8, 2, nvlink_domain_size=4)


def _plan(busy: tuple[str, ...], *pending_jobs: Job, policy: Policy | None = None) -> Plan:
    nodes: list[Node] = []
    jobs: list[Job] = list(pending_jobs)
    for i, name in enumerate(NVL1 + NVL2):
        nodes.append(gpu_node(name, alloc=8 if name in busy else 0))
        if name in busy:
            jobs.append(running(500 + i, [name], ends_in=600))
    return plan(PlanRequest(snapshot(nodes, jobs), _fabric(), policy or Policy()))


def test_fabric_lists_its_domains() -> None:
    fabric = _fabric()
    assert dict(fabric.domains()) == {"nvl0001": NVL1, "nvl0002": NVL2}
    assert fabric.domain_of("gpu0006") == "nvl0002"
    assert leaf_spine(8, 2).domains() == {}


def test_the_tag_carries_the_domain_ask() -> None:
    assert WHOLE == "slurmopt:managed,domain"
    assert parse_comment("slurmopt:managed,domain=2")[0] == JobTag(domain=2)


def test_domain_job_takes_the_one_whole_domain() -> None:
    result = _plan(("gpu0001",), pending(1, nodes=4, admin_comment=WHOLE))
    assert result.actions[0].nodes == NVL2


def test_domain_job_waits_with_its_reason_when_both_domains_are_broken() -> None:
    asks = pending(1, nodes=4, admin_comment=WHOLE)
    result = _plan(("gpu0001", "gpu0005"), asks, policy=Policy(backfill_depth=0))
    assert not result.actions
    assert result.unplaced[0].reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN
    # The same job without the ask starts at once, spread over both domains.
    spread = _plan(("gpu0001", "gpu0005"), pending(1, nodes=4), policy=Policy(backfill_depth=0))
    assert {n[:-1] for n in spread.actions[0].nodes} == {"gpu000"}
    assert set(spread.actions[0].nodes) - set(NVL1) and set(spread.actions[0].nodes) - set(NVL2)


def test_domain_job_reserves_one_whole_domain() -> None:
    result = _plan(("gpu0001", "gpu0005"), pending(1, nodes=4, admin_comment=WHOLE))
    (reservation,) = result.reservations
    assert reservation.reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN
    assert set(reservation.nodes) in (set(NVL1), set(NVL2))


def test_domain_job_waits_on_a_fabric_without_domains() -> None:
    nodes = [gpu_node(n) for n in NVL1 + NVL2]
    job = pending(1, nodes=2, admin_comment=WHOLE)
    result = plan(PlanRequest(snapshot(nodes, [job]), leaf_spine(8, 2)))
    assert result.unplaced[0].reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN
    assert "has none" in result.unplaced[0].detail


def test_single_node_job_takes_a_node_of_the_broken_domain() -> None:
    # By name the first free node is gpu0001, which would break the whole domain nvl0001.
    result = _plan(("gpu0005",), pending(1, nodes=1, gpus=8))
    assert result.actions[0].nodes[0] in NVL2


def test_gang_within_a_leaf_keeps_a_whole_domain_whole() -> None:
    fabric = Fabric.from_leaf_map({"leaf": NVL1 + NVL2})
    for name in NVL1 + NVL2:
        fabric.graph.nodes[name]["domain"] = "a" if name in NVL1 else "b"
    nodes = [gpu_node(n, alloc=8 if n == "gpu0005" else 0) for n in NVL1 + NVL2]
    jobs = [running(9, ["gpu0005"]), pending(1, nodes=2)]
    result = plan(PlanRequest(snapshot(nodes, jobs), fabric))
    assert set(result.actions[0].nodes) <= set(NVL2)


def test_segments_each_inside_one_domain() -> None:
    tagged = pending(1, nodes=4, admin_comment=format_comment(JobTag(domain=2)))
    result = _plan(("gpu0001", "gpu0005"), tagged)
    chosen = result.actions[0].nodes
    assert len(set(chosen) & set(NVL1)) == 2 and len(set(chosen) & set(NVL2)) == 2


def test_slurm_segment_size_is_read_as_a_constraint() -> None:
    result = _plan(("gpu0001", "gpu0005"), pending(1, nodes=6, segment_size=3))
    assert len(set(result.actions[0].nodes) & set(NVL1)) == 3
    # Three segments of two do not fit: each domain holds one, as it has three free.
    waits = _plan(
        ("gpu0001", "gpu0005"), pending(1, nodes=6, segment_size=2), policy=Policy(backfill_depth=0)
    )
    assert waits.unplaced[0].reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN


def test_segment_that_does_not_divide_the_job_waits() -> None:
    result = _plan((), pending(1, nodes=4, segment_size=3), policy=Policy(backfill_depth=0))
    assert result.unplaced[0].reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN
    assert "does not divide" in result.unplaced[0].detail


def test_choose_domains_prefers_the_tightest_then_the_fewest() -> None:
    assert choose_domains({"a": 8, "b": 5, "c": 4}, 4, 4) == (("c", 4),)
    assert choose_domains({"a": 3, "b": 3}, 4, 4) is None
    assert choose_domains({"a": 6, "b": 3, "c": 2}, 8, 2) == (("a", 6), ("c", 2))


def _leaves_with_a_domain_each(leaves: Mapping[str, Sequence[str]]) -> Fabric:
    fabric = Fabric.from_leaf_map(leaves)
    for leaf, members in leaves.items():
        for name in members:
            fabric.graph.nodes[name]["domain"] = f"nvl-{leaf}"
    return fabric


def test_gang_takes_the_leaf_whose_domain_is_already_broken() -> None:
    # Both leaves have four usable nodes (gpu0008 has four GPUs free); by name the gang would
    # take leaf a and break its whole domain, where leaf b's domain is in use already.
    fabric = _leaves_with_a_domain_each({"a": NVL1, "b": NVL2})
    nodes = [gpu_node(n, alloc=4 if n == "gpu0008" else 0) for n in NVL1 + NVL2]
    jobs = [running(9, ["gpu0008"], gpus=4), pending(1, nodes=2, gpus=4)]
    result = plan(PlanRequest(snapshot(nodes, jobs), fabric))
    assert set(result.actions[0].nodes) <= set(NVL2)
    assert "gpu0008" in result.actions[0].nodes


def test_gang_over_two_leaves_breaks_the_fewest_whole_domains() -> None:
    # Three nodes on two of three leaves of two: every pair fits alike, and each takes one
    # leaf whole and one node of the other.  The pair by name (a, b) breaks b's whole domain;
    # (a, c) takes its odd node from c, whose domain is in use already.
    leaves = {"a": NVL1[:2], "b": NVL1[2:], "c": NVL2[:2]}
    fabric = _leaves_with_a_domain_each(leaves)
    nodes = [gpu_node(n, alloc=4 if n == "gpu0006" else 0) for n in NVL1 + NVL2[:2]]
    jobs = [running(9, ["gpu0006"], gpus=4), pending(1, nodes=3, gpus=4)]
    result = plan(PlanRequest(snapshot(nodes, jobs), fabric))
    assert set(result.actions[0].nodes) == {"gpu0001", "gpu0002", "gpu0006"}


def test_without_domains_the_gang_keeps_the_choice_by_name() -> None:
    leaves = {"a": NVL1[:2], "b": NVL1[2:], "c": NVL2[:2]}
    nodes = [gpu_node(n, alloc=4 if n == "gpu0006" else 0) for n in NVL1 + NVL2[:2]]
    jobs = [running(9, ["gpu0006"], gpus=4), pending(1, nodes=3, gpus=4)]
    result = plan(PlanRequest(snapshot(nodes, jobs), Fabric.from_leaf_map(leaves)))
    assert set(result.actions[0].nodes) == {"gpu0001", "gpu0002", "gpu0003"}


def test_required_nodes_in_two_domains_never_meet_a_whole_domain_ask() -> None:
    job = pending(1, nodes=4, admin_comment=WHOLE, required_nodes=("gpu0001", "gpu0005"))
    result = _plan((), job)
    assert not result.actions and not result.reservations
    (waiting,) = result.unplaced
    assert waiting.reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN
    assert "span NVLink domains nvl0001, nvl0002" in waiting.detail


def test_required_node_brings_the_rest_of_the_job_into_its_domain() -> None:
    # By fit and name the two other nodes would be gpu0003-0004, in the other domain.
    job = pending(1, nodes=3, admin_comment=WHOLE, required_nodes=("gpu0005",))
    chosen = _plan((), job).actions[0].nodes
    assert "gpu0005" in chosen and set(chosen) <= set(NVL2)


def test_required_node_waits_for_room_in_its_own_domain() -> None:
    job = pending(1, nodes=3, admin_comment=WHOLE, required_nodes=("gpu0001",))
    result = _plan(("gpu0002", "gpu0003"), job)
    assert not result.actions
    (reservation,) = result.reservations
    assert reservation.reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN
    assert "in NVLink domain nvl0001, that of its required nodes" in reservation.detail
    assert "gpu0001" in reservation.nodes and set(reservation.nodes) <= set(NVL1)


def test_required_nodes_with_segments_are_refused_as_slurm_does() -> None:
    job = pending(1, nodes=4, segment_size=2, required_nodes=("gpu0001",))
    result = _plan((), job)
    assert not result.actions and not result.reservations
    assert result.unplaced[0].reason is Reason.NEEDS_NODES_IN_ONE_DOMAIN
    assert "segments of 2 are not supported" in result.unplaced[0].detail


def test_required_domain_says_why_pinned_nodes_cannot_meet_the_ask() -> None:
    domain_of = {"a1": "a", "a2": "a", "b1": "b"}.get
    assert required_domain(["a1", "a2"], 3, 3, 2, domain_of) == ("a", None)
    assert required_domain(["a1", "x9"], 2, 2, 2, domain_of)[1] == (
        "required node(s) x9 in no NVLink domain"
    )
    assert "the fabric has none" in str(required_domain(["a1"], 2, 2, 0, domain_of)[1])
