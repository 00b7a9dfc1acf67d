"""The simulated ``slurm-backfill-tree`` against the real Slurm of the sandbox, on one workload.

Thirty ``sleep`` jobs (whole-node gangs of 2-12 nodes and single-node jobs of
1-8 GPUs, 15-120 s, limits of 3 or 6 min) are submitted held, in priority
order, and released together once Slurm's schedulers are quiet again, so both
sides see the same queue at the same instant.  Real Slurm's start and end
times come from the controller's log to the millisecond (``sacct -c``'s whole
seconds if the log lacks them), its nodes from ``sacct -c``; the simulator
replays the same jobs (each with the run time Slurm measured) on the sandbox's
own topology and backfill settings, from the wall clock of the first start
and with the backfill agent's passes in the phase and at the rhythm the log
shows (each pass comes ``bf_interval`` after the previous one ended, a few
milliseconds more than ``bf_interval`` apart).  A job
agrees when it starts on the same nodes and in the same place of the start
order: after the same jobs, where starts less than :data:`WAVE_S` apart count
as simultaneous (one wave).  Comparing the jobs before it, not the number of
its wave, keeps one extra wave early on from counting against every later job.

Slurm's main passes run when a job's nodes report their epilogs complete
(0.02-2 s after its end in the sandbox) and its backfill passes drift by a few
milliseconds each; the simulator replays each run's median delay from an end
to its pass (:func:`main_pass_delay`), so a start whose epilog took longer can
still come a few seconds later than the simulator's and, if another job ends
meanwhile, on other nodes.  Jobs last minutes (the 5-40 s of
the first version of this test, stretched by :data:`STRETCH`) so that such
shifts rarely change the outcome; one run can still differ from the next.
Every difference is printed; ``docs/simulator.md`` lists those of the last run.

The environment picks the workloads: ``SLURMOPT_SIM_VS_SLURM_SEEDS`` (comma-separated
seeds, default 2023), ``SLURMOPT_SIM_VS_SLURM_MIX`` (one weight per shape of
:data:`SHAPES`, default theirs) and ``SLURMOPT_SIM_VS_SLURM_RUNS`` (real runs per seed,
default 1).  With two or more runs the later ones are also compared with the first, as
the simulation is: the noise floor, how far real Slurm agrees with itself.  Each seed
must reach :data:`AGREEMENT`, or, where runs were compared, the noise floor.
``SLURMOPT_SIM_VS_SLURM_SAVE=DIR`` keeps each real run as JSON, which :func:`replay`
compares with the simulation again without the cluster.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from slurmopt.fabric import Fabric
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
#: Job times are drawn as 5-40 s and limits of 1 or 2 min, then stretched by this.
STRETCH = 3
#: (nodes, GPUs per node) and how often each is drawn.
SHAPES = [((1, 1), 3), ((1, 2), 2), ((1, 4), 3), ((1, 8), 2), ((2, 8), 2), ((4, 8), 2),
          ((8, 8), 2), ((12, 8), 1)]  # fmt: skip
SEED = 2023


def _env_ints(name: str, default: Sequence[int]) -> list[int]:
    text = os.environ.get(name, "").strip()
    if not text:
        return list(default)
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected comma-separated whole numbers") from None


SEEDS = _env_ints("SLURMOPT_SIM_VS_SLURM_SEEDS", [SEED])
MIX = _env_ints("SLURMOPT_SIM_VS_SLURM_MIX", [w for _, w in SHAPES])
if len(MIX) != len(SHAPES) or min(MIX) < 0 or sum(MIX) == 0:
    raise ValueError(f"SLURMOPT_SIM_VS_SLURM_MIX: {len(SHAPES)} weights >= 0 expected")
#: Independent real runs per seed (one takes about 4 min); later ones are compared with the first.
RUNS = max(1, _env_ints("SLURMOPT_SIM_VS_SLURM_RUNS", [1])[0])
SAVE = os.environ.get("SLURMOPT_SIM_VS_SLURM_SAVE", "")


def _workload(seed: int, mix: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """(nodes, GPUs per node, sleep s, limit min) per job, in submit order."""
    rng = random.Random(seed)
    shapes = [s for s, _ in SHAPES]
    return [
        (
            *rng.choices(shapes, mix)[0],
            STRETCH * rng.randint(5, 40),
            STRETCH * rng.choice((1, 2)),
        )
        for _ in range(JOBS)
    ]


def _stamp(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def _params(slurm: SlurmSandbox) -> dict[str, float]:
    """The backfill settings the simulation replays: SchedulerParameters, else Slurm's defaults."""
    line = next(
        row for row in slurm.run("scontrol", "show", "config").splitlines()
        if row.startswith("SchedulerParameters")
    )  # fmt: skip
    found = dict(re.findall(r"(\w+)=(\d+)", line.split("=", 1)[1]))
    return {
        "bf_interval": float(found.get("bf_interval", 30)),
        "bf_window_min": float(found.get("bf_window", 1440)),
        "bf_max_job_test": float(found.get("bf_max_job_test", 500)),
        "bf_resolution": float(found.get("bf_resolution", 60)),
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


@dataclass(frozen=True)
class Run:
    """One workload's schedule, keyed by the job's place in the submit order (0, 1, ...).

    ``start`` counts from the first start, ``origin_s`` (seconds since the epoch); ``run_s``
    is what the job ran, which the simulation replays.
    """

    workload: list[tuple[int, int, int, int]]
    start: dict[int, float]
    nodes: dict[int, list[str]]
    run_s: dict[int, float]
    params: dict[str, float]
    origin_s: float
    #: Slurm's job ids, in the same order (none in a simulated run).
    ids: list[int]
    #: When (from the first start) the backfill agent passed first, if the log shows it.
    bf_phase_s: float | None = None
    #: How much longer than bf_interval the agent's passes came apart, per pass (the log).
    bf_pass_s: float = 0.0


def _run_real(slurm: SlurmSandbox, workload: list[tuple[int, int, int, int]]) -> Run:
    """Submit the workload held, release it once Slurm's schedulers are idle, read the log."""
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
    start = {j: _stamp(rows[j]["start"]) for j in ids}
    end = {j: _stamp(rows[j]["end"]) for j in ids}
    # The controller's log has the same starts and ends to the millisecond (sacct has whole
    # seconds): a job ends ~0.1 s after its sleep, so after, not at, a pass due then.
    logged = _log_times(slurm, ids)
    phase = None
    pass_s = 0.0
    if len(logged) == len(ids):
        start = {j: logged[j][0] for j in ids}
        end = {j: logged[j][1] for j in ids}
        # The agent may be mid-rhythm at the release (it keeps passing every bf_interval
        # while anything changes): its first start gives the phase of its passes, and the
        # starts of later passes how far each pass drifts (it sleeps after a pass ends).
        passes = _passes(sorted(logged[j][0] for j in ids if logged[j][2]))
        if passes:
            pass_s = _pass_overhead(passes, params["bf_interval"])
            period = params["bf_interval"] + pass_s
            phase = (passes[0] - min(start.values())) % period
    origin = min(start.values())
    return Run(
        workload=workload,
        start={i: start[j] - origin for i, j in enumerate(ids)},
        nodes={i: sorted(expand(rows[j]["nodes"])) for i, j in enumerate(ids)},
        run_s={i: max(1.0, end[j] - start[j]) for i, j in enumerate(ids)},
        params=params,
        origin_s=origin,
        ids=ids,
        bf_phase_s=phase,
        bf_pass_s=pass_s,
    )


def _passes(backfilled: list[float]) -> list[float]:
    """The backfill passes that started jobs: starts within a second of each other are one."""
    return [at for i, at in enumerate(backfilled) if i == 0 or at - backfilled[i - 1] > 1.0]


def _pass_overhead(passes: list[float], interval: float) -> float:
    """Seconds each pass adds to ``interval``: the median over consecutive logged passes.

    ``backfill_agent()`` sleeps ``bf_interval`` after a pass ends, so k intervals apart
    means k * interval plus k passes' run time.  A pair more than 0.5 s off that rhythm
    (the agent slept a short extra second, having found nothing to do) is left out.
    """
    drifts = []
    for a, b in itertools.pairwise(passes):
        k = round((b - a) / interval)
        if k >= 1 and abs(b - a - k * interval) <= 0.5:
            drifts.append((b - a - k * interval) / k)
    return max(0.0, statistics.median(drifts)) if drifts else 0.0


_LOGGED = re.compile(
    r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?\] "
    r"(?:sched/backfill: _start_job: Started JobId=(\d+) |sched: Allocate JobId=(\d+) "
    r"|_job_complete: JobId=(\d+) done)"
)


