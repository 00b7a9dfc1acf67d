"""The pure parts of ``benchmarks.live_ab``: compression, metrics, the ratio table."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.live_ab import (
    GAP_POINTS,
    Context,
    RatioRow,
    Row,
    Sample,
    compress,
    job_metrics,
    likely_cause,
    parse_ctld_starts,
    parse_jobcomp,
    parse_squeue,
    pin_latency,
    ratio,
    ratio_table,
    render_report,
    render_table,
    rows_from_jobcomp,
    sample_metrics,
    sbatch_args,
    scheduler_params,
    sim_trace,
    store_pins,
)
from slurmopt.sim import Trace, TraceJob


def _job(i: int, submit: float, duration: float, nodes: int, per_node: int, limit: int) -> TraceJob:
    return TraceJob(i, submit, duration, nodes, per_node, limit, nodes * per_node)


def _trace(*jobs: TraceJob) -> Trace:
    return Trace("t", "csv", jobs)


def test_compress_divides_times_and_rounds_limits_up() -> None:
    trace = _trace(_job(1, 0, 3600, 1, 4, 7200), _job(2, 600, 30, 2, 8, 1800))
    w = compress(trace, 60, cluster_nodes=32, gpus_per_node=8)
    a, b = w.jobs
    assert (a.submit_s, a.sleep_s, a.time_limit_min) == (0.0, 60.0, 2)
    assert (b.submit_s, b.sleep_s, b.time_limit_min) == (
        10.0,
        1.0,
        1,
    )  # 0.5 s -> 1 s; 30 s -> 1 min
    assert (b.nodes, b.gpus_per_node) == (2, 8)
    assert w.dropped_too_big == 0 and w.source_jobs == 2


def test_compress_limit_never_below_the_sleep() -> None:
    w = compress(_trace(_job(1, 0, 600, 1, 1, 60)), 1, cluster_nodes=1, gpus_per_node=8)
    assert w.jobs[0].time_limit_min == 10


def test_compress_drops_jobs_the_cluster_cannot_hold_and_renumbers() -> None:
    trace = _trace(
        _job(1, 0, 60, 40, 8, 3600), _job(2, 5, 60, 1, 16, 3600), _job(3, 9, 60, 4, 8, 3600)
    )
    w = compress(trace, 1, cluster_nodes=32, gpus_per_node=8)
    assert w.dropped_too_big == 2
    assert [(j.index, j.nodes) for j in w.jobs] == [(1, 4)]


def test_compress_refuses_a_bad_factor() -> None:
    with pytest.raises(ValueError):
        compress(_trace(), 0, 1, 8)


def test_sim_trace_keeps_the_workload_and_ranks_earlier_first() -> None:
    w = compress(_trace(_job(1, 0, 120, 1, 2, 3600), _job(2, 60, 60, 2, 8, 3600)), 2, 32, 8)
    t = sim_trace(w)
    assert [(j.submit_s, j.duration_s, j.nodes, j.time_limit_s) for j in t.jobs] == [
        (0.0, 60.0, 1, 1800),
        (30.0, 30.0, 2, 1800),
    ]
    assert t.jobs[0].priority > t.jobs[1].priority


def test_sbatch_args_ask_for_nodes_gpus_limit_and_sleep() -> None:
    w = compress(_trace(_job(1, 0, 90, 3, 8, 3600)), 1, 32, 8)
    args = sbatch_args(w.jobs[0], "plain7", "/tmp/jobs")
    assert args[args.index("-N") + 1] == "3"
    assert "--gres=gpu:8" in args and "--time=60" in args
    assert args[-2:] == ["--wrap", "sleep 90"]
    assert args[args.index("-J") + 1] == "liveab-plain7-1"


def _comp(job: int, name: str, state: str, start: str, end: str, nodes: str, count: int) -> str:
    return (
        f"JobId={job} UserId=root(0) GroupId=root(0) Name={name} JobState={state} Partition=gpu "
        f"TimeLimit=1 StartTime=2026-12-04T{start} EndTime=2026-12-04T{end} NodeList={nodes} "
        f"NodeCnt={count} ProcCnt={count} SubmitTime=2026-12-04T10:00:00 "
        "EligibleTime=2026-12-04T10:00:05"
    )


JOBCOMP = "\n".join(
    [
        _comp(7, "liveab-p-1", "COMPLETED", "10:00:10", "10:00:40", "gpu001", 1),
        _comp(8, "liveab-p-2", "TIMEOUT", "10:00:20", "10:01:20", "gpu[002-003]", 2),
        _comp(9, "someone-else", "COMPLETED", "10:00:20", "10:01:20", "gpu004", 1),
        "garbage line",
    ]
)


def test_rows_from_jobcomp_read_the_raw_submit_time_and_only_our_jobs() -> None:
    records = parse_jobcomp(JOBCOMP)
    assert len(records) == 3
    rows = rows_from_jobcomp(records, {7: "liveab-p-1", 8: "liveab-p-2", 9: "liveab-p-3"})
    assert [r.job_id for r in rows] == [7, 8]  # job 9's name is not ours: a reused id
    first, second = rows
    assert first.start - first.submit == 10  # SubmitTime, not EligibleTime
    assert (second.nodes, second.state) == (2, "TIMEOUT")


def test_job_metrics_from_hand_made_rows() -> None:
    rows = [
        Row(1, submit=0, start=0, end=10, nodes=1, state="COMPLETED"),
        Row(2, submit=0, start=20, end=50, nodes=2, state="COMPLETED"),
        Row(3, submit=10, start=14, end=20, nodes=4, state="COMPLETED"),
        Row(4, submit=10, start=10, end=30, nodes=1, state="TIMEOUT"),
    ]
    m = job_metrics(rows)
    assert m["jobs"] == 4 and m["not_completed"] == 1
    assert m["mean_jct_s"] == (10 + 50 + 10 + 20) / 4
    assert m["p95_queue_delay_s"] == 20  # nearest rank of [0, 0, 4, 20]
    assert m["multinode_jobs"] == 2 and m["mean_wait_multinode_s"] == 12
    assert m["makespan_s"] == 50


def test_job_metrics_of_nothing() -> None:
    m = job_metrics([])
    assert m["jobs"] == 0 and m["mean_jct_s"] is None and m["mean_wait_multinode_s"] is None


SQUEUE = """\
11|RUNNING|gpu[001-002]|gres:gpu:8|liveab-x-1
12|RUNNING|gpu003|gres:gpu:3|liveab-x-2
13|RUNNING|gpu003|gres:gpu:2|liveab-x-3
14|PENDING||gres:gpu:8|liveab-x-4
15|PENDING||gres:gpu:1|other
16|COMPLETED|gpu004|gres:gpu:1|liveab-x-5
"""


def test_parse_squeue_sums_gpus_per_node_and_counts_our_waiting_jobs() -> None:
    s = parse_squeue(SQUEUE, 3.0, prefix="liveab-x-")
    assert s.t == 3.0 and s.pending == 1
    assert dict(s.allocated) == {"gpu001": 8, "gpu002": 8, "gpu003": 5}


def test_sample_metrics_weigh_by_time_and_count_only_while_jobs_wait() -> None:
    samples = [
        Sample(0, pending=1, allocated={"a": 8, "b": 5}),  # 3 stranded, 13 of 16 for 2 s
        Sample(2, pending=0, allocated={"a": 1}),  # nobody waits: not counted
        Sample(6, pending=2, allocated={"a": 6, "b": 7}),  # 2 + 1 stranded, 13 of 16 for 1 s
        Sample(7, pending=0, allocated={}),
    ]
    m = sample_metrics(samples, nodes=2, gpus_per_node=8)
    assert m["stranded_gpus_when_queued"] == round((2 * 3 + 1 * 3) / 3, 2)
    assert m["gpu_allocation_when_queued"] == round((2 * 13 + 1 * 13) / (16 * 3), 4)
    assert m["queued_time_share"] == round(3 / 7, 4)


def test_sample_metrics_without_a_queue() -> None:
    m = sample_metrics([Sample(0, 0, {}), Sample(3, 0, {"a": 2})], nodes=1, gpus_per_node=8)
    assert m["stranded_gpus_when_queued"] is None and m["gpu_allocation_when_queued"] is None


def test_ratio() -> None:
    assert ratio(3, 4) == 0.75
    assert ratio(None, 4) is None and ratio(3, 0) is None and ratio(3, None) is None


def test_ratio_table_compares_live_and_simulated_and_explains_gaps() -> None:
    plain = {
        "mean_jct_s": 100.0,
        "p95_queue_delay_s": 50.0,
        "mean_wait_multinode_s": 40.0,
        "stranded_gpus_when_queued": 10.0,
        "gpu_allocation_when_queued": 0.9,
    }
    ours = {
        "mean_jct_s": 90.0,
        "p95_queue_delay_s": 50.0,
        "mean_wait_multinode_s": 20.0,
        "stranded_gpus_when_queued": 5.0,
        "gpu_allocation_when_queued": 0.9,
    }
    sim_plain = {
        "avg_jct_s": 100.0,
        "p95_queue_delay_s": 40.0,
        "avg_wait_multinode_s": 40.0,
        "avg_stranded_gpus_when_queued": 10.0,
        "gpu_allocation_ratio_when_queued": 0.8,
    }
    sim_ours = {
        "avg_jct_s": 92.0,
        "p95_queue_delay_s": 30.0,
        "avg_wait_multinode_s": 30.0,
        "avg_stranded_gpus_when_queued": 5.0,
        "gpu_allocation_ratio_when_queued": 0.8,
    }
    rows = {
        r.key: r for r in ratio_table(plain, ours, sim_plain, sim_ours, Context(multinode_jobs=3))
    }
    jct = rows["mean_jct_s"]
    assert (jct.live, jct.simulated, jct.gap_points, jct.cause) == (0.9, 0.92, -2.0, None)
    p95 = rows["p95_queue_delay_s"]
    assert p95.gap_points == 25.0 and p95.cause is not None
    gang = rows["mean_wait_multinode_s"]
    assert gang.gap_points == -25.0 and gang.cause is not None and "3 multi-node" in gang.cause
    assert rows["stranded_gpus_when_queued"].gap_points == 0.0
    assert all(abs(r.gap_points or 0) <= GAP_POINTS or r.cause for r in rows.values())
    text = render_table(list(rows.values()))
    assert "| mean JCT (s) | 100.0 | 90.0 | 0.900 | 0.920 | -2.0 |" in text
    assert "likely cause" in text


def test_a_wait_gap_names_the_daemons_cycle_as_unmodelled_only_when_it_was_not_simulated() -> None:
    row = RatioRow("mean_jct_s", "mean JCT (s)", 10.0, 12.0, 1.2, 10.0, 10.0, 1.0, 20.0)
    ctx = Context(daemon_interval_s=2.0)
    assert "which the simulator does not model" in likely_cause(row, ctx)
    simulated = likely_cause(row, Context(daemon_interval_s=2.0, cycle_simulated=True))
    assert "every 2 s" in simulated and "does not model" not in simulated


def test_ratio_table_takes_a_named_cause_and_leaves_missing_figures_blank() -> None:
    ctx = Context(causes={"mean_jct_s": "because"})
    rows = ratio_table(
        {"mean_jct_s": 10.0}, {"mean_jct_s": 20.0}, {"avg_jct_s": 10.0}, {"avg_jct_s": 10.0}, ctx
    )
    assert rows[0].cause == "because"
    assert rows[1].live is None and rows[1].gap_points is None and rows[1].cause is None


def test_scheduler_params_read_scontrol_and_default_the_rest() -> None:
    p = scheduler_params(
        "Foo = 1\nSchedulerParameters     = bf_interval=5,sched_interval=5,max_switch_wait=3600\n"
    )
    assert p == {
        "bf_interval": 5.0,
        "bf_window_min": 1440.0,
        "bf_max_job_test": 500.0,
        "sched_interval": 5.0,
    }
    assert scheduler_params("")["bf_interval"] == 30.0


def test_render_report_from_a_saved_report() -> None:
    live = {
        "jobs": 2,
        "unfinished": 0,
        "makespan_s": 60.0,
        "mean_queue_delay_s": 1.0,
        "submit_lag_p95_s": 0.0,
        "mean_jct_s": 20.0,
        "p95_queue_delay_s": 2.0,
    }
    ours = {**live, "mean_queue_delay_s": 3.0, "mean_jct_s": 30.0}
    sim = {"avg_jct_s": 20.0, "makespan_s": 60.0}
    report = {
        "trace": "t.csv",
        "trace_format": "csv",
        "window": {"skip": 10, "jobs": 2},
        "compress": 100.0,
        "jobs": 2,
        "multinode_jobs": 0,
        "dropped_too_big": 1,
        "last_arrival_s": 5.0,
        "mean_sleep_s": 20.0,
        "daemon_interval_s": 2.0,
        "slurm": {"sched_interval": 5.0},
        "live": {"plain": live, "slurmopt": ours},
        "simulated": {"slurm-backfill-tree": sim, "slurmopt": sim},
    }
    text = render_report(report)
    assert "jobs 11-12 by submit, compressed x100: 2 jobs (0 multi-node, 1 dropped too big)" in text
    assert "| mean JCT (s) | 20.0 | 30.0 | 1.500 | 1.000 | +50.0 |" in text
    assert "every 2 s" in text and "2.0 s longer" in text
    assert "pin latency" not in text  # a report from before it was measured
    pin = {"jobs": 2, "median_s": 1.3, "p95_s": 3.2, "mean_s": 1.45, "max_s": 3.3}
    report["live"] = {"plain": live, "slurmopt": {**ours, "pin_latency": pin}}
    assert "2 jobs): median 1.3 s, p95 3.2 s, mean 1.45 s, max 3.3 s" in render_report(report)


CTLD_LOG = """\
[2026-12-04T10:00:01.250] _slurm_rpc_submit_batch_job: JobId=11 InitPrio=4294901759 usec=300
[2026-12-04T10:00:02.600] sched: Allocate JobId=11 NodeList=gpu001 #CPUs=1 Partition=gpu
[2026-12-04T10:00:03.050] sched/backfill: _start_job: Started JobId=12 in gpu on gpu[002-003]
[2026-12-04T10:00:09.500] sched: Allocate JobId=11 NodeList=gpu004 #CPUs=1 Partition=gpu
[2026-12-04T10:00:09.900] _job_complete: JobId=12 WEXITSTATUS 0
"""


def test_parse_ctld_starts_reads_allocations_and_backfill_starts_to_the_millisecond() -> None:
    starts = parse_ctld_starts(CTLD_LOG)
    t0 = time.mktime(time.strptime("2026-12-04T10:00:00", "%Y-%m-%dT%H:%M:%S"))
    assert set(starts) == {11, 12}  # submissions and completions are not starts
    assert starts[11] == pytest.approx([t0 + 2.6, t0 + 9.5])  # requeued: both kept
    assert starts[12] == pytest.approx([t0 + 3.05])


def test_pin_latency_runs_from_the_pinning_cycle_to_the_first_start_after_it() -> None:
    starts = {1: [10.0, 30.5], 2: [21.25], 3: [5.0], 4: [40.0]}
    # Job 1 was started before (an earlier run of the id) and again 0.5 s after its pin;
    # job 3 started only before its pin (never after): left out; job 5 never started.
    pinned = {1: 30.0, 2: 20.0, 3: 8.0, 4: 38.0, 5: 50.0}
    got = pin_latency(pinned, starts)
    assert got["jobs"] == 3
    assert got["median_s"] == 1.25 and got["max_s"] == 2.0
    assert got["mean_s"] == pytest.approx((0.5 + 1.25 + 2.0) / 3, abs=0.01)
    assert pin_latency({}, starts) == {
        "jobs": 0, "median_s": None, "p95_s": None, "mean_s": None, "max_s": None,
    }  # fmt: skip


def test_store_pins_takes_each_jobs_last_pin_from_a_runs_store(tmp_path: Path) -> None:
    from slurmopt.store import ManagedJobState, Store, register_job, transition

    store = Store.open(f"sqlite:///{tmp_path}/slurmopt.db")
    with store.begin() as session:
        for job_id in (1, 2):
            register_job(session, job_id, 100.0, key=f"{job_id}:hold", now=100.0)
        transition(session, 1, ManagedJobState.PINNED, "BEST_FIT_NODE", "", "1:pin:0", now=102.0)
        # Job 1's pin was undone and made again a cycle later: the later one counts.
        transition(session, 1, ManagedJobState.WAITING, "unpinned", "", "1:unpin:0", now=103.0)
        transition(session, 1, ManagedJobState.PINNED, "BEST_FIT_NODE", "", "1:pin:1", now=104.0)
        transition(session, 1, ManagedJobState.RUNNING, "started", "", "1:run:0", now=106.0)
    store.engine.dispose()
    assert store_pins(str(tmp_path)) == {1: 104.0}  # job 2 was never pinned
