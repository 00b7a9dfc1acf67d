"""Every tier of the fabric: gang placement (fewest tiers before fewest leaves), the clos spec,
the communication penalty per tier crossed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmopt.errors import UsageError
from slurmopt.fabric import Fabric, clos, fat_tree, leaf_spine
from slurmopt.fabric.loaders import parse_topology_conf
from slurmopt.fabric.topology_conf import load_topology_conf
from slurmopt.hostlist import expand
from slurmopt.model import Job, Node
from slurmopt.policy.placement import choose_leaves, placement_cost
from slurmopt.policy.plan import PlanRequest, Policy, plan
from slurmopt.sim.comm import CommModel, Stretcher
from slurmopt.sim.fabrics import parse_fabric_spec
from slurmopt.sim.slurm_baseline import TreePlacement
from tests.unit.test_plan_helpers import gpu_node, pending, running, snapshot

SPREAD = Policy(require_single_leaf=False)


def _occupied(fabric: Fabric, free: set[str]) -> tuple[list[Node], list[Job]]:
    """Every node of the fabric; those not in ``free`` run one unlimited whole-node job each."""
    names = sorted(fabric.compute_nodes)
    nodes = [gpu_node(n, alloc=0 if n in free else 8) for n in names]
    jobs = [running(10_000 + i, [n]) for i, n in enumerate(names) if n not in free]
    return nodes, jobs


def _gang(fabric: Fabric, free: set[str], k: int, policy: Policy = SPREAD) -> tuple[str, ...]:
    nodes, jobs = _occupied(fabric, free)
    result = plan(PlanRequest(snapshot(nodes, [*jobs, pending(1, nodes=k)]), fabric, policy))
    (start,) = result.actions
    return start.nodes


def test_tiers_of_the_generated_shapes() -> None:
    tree = clos(3, 4, 4).tiers()
    assert tree.tier_of(["leaf01"]) == 0
    assert tree.tier_of(["leaf01", "leaf04"]) == 1
    assert tree.tier_of(["leaf01", "leaf05"]) == 2
    spine = leaf_spine(64, 8, spines=2).tiers()
    assert spine.tier_of(["leaf1", "leaf8"]) == 1


def test_clos_core_is_oversubscribed() -> None:
    fabric = clos(2, 4, 4, oversubscription=2.0)
    assert fabric.name == "clos" and len(fabric.compute_nodes) == 32
    assert fabric.span(["gpu0001", "gpu0016"]).slowest_link_gbps == 400
    assert fabric.span(["gpu0001", "gpu0017"]).slowest_link_gbps == 200
    tiers = fabric.tiers()
    pod = tiers.meet(["leaf1", "leaf2"])
    assert pod is not None and tiers.gbps[pod] == 400
    root = tiers.meet(["leaf1", "leaf5"])
    assert root is not None and tiers.gbps[root] == 200 and tiers.hops[root] == 6


def test_ten_node_gang_stays_in_one_pod() -> None:
    # Two pods of four 8-node leaves.  Free: leaf1 3, leaf2 3, leaf4 5 (pod 1), leaf5 5 (pod
    # 2).  Two leaves across pods (leaf4 + leaf5, 6 hops over the 2:1 core) are the fewest
    # leaves; three leaves in pod 1 stay at 4 hops and full bandwidth.
    fabric = clos(2, 4, 8, oversubscription=2.0)
    per_leaf = {"leaf1": 3, "leaf2": 3, "leaf3": 0, "leaf4": 5, "leaf5": 5, "leaf6": 0}
    free = {n for leaf, count in per_leaf.items() for n in fabric.nodes_under(leaf)[:count]}
    chosen = _gang(fabric, free, 10)
    span = fabric.span(chosen)
    assert span.max_hops == 4 and span.slowest_link_gbps == 400
    assert span.leaves == ("leaf1", "leaf2", "leaf4")


def test_ten_node_gang_stays_in_one_pod_of_the_sandbox_fixture() -> None:
    # The three-tier sandbox's layout (tests/integration/test_topology3.py), with the daemon's
    # default policy: leaf1 + leaf4 (whole, in two pods) or leaf1-3 (5 + 3 + 2, one pod).
    conf = Path(__file__).parents[1] / "fixtures" / "fabric" / "clos3-sandbox.conf"
    fabric = load_topology_conf(conf)
    free = set(expand("cn[01-08,11-12,16-20]"))
    chosen = _gang(fabric, free, 10, Policy())
    assert fabric.span(chosen).leaves == ("leaf1", "leaf2", "leaf3")
    assert fabric.span(chosen).max_hops == 4


def test_idle_cluster_gangs_take_whole_pods() -> None:
    fabric = clos(4, 4, 4)  # pods of 16 nodes
    free = set(fabric.compute_nodes)
    one_pod = fabric.span(_gang(fabric, free, 16))
    assert one_pod.max_hops == 4 and one_pod.num_leaves == 4
    two_pods = _gang(fabric, free, 32)
    assert len({fabric.leaf_of(n) for n in two_pods}) == 8
    pods = {fabric.tiers().chain(fabric.leaf_of(n) or "")[0] for n in two_pods}
    assert len(pods) == 2


def test_two_pods_rather_than_three_when_one_is_short() -> None:
    # Pods of 16: pod 1 has 14 free, pods 2 and 3 have 10 free each, pod 4 has 16 free.
    # 30 nodes fit on pods 4 and 1 (two pods) though the fewest leaves might pick others.
    fabric = clos(4, 4, 4)
    names = sorted(fabric.compute_nodes)
    free = set(names[:14]) | set(names[16:26]) | set(names[32:42]) | set(names[48:])
    chosen = _gang(fabric, free, 30)
    pods = {fabric.tiers().chain(fabric.leaf_of(n) or "")[0] for n in chosen}
    assert len(pods) == 2


def test_cost_puts_the_tier_before_the_leaves() -> None:
    fabric = clos(2, 4, 8)
    tiers = fabric.tiers()
    free = {"leaf1": 3, "leaf2": 3, "leaf4": 5, "leaf5": 5}
    choice = choose_leaves(free, 10, tiers, single_leaf=False)
    assert choice is not None and choice.tier == 1 and len(choice.leaves) == 3
    counts = dict(free)
    for leaf, c in free.items():
        for unit in tiers.chain(leaf):
            counts[unit] = counts.get(unit, 0) + c
    assert placement_cost(choice, tiers, counts, ())[0] == 1


def test_two_level_fabric_keeps_fewest_leaves() -> None:
    fabric = leaf_spine(32, 8)
    choice = choose_leaves(
        {"leaf1": 3, "leaf2": 5, "leaf3": 2, "leaf4": 6}, 12, fabric.tiers(), False
    )
    assert choice is not None and dict(choice.take) == {"leaf2": 5, "leaf3": 2, "leaf4": 5}


def _regular_tree(fanouts: Sequence[int], nodes_per_leaf: int) -> Fabric:
    """A tree of ``topology.conf`` switches: ``fanouts[0]`` children under the top switch, ...,
    the last entry the leaves per lowest spine; ``n001``... in leaf order."""
    lines: list[str] = []
    leaves = [f"leaf{i + 1}" for i in range(math.prod(fanouts))]
    for i, leaf in enumerate(leaves):
        first = i * nodes_per_leaf + 1
        lines.append(f"SwitchName={leaf} Nodes=n[{first:03d}-{first + nodes_per_leaf - 1:03d}]")
    below = leaves
    for level, fanout in enumerate(reversed(fanouts), start=1):
        above = [f"s{level}x{j + 1}" for j in range(len(below) // fanout)]
        for j, switch in enumerate(above):
            members = ",".join(below[j * fanout : (j + 1) * fanout])
            lines.append(f"SwitchName={switch} Switches={members}")
        below = above
    return parse_topology_conf("\n".join(lines) + "\n")


@pytest.mark.parametrize("fanouts", [(2, 2, 3), (2, 2, 2, 3)], ids=["4-tier", "5-tier"])
def test_deep_tree_takes_the_fewest_units_of_every_tier(fanouts: tuple[int, ...]) -> None:
    # Under each of the top switch's two children: three leaves of 4 free nodes in its first
    # subtree, one leaf of 6 in its second.  20 nodes need both children; the fewest leaves
    # (6 + 6 + 4 + 4) take both second subtrees and one or two first ones, while both first
    # subtrees hold 4 + 4 + 4 + 4 + 4: two units at every tier beneath the top, then 5 leaves.
    fabric = _regular_tree(fanouts, 6)
    tiers = fabric.tiers()
    leaves = [f"leaf{i + 1}" for i in range(math.prod(fanouts))]
    per_child = len(leaves) // fanouts[0]
    free: dict[str, int] = {}
    for c in range(fanouts[0]):
        block = leaves[c * per_child : (c + 1) * per_child]
        free.update(dict.fromkeys(block[:3], 4))
        free[block[per_child // 2]] = 6
    choice = choose_leaves(free, 20, tiers, single_leaf=False)
    assert choice is not None and sum(n for _, n in choice.take) == 20
    top = len(fanouts)
    assert choice.tier == tiers.tier_of(leaves) == top
    for tier in range(top - 1, 0, -1):
        units = {
            next(u for u in tiers.chain(leaf) if tiers.tier[u] == tier) for leaf in choice.leaves
        }
        assert len(units) == 2, (tier, sorted(units))
    assert len(choice.leaves) == 5


def _tree_choice(
    fabric: Fabric, usable: Sequence[str], k: int, closer_first: bool = False
) -> list[str] | None:
    order = {n: i for i, n in enumerate(sorted(fabric.compute_nodes))}
    return TreePlacement(fabric, order, closer_first=closer_first).place(usable, k)


def _no_more_tiers_than_slurm_tree(fabric: Fabric, data: st.DataObject) -> None:
    """A gang on random free nodes spans no higher tier and no more hops than topology/tree's.

    Against both of Slurm's leaf rules: 22.05's best fit and the closer leaf of 24.05.3 on.
    """
    names = sorted(fabric.compute_nodes)
    free = data.draw(st.sets(st.sampled_from(names), min_size=min(2, len(names))))
    if len(free) < 2:
        return
    k = data.draw(st.integers(2, len(free)))
    ours = fabric.span(_gang(fabric, set(free), k))
    tree = _tree_choice(fabric, sorted(free), k, closer_first=data.draw(st.booleans()))
    assert tree is not None
    theirs = fabric.span(tree)
    tiers = fabric.tiers()
    assert tiers.tier_of(ours.leaves) <= tiers.tier_of(theirs.leaves)
    assert ours.max_hops <= theirs.max_hops


@settings(max_examples=60, deadline=None)
@given(
    pods=st.integers(1, 4),
    leaves_per_pod=st.integers(1, 4),
    nodes_per_leaf=st.integers(1, 4),
    oversub=st.sampled_from([1.0, 2.0]),
    data=st.data(),
)
def test_never_more_tiers_than_slurm_tree(
    pods: int, leaves_per_pod: int, nodes_per_leaf: int, oversub: float, data: st.DataObject
) -> None:
    fabric = clos(pods, leaves_per_pod, nodes_per_leaf, oversubscription=oversub)
    _no_more_tiers_than_slurm_tree(fabric, data)


@settings(max_examples=40, deadline=None)
@given(
    fanouts=st.lists(st.integers(1, 3), min_size=3, max_size=4),
    nodes_per_leaf=st.integers(1, 3),
    data=st.data(),
)
def test_never_more_tiers_than_slurm_tree_on_deep_trees(
    fanouts: list[int], nodes_per_leaf: int, data: st.DataObject
) -> None:
    fabric = _regular_tree(fanouts, nodes_per_leaf)
    _no_more_tiers_than_slurm_tree(fabric, data)


@settings(max_examples=40, deadline=None)
@given(
    pods=st.integers(2, 4),
    leaves_per_pod=st.integers(2, 4),
    data=st.data(),
)
def test_choice_is_lowest_tier_that_holds_the_gang(
    pods: int, leaves_per_pod: int, data: st.DataObject
) -> None:
    fabric = fat_tree(pods * leaves_per_pod * 4, 4, leaves_per_pod, core_oversubscription=2.0)
    tiers = fabric.tiers()
    free = {leaf: data.draw(st.integers(0, 4), label=leaf) for leaf in fabric.leaves()}
    total = sum(free.values())
    if total < 2:
        return
    k = data.draw(st.integers(2, total))
    choice = choose_leaves(free, k, tiers, single_leaf=False)
    assert choice is not None
    assert sum(n for _, n in choice.take) == k
    assert all(0 < n <= free[leaf] for leaf, n in choice.take)
    pods_free: dict[str, int] = {}
    for leaf, c in free.items():
        pod = tiers.chain(leaf)[0]
        pods_free[pod] = pods_free.get(pod, 0) + c
    lowest = 0 if max(free.values()) >= k else 1 if max(pods_free.values()) >= k else 2
    assert choice.tier == lowest == tiers.tier_of(choice.leaves)


def test_clos_spec_builds_three_tiers() -> None:
    fabric = parse_fabric_spec("clos:3:4:2:2")
    assert len(fabric.compute_nodes) == 24 and fabric.name == "clos"
    assert fabric.tiers().tier_of(fabric.leaves()) == 2
    assert fabric.span(["gpu0001", "gpu0024"]).slowest_link_gbps == 200
    for bad in ("clos:3:4", "clos:3:4:x", "clos:3:4:2:two"):
        with pytest.raises(UsageError):
            parse_fabric_spec(bad)


def _plain_factor(stretcher: Stretcher, nodes: list[str], gpus: int) -> float:
    """The model before tiers were weighted: extra hops over two, whatever the tier."""
    model, span = stretcher.model, stretcher.fabric.span(nodes)
    best = stretcher.best_span(len(nodes))
    assert span.slowest_link_gbps and best.slowest_link_gbps
    ratio = max(1.0, best.slowest_link_gbps / span.slowest_link_gbps)
    levels = max(0, span.max_hops - best.max_hops) / 2
    leaves = max(0, span.num_leaves - best.num_leaves)
    slowdown = ratio * (1 + model.level_penalty * levels + model.leaf_penalty * leaves)
    share = model.share(gpus)
    return (1 - share) + share * slowdown


@pytest.mark.parametrize(
    "spec", ["fat-tree:64:8", "fat-tree:64:8:2", "clos:4:4:4", "dragonfly+:3:2:4"]
)
def test_comm_penalty_unchanged_where_upper_tiers_are_as_wide(spec: str) -> None:
    fabric = parse_fabric_spec(spec)
    stretcher = Stretcher(CommModel(), fabric)
    names = sorted(fabric.compute_nodes)
    for nodes in ([names[0], names[5]], [names[0], names[-1]], names[:20], names[:9] + names[-9:]):
        factor, _ = stretcher.factor(nodes, 8 * len(nodes))
        assert factor == pytest.approx(_plain_factor(stretcher, nodes, 8 * len(nodes)))


def test_comm_penalty_counts_an_oversubscribed_core_by_its_narrowness() -> None:
    fabric = parse_fabric_spec("clos:4:4:4:2")
    stretcher = Stretcher(CommModel(), fabric)
    across = fabric.span(["gpu0001", "gpu0017"])  # two pods: 6 hops over the 2:1 core
    best = stretcher.best_span(2)
    # 2 levels beyond one leaf, plus the core tier's 2 hops / 2 x (400 / 200 - 1).
    assert stretcher.levels(across, best) == 3.0
    in_pod = fabric.span(["gpu0001", "gpu0005"])
    assert stretcher.levels(in_pod, best) == 1.0
    factor, _ = stretcher.factor(["gpu0001", "gpu0017"], 16)
    assert factor == pytest.approx(0.85 + 0.15 * 2 * (1 + 0.5 * 3 + 0.1 * 1))


def test_plan_speed_measures_a_pass_on_a_given_fabric() -> None:
    from benchmarks.plan_speed import run_child

    row = run_child(0, 200, 1, 1, "clos:2:2:8:2")
    assert row["nodes"] == 32 and row["fabric"].startswith("generated clos(2, 2, 8")
    assert row["starts"] > 0


def test_tier_metrics_count_jobs_above_their_best_tier() -> None:
    from slurmopt.sim.comm import tier_metrics
    from slurmopt.sim.metrics import JobOutcome
    from slurmopt.sim.traces import TraceJob

    fabric = parse_fabric_spec("clos:2:2:4")
    gang = TraceJob(
        job_id=1,
        submit_s=0.0,
        duration_s=10.0,
        nodes=2,
        gpus_per_node=8,
        time_limit_s=60,
        gpus_asked=16,
    )
    one_leaf = JobOutcome(gang, start=0.0, end=10.0, nodes=("gpu0001", "gpu0002"))
    two_pods = JobOutcome(gang, start=0.0, end=10.0, nodes=("gpu0001", "gpu0009"))
    figures = tier_metrics([one_leaf, two_pods], fabric)
    assert figures == {"avg_tier_multinode": 1.0, "multinode_above_best_tier": 1}


def test_a_gang_never_spans_trees_no_switch_joins() -> None:
    # Two trees with no common switch (the loader warns; Slurm places no job across them).
    fabric = parse_topology_conf(
        "SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n[3-4]\n"
        "SwitchName=s1 Switches=l1\nSwitchName=s2 Switches=l2\n"
    )
    assert fabric.warnings
    nodes = [gpu_node(f"n{i}") for i in range(1, 5)]
    result = plan(PlanRequest(snapshot(nodes, [pending(1, nodes=3), pending(2, nodes=2)]), fabric))
    assert [(a.job_id, a.nodes) for a in result.actions] == [(2, ("n1", "n2"))]
    assert [u.job_id for u in result.unplaced] == [1]
