"""The ``slurm-backfill-tree`` baseline's Slurm 22.05 rules, each on a schedule worked out by hand.

``fat-tree:4:4`` is four 8-GPU nodes under one leaf; ``fat-tree:1:1`` one
8-GPU node.  Jobs without a priority column rank by submit time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurmopt.fabric import Fabric
from slurmopt.fabric.generators import fat_tree
from slurmopt.fabric.topology_conf import load_topology_conf
from slurmopt.hostlist import expand
from slurmopt.sim import CommModel, read_trace, simulate
from slurmopt.sim.fabrics import parse_fabric_spec
from slurmopt.sim.metrics import JobOutcome
from slurmopt.sim.slurm_baseline import TreePlacement

OFF = CommModel(enabled=False)
HEADER = "submit_s,duration_s,gpus,time_limit_s\n"


def _outcomes(tmp_path: Path, csv: str, fabric: str, **knobs: Any) -> list[JobOutcome]:
    """The trace ``csv`` replayed under ``slurm-backfill-tree`` on ``fabric`` with ``knobs``."""
    trace = tmp_path / "t.csv"
    trace.write_text(csv)
    result = simulate(
        read_trace(trace, "csv"), parse_fabric_spec(fabric), "slurm-backfill-tree", OFF, **knobs
    )
    return list(result.outcomes)


def _starts(
    tmp_path: Path, rows: str, fabric: str, bf_interval_s: float
) -> dict[int, float | None]:
    outcomes = _outcomes(tmp_path, HEADER + rows, fabric, bf_interval_s=bf_interval_s)
    return {o.job.job_id: o.start for o in outcomes}


def test_idle_backfill_agent_passes_at_once(tmp_path: Path) -> None:
    # All three arrive at 0.  The agent has not passed for bf_interval, so it passes at 0:
    # job 1 starts, job 2 (2 nodes) is held for 100, job 3 (limit 10) backfills on the 4th
    # node at once.  A pass on the clock's 30 s grid would have started job 3 at 30.
    rows = "0,100,24,100\n0,100,16,100\n0,10,8,10\n"
    assert _starts(tmp_path, rows, "fat-tree:4:4", 30) == {1: 0.0, 2: 100.0, 3: 0.0}


def test_a_busy_backfill_agent_keeps_its_phase(tmp_path: Path) -> None:
    # As above, but the agent was already passing every 30 s, next at 7: at 0 only the main
    # scheduler runs (job 1 starts, job 2 blocks the partition) and job 3 waits for the pass.
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "0,100,24,100\n0,100,16,100\n0,10,8,10\n")
    result = simulate(
        read_trace(trace, "csv"), parse_fabric_spec("fat-tree:4:4"), "slurm-backfill-tree", OFF,
        bf_interval_s=30, bf_phase_s=7,
    )  # fmt: skip
    assert {o.job.job_id: o.start for o in result.outcomes} == {1: 0.0, 2: 100.0, 3: 7.0}


def test_backfill_passes_drift_by_their_own_duration(tmp_path: Path) -> None:
    # backfill_agent() sleeps bf_interval after each _attempt_backfill() returns, so with
    # passes of 0.02 s they come at 0, 5.02, 10.04, 15.06, 20.08.  Job 1 (3 nodes) and job 2
    # start at 0; job 3 (2 nodes) blocks the partition, so job 4 waits for backfill.  Job 2
    # ends at 20.05: after the nominal pass at 20 but before the drifted one, which
    # backfills job 4 on its node at 20.08; on a fixed 5 s rhythm it would wait until 25.
    rows = HEADER + "0,1000,24,1000\n0,20.05,8,1000\n0,100,16,1000\n0,10,8,10\n"
    starts = {}
    for pass_s in (0.0, 0.02):
        outcomes = _outcomes(tmp_path, rows, "fat-tree:4:4", bf_interval_s=5, bf_pass_s=pass_s)
        starts[pass_s] = {o.job.job_id: o.start for o in outcomes}
    assert starts[0.0] == {1: 0.0, 2: 0.0, 3: 1000.0, 4: 25.0}
    assert starts[0.02][4] == pytest.approx(20.08)
    assert {j: starts[0.02][j] for j in (1, 2, 3)} == {1: 0.0, 2: 0.0, 3: 1000.0}


def test_backfill_agent_after_a_quiet_spell_serves_the_first_change_at_once(
    tmp_path: Path,
) -> None:
    # Job 1 starts in the pass at 0 and nothing waits after it: one more (empty) pass at 30,
    # then none until something arrives.  At 100 three jobs do and the agent, idle for over
    # 30 s, passes at once: job 2 starts (gpu1-3), job 3 is held until 200, job 4 (limit 10)
    # backfills on gpu4 at 100.  On a 30 s grid it would have waited until 120.
    rows = "0,10,8,10\n100,100,24,100\n100,100,16,100\n100,10,8,10\n"
    starts = _starts(tmp_path, rows, "fat-tree:4:4", 30)
    assert starts == {1: 0.0, 2: 100.0, 3: 200.0, 4: 100.0}


def test_backfill_passes_every_interval_from_its_own_last_pass(tmp_path: Path) -> None:
    # As above; job 3 keeps waiting, so after 100 the agent passes at 130 (job 4 ended at
    # 110), 160, ...  Job 5 arrives at 137 behind the held job 3: the main scheduler stops at
    # job 3 and the pass at 160 backfills job 5 on gpu4 (a grid from 0 would say 150).
    rows = "0,10,8,10\n100,100,24,100\n100,100,16,100\n100,10,8,10\n137,10,8,10\n"
    starts = _starts(tmp_path, rows, "fat-tree:4:4", 30)
    assert starts == {1: 0.0, 2: 100.0, 3: 200.0, 4: 100.0, 5: 160.0}


def test_backfill_holds_the_whole_node_for_a_waiting_job(tmp_path: Path) -> None:
    # Two 8-GPU nodes.  Job 1 fills gpu1 until 100; job 2 (6 GPUs) takes gpu2 until 50.  Job 3
    # wants 4 GPUs on each node: it is held on both from 100.  Job 4 (1 GPU, limit 200)
    # arrives at 60: by GPU count it fits on gpu2 (8 free now, 4 left once job 3 starts),
    # but Slurm's backfill map holds whole nodes, so it waits and starts with job 3 at 100.
    trace = tmp_path / "t.csv"
    trace.write_text(
        "submit_s,duration_s,gpus,nodes,gpus_per_node,time_limit_s\n"
        "0,100,8,1,8,100\n0,50,6,1,6,50\n0,50,8,2,4,50\n60,10,1,1,1,200\n"
    )
    result = simulate(
        read_trace(trace, "csv"), parse_fabric_spec("fat-tree:2:2"), "slurm-backfill-tree", OFF,
        bf_interval_s=0,
    )  # fmt: skip
    starts = {o.job.job_id: (o.start, o.nodes) for o in result.outcomes}
    assert starts == {
        1: (0.0, ("gpu0001",)),
        2: (0.0, ("gpu0002",)),
        3: (100.0, ("gpu0001", "gpu0002")),
        4: (100.0, ("gpu0001",)),
    }


def _held_starts(
    tmp_path: Path, limit: int, resolution: float, origin: float
) -> dict[int, float | None]:
    """Job 1 fills gpu1 until 100, job 2 (both nodes) is held from 100, job 3 (1 node) waits."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "submit_s,duration_s,gpus,nodes,gpus_per_node,time_limit_s\n"
        f"0,100,8,1,8,100\n0,100,16,2,8,100\n0,{limit},8,1,8,{limit}\n"
    )
    result = simulate(
        read_trace(trace, "csv"), parse_fabric_spec("fat-tree:2:2"), "slurm-backfill-tree", OFF,
        bf_interval_s=0, bf_resolution_s=resolution, clock_origin_s=origin,
    )  # fmt: skip
    return {o.job.job_id: o.start for o in result.outcomes}