def _log_times(slurm: SlurmSandbox, ids: list[int]) -> dict[int, tuple[float, float, bool]]:
    """Start, end (s since the epoch, to the ms) and whether backfill started each job."""
    config = slurm.run("scontrol", "show", "config")
    found = re.search(r"^SlurmctldLogFile\s*=\s*(\S+)", config, re.MULTILINE)
    if found is None:
        return {}
    try:
        text = Path(found.group(1)).read_text(errors="replace")
    except OSError:
        return {}
    wanted = set(ids)
    starts: dict[int, tuple[float, bool]] = {}
    ends: dict[int, float] = {}
    for line in text.splitlines():
        match = _LOGGED.match(line)
        if match is None:
            continue
        stamp, frac, backfilled, allocated, done = match.groups()
        at = _stamp(stamp) + float(frac or 0)
        if done is not None:
            if int(done) in wanted:
                ends[int(done)] = at
        else:
            job = int(backfilled or allocated)
            if job in wanted:
                starts[job] = (at, backfilled is not None)
    return {j: (starts[j][0], ends[j], starts[j][1]) for j in ids if j in starts and j in ends}


#: A start this close before the backfill agent's expected pass (s) may be that pass's: the
#: expected times come from the logged phase and rhythm, off by up to a few tens of ms.
PASS_TOLERANCE_S = 0.05


