"""The simulator against schedules worked out by hand on tiny traces.

Clusters: ``fat-tree:4:4`` is four 8-GPU nodes under one leaf;
``fat-tree:4:2`` is two leaves of two nodes.  Every fixture job states its
time limit, which is what the schedulers plan with.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmopt.sim import CommModel, SimResult, read_trace, simulate
from slurmopt.sim.comm import Stretcher
from slurmopt.sim.fabrics import parse_fabric_spec
from slurmopt.sim.traces import TraceError

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
OFF = CommModel(enabled=False)


def _run(trace: str, fabric: str, policy: str, **kw: object) -> SimResult:
    comm = kw.pop("comm", OFF)
    assert isinstance(comm, CommModel)
    return simulate(
        read_trace(TRACES / trace, "csv"),
        parse_fabric_spec(fabric),
        policy,
        comm,
        **kw,  # type: ignore[arg-type]
    )


def _fifo_metrics(tmp_path: Path, rows: str, fabric: str) -> dict[str, object]:
    """slurm-fifo's metrics for csv ``rows`` (submit_s,duration_s,gpus,time_limit_s)."""
    trace = tmp_path / "t.csv"
    trace.write_text("submit_s,duration_s,gpus,time_limit_s\n" + rows)
    return simulate(read_trace(trace, "csv"), parse_fabric_spec(fabric), "slurm-fifo").metrics


def _starts(result: SimResult) -> dict[int, float | None]:
    return {o.job.job_id: o.start for o in result.outcomes}


def test_fifo_keeps_priority_order_and_never_backfills() -> None:
    # Job 1 takes 3 of 4 nodes until 100; job 2 (2 nodes) waits; job 3 (1 node, 10 s)
    # would fit on the 4th node now, but FIFO keeps it behind job 2.
    result = _run("backfill.csv", "fat-tree:4:4", "slurm-fifo")
    assert _starts(result) == {1: 0.0, 2: 100.0, 3: 100.0}
    assert result.metrics["avg_queue_delay_s"] == pytest.approx((0 + 99 + 98) / 3, abs=0.01)


@pytest.mark.parametrize("policy", ["slurmopt", "slurm-backfill-tree"])
def test_short_job_backfills_onto_the_idle_node(policy: str) -> None:
    # Job 3 ends (limit 10 s) long before job 2's reservation at 100: it must start at once.
    result = _run("backfill.csv", "fat-tree:4:4", policy, bf_interval_s=0)
    assert _starts(result) == {1: 0.0, 2: 100.0, 3: 2.0}


def test_slurm_backfill_runs_every_bf_interval() -> None:
    # The main scheduler stops at job 2; job 3 waits for the next backfill pass at t=30.
    result = _run("backfill.csv", "fat-tree:4:4", "slurm-backfill-tree", bf_interval_s=30)
    assert _starts(result) == {1: 0.0, 2: 100.0, 3: 30.0}


@pytest.mark.parametrize("policy", ["slurmopt", "slurm-backfill-tree", "slurm-fifo"])
def test_backfill_that_would_delay_the_reservation_does_not_happen(policy: str) -> None:
    # Job 2 needs all 4 nodes from 100 (when job 1's limit ends); job 3's limit of 200 s
    # would hold the free node past 100, so it waits until job 2 is done at 150.
    result = _run("no-backfill.csv", "fat-tree:4:4", policy, bf_interval_s=0)
    assert _starts(result) == {1: 0.0, 2: 100.0, 3: 150.0}