def test_a_job_ending_as_a_hold_begins_does_not_backfill(tmp_path: Path) -> None:
    # Slurm's backfill map excludes a held node from every job whose end is at or after the
    # hold's begin (begin_time <= end_time): job 3 may end at 99 on gpu2, not at 100.
    assert _held_starts(tmp_path, 99, 1, 0) == {1: 0.0, 2: 100.0, 3: 0.0}
    assert _held_starts(tmp_path, 100, 1, 0) == {1: 0.0, 2: 100.0, 3: 200.0}


def test_holds_begin_at_the_start_of_their_bf_resolution_slot(tmp_path: Path) -> None:
    # With 60 s slots the hold for job 2 (expected at 100) begins at 60 when the wall clock
    # reads a whole minute at time 0, at 90 when it reads 30 s past one (130 -> 120 - 30).
    assert _held_starts(tmp_path, 59, 60, 0) == {1: 0.0, 2: 100.0, 3: 0.0}
    assert _held_starts(tmp_path, 60, 60, 0) == {1: 0.0, 2: 100.0, 3: 200.0}
    assert _held_starts(tmp_path, 89, 60, 30) == {1: 0.0, 2: 100.0, 3: 0.0}
    assert _held_starts(tmp_path, 90, 60, 30) == {1: 0.0, 2: 100.0, 3: 200.0}