def main_pass_delay(run: Run) -> float:
    """Seconds from a job's end to the main pass it triggers: the median over the run's starts.

    Slurm runs that pass when the job's epilog completes, 0.02-2 s after the end in the
    sandbox.  A run holds each job's start (the controller log's, to the ms) and run time,
    not which pass started it, so each start is paired with the last end (start + run time)
    on any of its nodes at or before it, the end that freed them, and counts when it comes
    before the backfill agent's next pass after that end (from ``bf_phase_s`` and
    ``bf_interval`` plus ``bf_pass_s``, less :data:`PASS_TOLERANCE_S`): only a main pass
    starts jobs then.  0 when the run has no pass rhythm (no log: whole-second times) or
    no such start.
    """
    if run.bf_phase_s is None:
        return 0.0
    period = run.params["bf_interval"] + run.bf_pass_s
    ends = {job: started + run.run_s[job] for job, started in run.start.items()}
    gaps = []
    for job, at in run.start.items():
        nodes = set(run.nodes[job])
        freed = [
            end for other, end in ends.items()
            if end <= at and other != job and nodes.intersection(run.nodes[other])
        ]  # fmt: skip
        if not freed:
            continue
        end = max(freed)
        next_pass = run.bf_phase_s + math.ceil((end - run.bf_phase_s) / period) * period
        if at < next_pass - PASS_TOLERANCE_S:
            gaps.append(at - end)
    return statistics.median(gaps) if gaps else 0.0


def _simulate(real: Run, fabric: Fabric) -> Run:
    """The same jobs through ``slurm-backfill-tree``, each for the time it ran in ``real``."""
    jobs = tuple(
        TraceJob(
            job_id=i,
            submit_s=0.0,
            duration_s=real.run_s[i],
            nodes=nodes,
            gpus_per_node=gpus,
            time_limit_s=limit * 60,
            gpus_asked=nodes * gpus,
            priority=len(real.workload) - i,  # priority/basic: earlier release ranks first
        )
        for i, (nodes, gpus, _, limit) in enumerate(real.workload)
    )
    result = simulate(
        Trace("sandbox", "csv", jobs),
        fabric,
        "slurm-backfill-tree",
        CommModel(enabled=False),
        gpus_per_node=8,
        bf_max_job_test=int(real.params["bf_max_job_test"]),
        bf_window_s=real.params["bf_window_min"] * 60,
        bf_interval_s=real.params["bf_interval"],
        bf_resolution_s=real.params["bf_resolution"],
        clock_origin_s=real.origin_s,
        bf_phase_s=real.bf_phase_s,
        bf_pass_s=real.bf_pass_s,
        main_pass_delay_s=main_pass_delay(real),
    )
    sim = {o.job.job_id: o for o in result.outcomes}
    return Run(
        workload=real.workload,
        start={i: sim[i].start or 0.0 for i in real.start},
        nodes={i: sorted(sim[i].nodes) for i in real.start},
        run_s=real.run_s,
        params=real.params,
        origin_s=real.origin_s,
        ids=[],
    )


