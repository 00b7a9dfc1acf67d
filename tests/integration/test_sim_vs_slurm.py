"""The simulated ``slurm-backfill-tree`` against the real Slurm of the sandbox, on one workload.

Thirty ``sleep`` jobs (whole-node gangs of 2-12 nodes and single-node jobs of
1-8 GPUs, 15-120 s, limits of 3 or 6 min) are submitted held, in priority
order, and released together once Slurm's schedulers are idle again, so both
sides see the same queue at the same instant, from an idle controller.  Real
Slurm's start times and nodes come from its job-completion log
(``sacct -c``); the simulator replays the same jobs (each with the run time
Slurm measured) on the sandbox's own topology and backfill settings.  A job
agrees when it starts on the same nodes and in the same place of the start
order: after the same jobs, where starts less than :data:`WAVE_S` apart count
as simultaneous (one wave).  Comparing the jobs before it, not the number of
its wave, keeps one extra wave early on from counting against every later job.

Slurm's passes run on timers whose phase against the workload the simulator
cannot know (the backfill agent every ``bf_interval`` from its last pass, the
main scheduler every ``sched_interval`` and ``batch_sched_delay`` after job
ends), so a start can come a few seconds later than the simulator's and, if
another job ends meanwhile, on other nodes.  Jobs last minutes (the 5-40 s of
the first version of this test, stretched by :data:`STRETCH`) so that such
shifts rarely change the outcome; one run can still differ from the next.
Every difference is printed; ``docs/simulator.md`` lists those of the last run.
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest

from slurmopt.hostlist import expand
from slurmopt.sim import Trace, TraceJob, simulate
from slurmopt.sim.comm import CommModel
from slurmopt.sim.fabrics import parse_fabric_spec
from tests.sandbox import SlurmSandbox

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

JOBS = 30
#: Starts closer than this (s) count as one wave: Slurm logs whole seconds, and its passes
#: come a second or more after the event that allows them, the simulator's at that instant.
WAVE_S = 3.0
AGREEMENT = 0.9
#: Independent real runs pooled for the agreement (one takes about 4 min).
RUNS = 1
#: Job times are drawn as 5-40 s and limits of 1 or 2 min, then stretched by this.
STRETCH = 3
#: (nodes, GPUs per node) and how often each is drawn.
SHAPES = [((1, 1), 3), ((1, 2), 2), ((1, 4), 3), ((1, 8), 2), ((2, 8), 2), ((4, 8), 2),
          ((8, 8), 2), ((12, 8), 1)]  # fmt: skip


def _workload() -> list[tuple[int, int, int, int]]:
    """(nodes, GPUs per node, sleep s, limit min) per job, in submit order; fixed seed."""
    rng = random.Random(2023)
    shapes = [s for s, _ in SHAPES]
    weights = [w for _, w in SHAPES]
    return [
        (
            *rng.choices(shapes, weights)[0],
            STRETCH * rng.randint(5, 40),
            STRETCH * rng.choice((1, 2)),
        )
        for _ in range(JOBS)
    ]


def _stamp(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def _params(slurm: SlurmSandbox) -> dict[str, float]:
    """bf_interval (default 30) and bf_window (default 1440 min) from SchedulerParameters."""
    line = next(
        row for row in slurm.run("scontrol", "show", "config").splitlines()
        if row.startswith("SchedulerParameters")
    )  # fmt: skip
    found = dict(re.findall(r"(\w+)=(\d+)", line.split("=", 1)[1]))
    return {
        "bf_interval": float(found.get("bf_interval", 30)),
        "bf_window_min": float(found.get("bf_window", 1440)),
        "bf_max_job_test": float(found.get("bf_max_job_test", 500)),
    }


def _completions(slurm: SlurmSandbox, ids: list[int]) -> dict[int, dict[str, str]]:
    out = slurm.run(
        "sacct", "-c", "-j", ",".join(map(str, ids)), "-P", "-n",
        "--format=JobID,Start,End,NodeList,State",
    )  # fmt: skip
    rows: dict[int, dict[str, str]] = {}
    for line in out.splitlines():
        job, start, end, nodes, state = line.split("|")[:5]
        if job.isdigit():
            rows[int(job)] = {"start": start, "end": end, "nodes": nodes, "state": state}
    return rows


def _before(starts: dict[int, float]) -> dict[int, frozenset[int]]:
    """Each job's place in the start order: the jobs that started in an earlier wave."""
    waves = _waves(starts)
    return {j: frozenset(k for k in starts if waves[k] < waves[j]) for j in starts}