def test_slurmopt_waits_for_one_leaf_where_slurm_spreads_and_pays_the_comm_penalty() -> None:
    # Jobs 1 and 3 hold gpu0001 (leaf1) and gpu0003 (leaf2) until ~1000; job 2 frees gpu0002
    # at 10.  At 20 the 2-node job 4 (limit 2000 s) finds one free node on each leaf.
    on = CommModel()
    slurm = _run("two-leaves.csv", "fat-tree:4:2", "slurm-backfill-tree", comm=on, bf_interval_s=0)
    job4 = slurm.outcomes[3]
    assert job4.start == 20.0 and job4.leaves == 2
    # 16 GPUs: share 0.15; one extra level and one extra leaf: 0.85 + 0.15 * 1.6 = 1.09.
    assert job4.stretch == pytest.approx(1.09)
    assert job4.end == pytest.approx(20 + 109.0)
    off = _run("two-leaves.csv", "fat-tree:4:2", "slurm-backfill-tree", bf_interval_s=0)
    assert off.outcomes[3].end == pytest.approx(120.0)
    planned = _run("two-leaves.csv", "fat-tree:4:2", "slurmopt:compact_wait_share=0.5", comm=on)
    job4 = planned.outcomes[3]
    # Allowed to wait half its limit for one leaf, the planner keeps the gang on one leaf: leaf1
    # frees at 1000, 980 s away, within half the job's limit, so it waits and runs unstretched.
    assert (job4.start, job4.leaves, job4.stretch, job4.end) == (1000.0, 1, 1.0, 1100.0)
    assert planned.metrics["avg_leaves_spanned_multinode"] == 1.0
    assert slurm.metrics["avg_leaves_spanned_multinode"] == 2.0
    # By default (compact_wait_share 0) a gang that can start now on two leaves does.
    default = _run("two-leaves.csv", "fat-tree:4:2", "slurmopt", comm=on).outcomes[3]
    assert (default.start, default.leaves) == (20.0, 2)


def test_slurmopt_spreads_a_gang_when_one_leaf_frees_too_late(tmp_path: Path) -> None:
    # The same cluster, but job 4's limit is 200 s: waiting 980 s for one leaf is over half of
    # it, so the planner spreads the gang now, as Slurm does, and pays the penalty.
    rows = (TRACES / "two-leaves.csv").read_text().replace("20,100,16,2000", "20,100,16,200")
    trace = tmp_path / "late.csv"
    trace.write_text(rows)
    policy = "slurmopt:compact_wait_share=0.5"
    result = simulate(read_trace(trace, "csv"), parse_fabric_spec("fat-tree:4:2"), policy)
    job4 = result.outcomes[3]
    assert (job4.start, job4.leaves) == (20.0, 2)
    assert job4.stretch == pytest.approx(1.09)


def test_gang_goes_on_the_leaf_that_holds_it_whole(tmp_path: Path) -> None:
    trace = tmp_path / "gang.csv"
    trace.write_text(
        "submit_s,duration_s,gpus,time_limit_s\n0,500,8,500\n0,500,8,500\n1,100,32,100\n"
    )
    fabric = parse_fabric_spec("fat-tree:8:4")
    for policy in ("slurmopt", "slurm-backfill-tree"):
        result = simulate(read_trace(trace, "csv"), fabric, policy, OFF, bf_interval_s=0)
        gang = result.outcomes[2]
        # Two nodes of leaf1 are busy: the 4-node gang takes leaf2 whole, at once.
        assert gang.start == 1.0 and gang.leaves == 1, policy


def test_comm_model_stretches_a_two_leaf_job_more_on_an_oversubscribed_fabric() -> None:
    flat = Stretcher(CommModel(), parse_fabric_spec("fat-tree:4:2"))
    assert flat.factor(["gpu0001", "gpu0002"], 16) == (1.0, 1)
    assert flat.factor(["gpu0001", "gpu0003"], 16) == pytest.approx((1.09, 2))
    oversub = Stretcher(CommModel(), parse_fabric_spec("fat-tree:4:2:2"))
    # Half the bandwidth across the spine: the communication part takes 2 x 1.6 as long.
    assert oversub.factor(["gpu0001", "gpu0003"], 16) == pytest.approx((0.85 + 0.15 * 3.2, 2))
    off = Stretcher(CommModel(enabled=False), parse_fabric_spec("fat-tree:4:2:2"))
    assert off.factor(["gpu0001", "gpu0003"], 16) == (1.0, 2)