def compare(ref: Run, other: Run, label: str) -> list[str]:
    """The jobs of ``other`` that start on other nodes or in another place than in ``ref``."""
    ref_before, other_before = _before(ref.start), _before(other.start)
    differences = []
    for i in ref.start:
        same_order = ref_before[i] == other_before[i]
        same_nodes = ref.nodes[i] == other.nodes[i]
        if same_order and same_nodes:
            continue
        order = ""
        if not same_order:
            late = sorted(other_before[i] - ref_before[i])
            early = sorted(ref_before[i] - other_before[i])
            order = f" (after {late or '-'}, not after {early or '-'})"
        differences.append(
            f"{label} job {i} {ref.workload[i][:2]}: {ref.start[i]:.0f}s on "
            f"{','.join(ref.nodes[i])}; here {other.start[i]:.0f}s on "
            f"{','.join(other.nodes[i])}{order}"
        )
    return differences


def replay(path: Path, fabric: Fabric) -> list[str]:
    """A saved real run (``SLURMOPT_SIM_VS_SLURM_SAVE``) against the simulation as it is now."""
    real = load_run(path)
    return compare(real, _simulate(real, fabric), path.stem)


def load_run(path: Path) -> Run:
    """A real run saved by ``SLURMOPT_SIM_VS_SLURM_SAVE``."""
    data = json.loads(path.read_text())
    return Run(
        workload=[(a, b, c, d) for a, b, c, d in data["workload"]],
        start={int(k): v for k, v in data["start"].items()},
        nodes={int(k): v for k, v in data["nodes"].items()},
        run_s={int(k): v for k, v in data["run_s"].items()},
        params=data["params"],
        origin_s=data["origin_s"],
        ids=data.get("ids", []),
        bf_phase_s=data.get("bf_phase_s"),
        bf_pass_s=data.get("bf_pass_s", 0.0),
    )


@pytest.mark.timeout(300 * STRETCH * RUNS * len(SEEDS) + 60)
def test_backfill_tree_baseline_matches_real_slurm(slurm: SlurmSandbox) -> None:
    fabric = parse_fabric_spec(str(Path(slurm.conf).parent / "topology.conf"))
    failed: list[str] = []
    summary: list[str] = []
    for seed in SEEDS:
        workload = _workload(seed, MIX)
        differences: list[str] = []
        noise: list[str] = []
        first: Run | None = None
        for run in range(1, RUNS + 1):
            if run > 1:
                slurm.reset()
            real = _run_real(slurm, workload)
            if SAVE:
                Path(SAVE).mkdir(parents=True, exist_ok=True)
                out = Path(SAVE) / f"seed-{seed}-run-{run}.json"
                out.write_text(json.dumps(asdict(real)))
            found = compare(real, _simulate(real, fabric), f"seed {seed} run {run} sim")
            differences += found
            for line in found:
                print(line)
            print(f"seed {seed} run {run}: {JOBS - len(found)} of {JOBS} jobs agree")
            if first is None:
                first = real
            else:
                against = compare(first, real, f"seed {seed} run {run} vs run 1")
                noise += against
                for line in against:
                    print(line)
        total = JOBS * RUNS
        agree = 1 - len(differences) / total
        line = f"seed {seed}: simulation agrees on {agree:.0%} of {total} jobs"
        floor = None
        if RUNS > 1:
            floor = 1 - len(noise) / (JOBS * (RUNS - 1))
            line += f"; real runs agree with run 1 on {floor:.0%}"
        print(line)
        summary.append(line)
        if agree < AGREEMENT and (floor is None or agree < floor):
            failed.append(line)
    print(f"mix {','.join(map(str, MIX))}")
    for line in summary:
        print(line)
    assert not failed, "\n".join(failed)