def _waves(starts: dict[int, float]) -> dict[int, int]:
    """Number the starts' waves in time order: a gap over WAVE_S opens the next one."""
    waves: dict[int, int] = {}
    wave, last = 0, None
    for job, at in sorted(starts.items(), key=lambda kv: (kv[1], kv[0])):
        if last is not None and at - last > WAVE_S:
            wave += 1
        waves[job] = wave
        last = at
    return waves


def _run_once(slurm: SlurmSandbox, run: int) -> list[str]:
    """Run the workload on the sandbox and in the simulator; the jobs that differ."""
    workload = _workload()
    ids = []
    for nodes, gpus, sleep_s, limit in workload:
        ids.append(
            slurm.sbatch(
                "-H", "-p", "gpu", "-N", str(nodes), f"--gres=gpu:{gpus}", "-c", "1",
                "--mem=1G", f"--time={limit}", wrap=f"sleep {sleep_s}",
            )
        )  # fmt: skip
    # The submissions themselves wake Slurm's schedulers; release once they are idle again
    # (the backfill agent passes at most once more, within bf_interval, then sleeps), so both
    # sides start from an idle controller, as a trace's first arrival does in the simulator.
    params = _params(slurm)
    time.sleep(2 * params["bf_interval"] + 2)
    slurm.run("scontrol", "release", ",".join(map(str, ids)))
    deadline = time.monotonic() + 300 * STRETCH
    rows: dict[int, dict[str, str]] = {}
    while time.monotonic() < deadline:
        rows = _completions(slurm, ids)
        if len(rows) == len(ids):
            break
        time.sleep(2)
    assert len(rows) == len(ids), f"only {len(rows)} of {len(ids)} jobs completed in time"
    assert all(r["state"] == "COMPLETED" for r in rows.values()), rows

    starts = {j: _stamp(rows[j]["start"]) for j in ids}
    origin = min(starts.values())
    jobs = tuple(
        TraceJob(
            job_id=j,
            submit_s=0.0,
            duration_s=max(1.0, _stamp(rows[j]["end"]) - starts[j]),
            nodes=nodes,
            gpus_per_node=gpus,
            time_limit_s=limit * 60,
            gpus_asked=nodes * gpus,
            priority=len(ids) - i,  # priority/basic: earlier submit ranks first
        )
        for i, (j, (nodes, gpus, _, limit)) in enumerate(zip(ids, workload, strict=True))
    )
    conf_dir = Path(slurm.conf).parent
    fabric = parse_fabric_spec(str(conf_dir / "topology.conf"))
    result = simulate(
        Trace("sandbox", "csv", jobs),
        fabric,
        "slurm-backfill-tree",
        CommModel(enabled=False),
        gpus_per_node=8,
        bf_max_job_test=int(params["bf_max_job_test"]),
        bf_window_s=params["bf_window_min"] * 60,
        bf_interval_s=params["bf_interval"],
    )
    sim = {o.job.job_id: o for o in result.outcomes}
    real_before = _before({j: starts[j] - origin for j in ids})
    sim_before = _before({j: sim[j].start or 0.0 for j in ids})
    sim_nodes = {j: set(o.nodes) for j, o in sim.items()}
    differences = []
    for j in ids:
        real_nodes = set(expand(rows[j]["nodes"]))
        same_order = real_before[j] == sim_before[j]
        same_nodes = real_nodes == sim_nodes.get(j, set())
        if not (same_order and same_nodes):
            order = ""
            if not same_order:
                late = sorted(sim_before[j] - real_before[j])
                early = sorted(real_before[j] - sim_before[j])
                order = f" (simulated after {late or '-'}, not after {early or '-'})"
            differences.append(
                f"run {run} job {j} {workload[ids.index(j)][:2]}: real at "
                f"{starts[j] - origin:.0f}s on {rows[j]['nodes']}; simulated at {sim[j].start}s "
                f"on {','.join(sorted(sim_nodes.get(j, set())))}{order}"
            )
    for line in differences:
        print(line)
    print(f"run {run}: {len(ids) - len(differences)} of {len(ids)} jobs agree")
    return differences


@pytest.mark.timeout(300 * STRETCH * RUNS + 60)
def test_backfill_tree_baseline_matches_real_slurm(slurm: SlurmSandbox) -> None:
    differences: list[str] = []
    for run in range(1, RUNS + 1):
        if run > 1:
            slurm.reset()
        differences += _run_once(slurm, run)
    total = JOBS * RUNS
    agree = 1 - len(differences) / total
    print(f"agreement: {agree:.0%} of {total} jobs" + (f" ({RUNS} runs)" if RUNS > 1 else ""))
    assert agree >= AGREEMENT, "\n".join(differences)