def test_stretched_job_past_its_limit_is_cut_at_the_limit(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "submit_s,duration_s,gpus,time_limit_s\n"
        "0,1000,8,1000\n0,10,8,10\n1,1000,8,1000\n20,100,16,100\n"
    )
    fabric = parse_fabric_spec("fat-tree:4:2")
    result = simulate(read_trace(trace, "csv"), fabric, "slurm-backfill-tree", bf_interval_s=0)
    job4 = result.outcomes[3]
    assert job4.timed_out and job4.end == pytest.approx(120.0)
    assert result.metrics["timed_out"] == 1


def test_metrics_cover_the_whole_run() -> None:
    result = _run("backfill.csv", "fat-tree:4:4", "slurmopt", bf_interval_s=0)
    m = result.metrics
    assert (m["jobs"], m["finished"], m["never_started"]) == (3, 3, 0)
    assert m["makespan_s"] == 200.0
    # GPU-seconds: 24*100 + 16*100 + 8*10 over 32 GPUs x 200 s.
    assert m["gpu_allocation_ratio"] == pytest.approx((2400 + 1600 + 80) / (32 * 200), abs=1e-4)
    assert m["avg_stranded_gpus"] == 0.0
    assert m["multinode_jobs"] == 2
    assert m["avg_wait_multinode_s"] == pytest.approx(49.5)
    assert m["max_wait_multinode_s"] == 99.0  # the gang that waited; the other started at once
    assert m["p95_queue_delay_s"] == 99.0
    assert result.series[0]["t_s"] == 0.0 and len(result.series) == 100


def test_job_larger_than_the_cluster_is_skipped_not_waited_for(tmp_path: Path) -> None:
    trace = tmp_path / "big.csv"
    trace.write_text("submit_s,duration_s,gpus\n0,10,64\n1,10,8\n")
    result = simulate(read_trace(trace, "csv"), parse_fabric_spec("fat-tree:4:4"), "slurmopt")
    assert result.metrics["skipped_too_big"] == 1
    assert result.metrics["finished"] == 1


def test_stranded_gpus_over_the_run_and_while_jobs_wait(tmp_path: Path) -> None:
    # One 8-GPU node: a 4-GPU job runs 0-100 and leaves 4 GPUs free on a partly used node
    # while an 8-GPU job waits; the 8-GPU job then runs 100-150 with nothing waiting.
    m = _fifo_metrics(tmp_path, "0,100,4,100\n0,50,8,50\n", "fat-tree:1:1")
    assert m["avg_stranded_gpus"] == pytest.approx(4 * 100 / 150, abs=0.01)
    assert m["avg_stranded_gpus_when_queued"] == 4.0


def test_stranded_gpus_split_by_whether_a_waiting_job_could_use_them(tmp_path: Path) -> None:
    # One 8-GPU node, FIFO (no backfill), every job submitted at 0: a 6-GPU job, an 8-GPU
    # job and a 3-GPU job. 0-100: the 6-GPU job runs, 2 GPUs stranded, the others wait and
    # each asks for more than 2. 100-150: the 8-GPU job, nothing stranded, the 3-GPU job
    # waits. 150-200: the 3-GPU job, 5 stranded with nobody waiting.
    m = _fifo_metrics(tmp_path, "0,100,6,100\n0,50,8,50\n0,50,3,50\n", "fat-tree:1:1")
    assert m["avg_stranded_gpus"] == pytest.approx((2 * 100 + 5 * 50) / 200)
    assert m["stranded_share_queue_empty"] == pytest.approx(250 / 450, abs=1e-4)
    assert m["avg_stranded_gpus_usable_when_queued"] == 0.0
    assert m["avg_idle_gpus_when_queued"] == pytest.approx(8 - (6 * 100 + 8 * 50) / 150, abs=0.01)
    # A 1-GPU job in place of the 3-GPU one fits the 2 stranded GPUs it waits beside (0-100).
    m = _fifo_metrics(tmp_path, "0,100,6,100\n0,50,8,50\n0,50,1,50\n", "fat-tree:1:1")
    assert m["avg_stranded_gpus_usable_when_queued"] == pytest.approx(2 * 100 / 150, abs=0.01)


