"""Checkpoint-acknowledged preemption in the simulator, against schedules worked out by hand.

Cluster ``fat-tree:2:2``: two 8-GPU nodes under one leaf.  Job 1 (preemptible, 16 GPUs,
1000 s) holds both from t=0; job 2 (not preemptible, 8 GPUs, 100 s) arrives at t=10.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmopt.sim import CommModel, SimResult, read_trace, simulate
from slurmopt.sim.fabrics import parse_fabric_spec
from slurmopt.sim.schedulers import SIM_PREEMPTION

CHECKPOINT_ACK_S = SIM_PREEMPTION.ack_s
RESTART_S = SIM_PREEMPTION.restart_s
HEADER = "submit_s,duration_s,gpus,time_limit_s,priority,preemptible\n"
VICTIM_AND_PREEMPTOR = HEADER + "0,1000,16,2000,0,true\n10,100,8,200,10,false\n"


def _run(tmp_path: Path, text: str, policy: str) -> SimResult:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return simulate(
        read_trace(path, "csv"), parse_fabric_spec("fat-tree:2:2"), policy, CommModel(False)
    )


def _times(result: SimResult) -> dict[int, tuple[float | None, float | None, int]]:
    return {o.job.job_id: (o.start, o.end, o.preempted) for o in result.outcomes}


def test_victim_checkpoints_then_the_preemptor_starts_and_the_victim_resumes(
    tmp_path: Path,
) -> None:
    result = _run(tmp_path, VICTIM_AND_PREEMPTOR, "slurmopt")
    ack = 10 + CHECKPOINT_ACK_S  # the signal goes out when job 2 arrives
    # Job 1 keeps the 10 s it ran before the signal and pays the restart once job 2 is done.
    resumed_end = ack + 100 + (1000 - 10) + RESTART_S
    assert _times(result) == {1: (0.0, resumed_end, 1), 2: (ack, ack + 100, 0)}
    metrics = result.metrics
    assert metrics["preemptions"] == 1
    assert metrics["preemption_lost_gpu_h"] == pytest.approx(
        16 * (CHECKPOINT_ACK_S + RESTART_S) / 3600, abs=0.01
    )
    assert metrics["avg_queue_delay_not_preemptible_s"] == CHECKPOINT_ACK_S


@pytest.mark.parametrize("policy", ["slurmopt:preempt=off", "slurm-backfill-tree"])
def test_without_preemption_the_preemptor_waits_for_the_victim(tmp_path: Path, policy: str) -> None:
    result = _run(tmp_path, VICTIM_AND_PREEMPTOR, policy)
    assert _times(result) == {1: (0.0, 1000.0, 0), 2: (1000.0, 1100.0, 0)}
    assert result.metrics["preemptions"] == 0


def test_a_job_that_is_not_preemptible_is_never_a_victim(tmp_path: Path) -> None:
    text = HEADER + "0,1000,16,2000,0,false\n10,100,8,200,10,false\n"
    assert _times(_run(tmp_path, text, "slurmopt"))[2] == (1000.0, 1100.0, 0)


def test_a_preemptible_job_preempts_only_a_lower_priority_one(tmp_path: Path) -> None:
    higher = HEADER + "0,1000,16,2000,0,true\n10,100,8,200,5,true\n"
    assert _times(_run(tmp_path, higher, "slurmopt"))[1][2] == 1
    equal = HEADER + "0,1000,16,2000,5,true\n10,100,8,200,5,true\n"
    assert _times(_run(tmp_path, equal, "slurmopt"))[1][2] == 0


def test_victim_that_ends_before_it_acknowledges_is_not_requeued(tmp_path: Path) -> None:
    text = HEADER + "0,30,16,60,0,true\n10,100,8,200,10,false\n"
    times = _times(_run(tmp_path, text, "slurmopt"))
    assert times[1] == (0.0, 30.0, 0)
    assert times[2] == (30.0, 130.0, 0)


def test_no_preemption_when_the_reservation_comes_before_it_would_pay(tmp_path: Path) -> None:
    # Job 1's limit ends at 200: job 2 gains 8 x (200 - 10 - 60) GPU-s by preempting, less
    # than the 16 x (60 + 120) GPU-s job 1 would spend on the checkpoint and restart.
    text = HEADER + "0,100,16,200,0,true\n10,100,8,200,10,false\n"
    times = _times(_run(tmp_path, text, "slurmopt"))
    assert times == {1: (0.0, 100.0, 0), 2: (100.0, 200.0, 0)}


@pytest.mark.timeout(30)  # the thrash this guards against never ends
def test_requeued_victim_does_not_take_back_the_nodes_freed_for_its_preemptor(
    tmp_path: Path,
) -> None:
    # Job 1 is older and of equal priority; planned first it would restart at once.
    text = HEADER + "0,1000,16,2000,0,true\n10,100,16,200,0,false\n"
    times = _times(_run(tmp_path, text, "slurmopt"))
    assert times[2] == (10 + CHECKPOINT_ACK_S, 10 + CHECKPOINT_ACK_S + 100, 0)
    assert times[1][2] == 1


def test_a_requeued_job_counts_as_waiting_for_the_stranded_gpus_it_could_use() -> None:
    from slurmopt.sim.cluster import SimCluster
    from slurmopt.sim.traces import TraceJob

    cluster = SimCluster(parse_fabric_spec("fat-tree:2:2"), 8)
    nodes = cluster.node_names
    small = TraceJob(1, 0.0, 100.0, 1, 3, 200, 3, preemptible=True)
    big = TraceJob(2, 0.0, 100.0, 1, 8, 200, 8)
    cluster.submit(small)
    cluster.submit(big)
    cluster.start(1, (nodes[0],), 0.0)  # 5 GPUs stranded on nodes[0]; the 8-GPU job waits
    assert cluster.stranded == 5 and cluster.stranded_usable == 0  # too few for 8
    cluster.start(2, (nodes[1],), 0.0)
    assert cluster.stranded_usable == 0  # nobody waits
    cluster.submit(TraceJob(3, 1.0, 100.0, 1, 2, 200, 2))
    assert cluster.stranded_usable == 5  # a 2-GPU job waits beside 5 free GPUs
    cluster.start(3, (nodes[0],), 1.0)
    cluster.requeue(1)  # the 3-GPU job checkpointed: it waits again, 6 GPUs free beside job 3
    assert (cluster.stranded, cluster.stranded_usable) == (6, 6)
    cluster.finish(3)
    assert cluster.stranded_usable == 0  # nodes[0] is whole again: not stranded