def test_will_run_frees_running_jobs_in_30_s_batches(tmp_path: Path) -> None:
    # Three nodes.  Job 1 holds gpu1 until 100, job 2 gpu2 until 140; job 3 (2 nodes) waits
    # and job 4 (1 node, limit 200) could run on gpu3.  Slurm's _will_run_test() frees the
    # running jobs in batches: the first ends at 100, rounded up to 30 s of the wall clock
    # plus 30 s.  At a whole minute that is 150, so jobs 1 and 2 go together, job 3 is held
    # from 140 on gpu1-2 and job 4 starts at once on gpu3.  At 15 s past a minute it is 135:
    # job 1 alone frees enough, job 3 is held from 100 on gpu1 and gpu3, and job 4 waits.
    trace = tmp_path / "t.csv"
    trace.write_text(
        "submit_s,duration_s,gpus,nodes,gpus_per_node,time_limit_s\n"
        "0,100,8,1,8,100\n0,140,8,1,8,140\n0,50,16,2,8,50\n0,200,8,1,8,200\n"
    )

    def starts(origin: float) -> dict[int, float | None]:
        result = simulate(
            read_trace(trace, "csv"), parse_fabric_spec("fat-tree:3:3"), "slurm-backfill-tree",
            OFF, bf_interval_s=0, bf_resolution_s=1, clock_origin_s=origin,
        )  # fmt: skip
        return {o.job.job_id: o.start for o in result.outcomes}

    assert starts(0) == {1: 0.0, 2: 0.0, 3: 140.0, 4: 0.0}
    assert starts(15) == {1: 0.0, 2: 0.0, 3: 100.0, 4: 140.0}


def _placement(fabric: Fabric) -> TreePlacement:
    names = sorted(fabric.compute_nodes)
    return TreePlacement(fabric, {n: i for i, n in enumerate(names)})


def test_equal_leaves_tie_to_the_one_listed_first_not_by_name() -> None:
    # leafB holds the first nodes; with both leaves equally free Slurm takes the first switch
    # of its table (topology.conf order), here the leaf whose first node comes first.
    fabric = Fabric.from_leaf_map({"leafB": ["gpu1", "gpu2"], "leafA": ["gpu3", "gpu4"]})
    tree = _placement(fabric)
    assert tree.place(["gpu1", "gpu2", "gpu3", "gpu4"], 1) == ["gpu1"]
    assert tree.place(["gpu1", "gpu2", "gpu3", "gpu4"], 2) == ["gpu1", "gpu2"]
    # The leaf with fewer usable nodes that still holds the job wins over the first one.
    assert tree.place(["gpu1", "gpu2", "gpu4"], 1) == ["gpu4"]