def test_stranded_floor_is_what_perfect_packing_of_the_running_jobs_leaves(
    tmp_path: Path,
) -> None:
    # Two 8-GPU nodes, FIFO by index: 2+6 GPUs fill the first, 2+6 the second (0-50, nothing
    # stranded). The 6-GPU jobs end at 50: each node keeps one 2-GPU job, 12 GPUs stranded,
    # while both 2-GPU jobs on one node would strand 4 (the floor, -(2+2) mod 8).
    rows = "0,100,2,100\n0,50,6,50\n0,100,2,100\n0,50,6,50\n"
    m = _fifo_metrics(tmp_path, rows, "fat-tree:2:2")
    assert m["avg_stranded_gpus"] == pytest.approx(12 * 50 / 100)
    assert m["avg_stranded_gpus_floor"] == pytest.approx(4 * 50 / 100)


def test_stranded_floor_counts_only_jobs_smaller_than_a_node(tmp_path: Path) -> None:
    # A 16-GPU gang (two whole nodes) and a 1-GPU job on a third node: 7 stranded, floor 7;
    # the 1-GPU job alone after the gang ends strands 7 as well, so both average 7.
    m = _fifo_metrics(tmp_path, "0,50,16,50\n0,100,1,100\n", "fat-tree:4:4")
    assert m["avg_stranded_gpus"] == pytest.approx(7.0)
    assert m["avg_stranded_gpus_floor"] == pytest.approx(7.0)


def test_elastic_job_starts_on_the_nodes_free_and_runs_longer(tmp_path: Path) -> None:
    # Four 8-GPU nodes. Job 1 holds 2 of them for 1000 s (limit 1000). Job 2 asks for 4 nodes,
    # elastic from 2, run time 300 s on 4 (limit 1200 s: its budget on 2). On the 2 free nodes
    # it ends at 600 s; waiting for all 4 it would end at 1000 + 300 = 1300 s. So slurmopt
    # starts it on 2 at once (it runs 300 x 4/2 = 600 s); without elastic starts it waits.
    trace = tmp_path / "t.csv"
    trace.write_text(
        "submit_s,duration_s,gpus,nodes,time_limit_s,min_nodes\n"
        "0,1000,16,2,1000,\n"
        "0,300,32,4,1200,2\n"
    )
    fabric = parse_fabric_spec("fat-tree:4:4")
    result = simulate(read_trace(trace, "csv"), fabric, "slurmopt", bf_interval_s=0)
    job = result.outcomes[1]
    assert (job.start, job.end, len(job.nodes)) == (0.0, 600.0, 2)
    assert result.metrics["elastic_smaller_starts"] == 1
    rigid = simulate(read_trace(trace, "csv"), fabric, "slurmopt:elastic=off", bf_interval_s=0)
    assert (rigid.outcomes[1].start, rigid.outcomes[1].end) == (1000.0, 1300.0)
    base = simulate(read_trace(trace, "csv"), fabric, "slurm-backfill-tree", bf_interval_s=0)
    assert base.outcomes[1].start == 1000.0 and base.metrics["elastic_smaller_starts"] == 0


def test_csv_min_nodes_must_lie_within_the_nodes(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("submit_s,duration_s,gpus,nodes,min_nodes\n0,10,16,2,3\n")
    with pytest.raises(TraceError, match="min_nodes 3 must be between 1 and nodes 2"):
        read_trace(trace, "csv")


def test_skip_jobs_reads_a_later_window_from_its_own_first_submit(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("submit_s,duration_s,gpus\n0,10,1\n5,20,2\n9,30,4\n12,40,8\n")
    window = read_trace(trace, "csv", limit_jobs=2, skip_jobs=1)
    got = [(j.job_id, j.submit_s, j.duration_s, j.gpus) for j in window.jobs]
    assert got == [(1, 0.0, 20.0, 2), (2, 4.0, 30.0, 4)]