def test_gang_leaves_follow_slurm_2205_best_fit_and_distance() -> None:
    # Two pods of two 2-node leaves: leaf1 gpu1-2, leaf2 gpu3-4 (pod 1), leaf3 gpu5-6,
    # leaf4 gpu7-8 (pod 2).  Usable: gpu1 (leaf1), gpu3 (leaf2), gpu5 and gpu6 (leaf3).
    fabric = fat_tree(8, 2, 2, aggs_per_pod=1)
    tree = _placement(fabric)
    usable = ["gpu0001", "gpu0003", "gpu0005", "gpu0006"]
    # 3 nodes: no leaf holds them.  leaf1 vs leaf2: same parent, same size, keep the first.
    # leaf1 vs leaf3: the parents differ, so compare the pods: 2 usable each, neither holds
    # 3, a tie, keep leaf1.  Then the closest leaf, leaf2 (2 hops; leaf3 is 4), then leaf3:
    # three leaves where two would do; that is what 22.05 does.
    assert tree.place(usable, 3) == ["gpu0001", "gpu0003", "gpu0005"]
    # 2 nodes: leaf3 holds them whole and is the only leaf that does.
    assert tree.place(usable, 2) == ["gpu0005", "gpu0006"]
    # 1 node: every leaf holds it; leaf1 and leaf2 have one usable node each, the tightest,
    # and leaf1 is listed first.
    assert tree.place(usable, 1) == ["gpu0001"]


def test_from_2405_3_a_closer_leaf_that_holds_the_rest_wins() -> None:
    # The three-tier sandbox fixture (2 pods x 3 leaves x 5 nodes); free: cn08 (leaf2, pod 1),
    # cn17-19 (leaf4), cn21,23,25 (leaf5), cn28-29 (leaf6).  4 nodes: leaf4 first (3, the
    # largest), then 1 more.  22.05 takes leaf2's one node, the tightest fit, across the core;
    # 24.05.3 on (as Slurm 24.11 does in the trixie sandbox) takes leaf6, 2 hops closer.
    conf = Path(__file__).parents[1] / "fixtures" / "fabric" / "clos3-sandbox.conf"
    fabric = load_topology_conf(conf)
    order = {n: i for i, n in enumerate(sorted(fabric.compute_nodes))}
    free = expand("cn[08,17-19,21,23,25,28-29]")
    assert TreePlacement(fabric, order).place(free, 4) == ["cn17", "cn18", "cn19", "cn08"]
    closer = TreePlacement(fabric, order, closer_first=True)
    assert closer.place(free, 4) == ["cn17", "cn18", "cn19", "cn28"]


def test_main_pass_waits_for_the_epilog_and_sees_every_end_before_it(tmp_path: Path) -> None:
    # Slurm 22.05 calls schedule() for a job's end when its epilog-complete message arrives
    # (src/slurmctld/proc_req.c, _slurm_rpc_epilog_complete(): job_epilog_complete() true ->
    # schedule(false)), not at the end itself.  Two leaves of four nodes: jobs 1-3 take
    # gpu1-2, gpu3-4 and gpu5-6; job 4 (4 nodes) waits.  Jobs 1 and 2 end 20 ms apart at
    # 100, between backfill passes (90, 120).  A main pass at the first end sees gpu1-2 and
    # gpu7-8 free and spreads job 4 over both leaves; the pass 0.15 s later, when job 1's
    # epilog completes, sees job 2 ended too and puts job 4 on leaf 1 whole.
    rows = (
        "submit_s,duration_s,gpus,nodes,gpus_per_node,time_limit_s\n"
        "0,100,16,2,8,200\n0,100.02,16,2,8,200\n0,1000,16,2,8,2000\n0,50,32,4,8,200\n"
    )
    placed = {}
    for delay in (0.0, 0.15):
        outcomes = _outcomes(
            tmp_path, rows, "fat-tree:8:4", bf_interval_s=30, main_pass_delay_s=delay
        )
        job = next(o for o in outcomes if o.job.job_id == 4)
        placed[delay] = (job.start, job.nodes)
    assert placed[0.0] == (100.0, ("gpu0001", "gpu0002", "gpu0007", "gpu0008"))
    assert placed[0.15][0] == pytest.approx(100.15)
    assert placed[0.15][1] == ("gpu0001", "gpu0002", "gpu0003", "gpu0004")
