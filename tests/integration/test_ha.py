"""Two daemons on one PostgreSQL store, on the real Slurm sandbox: one acts, the other takes over.

Each daemon is a ``slurmopt daemon --enforce`` subprocess with its own
``node_name``, and its own ``scontrol`` on PATH: a wrapper that logs every
call it makes (so the test counts each daemon's Slurm writes) and, once
asked, freezes the daemon (SIGSTOP to its parent) right after its first pin
of a cycle has reached Slurm and before its release: mid-cycle, inside the
window between the two writes of one decision.

Round 1 leaves the frozen leader stopped until the standby has taken the
lease, then resumes it (SIGCONT): fencing must make it stop at its next
write.  Round 2 kills the new leader with SIGKILL at the same point, and the
resumed old leader, now standby, takes over.  Each round proves from the
store's transitions and from the logged ``scontrol`` calls that no job was
pinned, released or held twice, that the takeover came within the lease's
TTL of the fault, and that the survivor placed every held job.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from slurmopt.daemon.heartbeat import read_heartbeat, write_heartbeat
from slurmopt.daemon.loop import LEASE_NAME, MIN_LEASE_TTL_S
from slurmopt.hostlist import expand, fold
from slurmopt.store import ManagedJobState
from tests.integration.test_daemon import DaemonRun, _started_record, _wait
from tests.sandbox import SlurmSandbox

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]

INTERVAL_S = 1.0
TTL_S = max(3 * INTERVAL_S, MIN_LEASE_TTL_S)

#: ``scontrol`` for one daemon: logs each call; once $SLURMOPT_TEST_STOP exists, freezes
#: the daemon right after the first pin (``update JobId=N NodeList=...``) reached Slurm.
WRAPPER = """#!/bin/sh
echo "$(date +%s.%N) $*" >> "$SLURMOPT_TEST_CALLS"
{real} "$@"
rc=$?
case "$*" in
  "update JobId="*" NodeList="*)
    if rm "$SLURMOPT_TEST_STOP" 2>/dev/null; then
      date +%s.%N > "$SLURMOPT_TEST_STOP.at"
      kill -STOP "$PPID"
    fi ;;
esac
exit $rc
"""


def _frozen(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _write_of(args: list[str]) -> tuple[str, int] | None:
    """``(action, job)`` for an ``scontrol`` call that changes a job, None for anything else."""
    if args[:1] in (["hold"], ["release"], ["requeue"], ["requeuehold"]) and len(args) > 1:
        return args[0], int(args[1])
    if args[:1] == ["update"] and len(args) > 2 and args[1].startswith("JobId="):
        job = int(args[1].removeprefix("JobId="))
        what = args[2].split("=", 1)[0]
        action = {"NodeList": "pin", "NumNodes": "shrink"}.get(what, "comment")
        return action, job
    return None


class Controller(DaemonRun):
    """One of the two daemons: its own node name, config, log and logged ``scontrol``."""

    def __init__(self, name: str, slurm: SlurmSandbox, tmp_path: Path, db: str) -> None:
        home = tmp_path / name
        home.mkdir()
        super().__init__(slurm, home)
        self.name = name
        self.db = db
        with self.config.open("a") as fh:
            fh.write(f'node_name = "{name}"\nmetrics_port = 0\n')
        self.calls = home / "scontrol-calls"
        self.calls.touch()
        self.stop_file = home / "stop-after-pin"
        real = shutil.which("scontrol", path=slurm.env.get("PATH"))
        assert real is not None, "scontrol is not on PATH"
        bindir = home / "bin"
        bindir.mkdir()
        (bindir / "scontrol").write_text(WRAPPER.format(real=real))
        (bindir / "scontrol").chmod(0o755)
        self.env.update(
            PATH=f"{bindir}:{self.env.get('PATH', '')}",
            SLURMOPT_TEST_CALLS=str(self.calls),
            SLURMOPT_TEST_STOP=str(self.stop_file),
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def writes(self, since: float = 0.0) -> list[tuple[str, int]]:
        """The job writes this daemon's ``scontrol`` made at or after ``since``."""
        out = []
        for line in self.calls.read_text().splitlines():
            at, _, rest = line.partition(" ")
            write = _write_of(rest.split())
            if write is not None and float(at) >= since:
                out.append(write)
        return out

    def freeze_after_next_pin(self) -> None:
        self.stop_file.touch()

    def frozen_at(self) -> float:
        return float(Path(f"{self.stop_file}.at").read_text())

    def lease_holder(self) -> tuple[str, int, float] | None:
        store = self.store()
        try:
            lease = store.lease(LEASE_NAME)
        finally:
            store.close()
        return None if lease is None else (lease.holder, lease.token, lease.acquired_at)

    def holds_lease(self) -> tuple[str, int, float] | None:
        lease = self.lease_holder()
        return lease if lease is not None and lease[0].startswith(f"{self.name}:") else None

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a frozen daemon cannot handle SIGTERM
        return super().stop(sig)


@dataclass
class Round:
    """What one fault did: the jobs, who froze and who took over, and when."""

    jobs: list[int]
    leader: Controller
    survivor: Controller
    frozen_at: float
    takeover_s: float
    token: int
    first_pin: int
    resumed_at: float | None = None


@pytest.fixture
def pair(slurm: SlurmSandbox, pg_url: str, tmp_path: Path) -> Iterator[list[Controller]]:
    daemons = [Controller(name, slurm, tmp_path, pg_url) for name in ("ctl-a", "ctl-b")]
    try:
        yield daemons
    finally:
        for run in daemons:
            run.stop()
            # Shown when the test fails: what each daemon logged and called.
            print(f"--- {run.name}: log\n{run.log()[-6000:]}")
            print(f"--- {run.name}: scontrol calls\n{run.calls.read_text()[-3000:]}")
        write_heartbeat(daemons[0].heartbeat, False)  # the plugin fails open again


def _fill_idle_nodes(slurm: SlurmSandbox) -> int:
    """A plain job on every idle node, so the workload waits until it is cancelled."""
    idle = sorted(set(slurm.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").split()))
    assert idle, "no idle node to fill"
    job = slurm.sbatch("-N", str(len(idle)), "-w", fold(idle), "--gres=gpu:8", "-t", "5")
    slurm.wait_state(job, "RUNNING")
    return job


def _held_by_slurmopt(run: Controller, job: int) -> bool:
    record = run.record(job)
    return (
        record is not None
        and record.state is ManagedJobState.WAITING
        and run.slurm.job_field(job, "%r") == "JobHeldAdmin"
    )


def _fault_mid_cycle(
    leader: Controller, survivor: Controller, shapes: list[list[str]], kill: bool
) -> Round:
    """Held jobs released into one cycle of the leader; the leader frozen after its first pin."""
    slurm = leader.slurm
    blocker = _fill_idle_nodes(slurm)
    jobs = [leader.submit(*shape, "-t", "3") for shape in shapes]
    for job in jobs:
        _wait(f"job {job} under slurmopt's hold", partial(_held_by_slurmopt, leader, job))
    leader.freeze_after_next_pin()
    slurm.run("scancel", str(blocker))
    _wait("the leader to freeze inside its first pin", lambda: _frozen(leader.pid), 60)
    frozen_at = leader.frozen_at()
    first_pin = [job for action, job in leader.writes(frozen_at - 60) if action == "pin"][-1]
    if kill:
        leader.proc.kill()  # type: ignore[union-attr]
        leader.proc.wait(timeout=30)  # type: ignore[union-attr]
    lease = _wait("the survivor to take the lease", survivor.holds_lease, TTL_S + 30)
    assert isinstance(lease, tuple)
    _, token, acquired_at = lease
    done = Round(jobs, leader, survivor, frozen_at, acquired_at - frozen_at, token, first_pin)
    if not kill:
        done.resumed_at = time.time()
        leader.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        _wait(
            "the resumed leader to find its lease lost",
            lambda: "lost the lease mid-cycle" in leader.log(),
            30,
        )
    for job in jobs:
        slurm.wait_state(job, "RUNNING", timeout=90)
        _started_record(survivor, job)
    return done


def _check(done: Round) -> dict[int, Counter[str]]:
    """No job acted on twice; the survivor placed every job; the counts of writes per job."""
    leader, survivor = done.leader, done.survivor
    assert TTL_S - 1 <= done.takeover_s <= TTL_S + 3 * INTERVAL_S, done.takeover_s
    counts: dict[int, Counter[str]] = {}
    for job in done.jobs:
        # Slurm's side: every write the two daemons' scontrol made to the job.
        by_leader = Counter(a for a, j in leader.writes() if j == job)
        by_survivor = Counter(a for a, j in survivor.writes(done.frozen_at) if j == job)
        writes = by_leader + by_survivor
        counts[job] = writes
        assert writes["pin"] == 1 and writes["release"] == 1, (job, writes)
        assert writes["hold"] == 1, (job, writes)  # the plugin's hold made an admin hold
        assert writes["requeue"] == writes["requeuehold"] == writes["shrink"] == 0, writes
        # The survivor finished the frozen pin and placed every other job itself.
        assert by_survivor["release"] == 1, (job, by_leader, by_survivor)
        pinned_by = "leader" if by_leader["pin"] else "survivor"
        assert pinned_by == ("leader" if job == done.first_pin else "survivor"), job
        # The store's side: one pin decision, never withdrawn, one start.
        transitions = leader.transitions(job)
        actions = Counter(t.key.split(":")[2] for t in transitions)
        assert len({t.key for t in transitions}) == len(transitions)
        assert actions["pin"] == 1 and actions["unpin"] == 0 and actions["run"] == 1, actions
        record = leader.record(job)
        assert record is not None and record.nodes is not None
        assert expand(record.nodes) == expand(leader.slurm.job_field(job, "%N"))
    if done.resumed_at is not None:
        # The resumed old leader made no Slurm write at all, and never claimed the heartbeat.
        assert leader.writes(done.resumed_at) == [], leader.writes(done.resumed_at)
    # The survivor proves enforcement on its own stamps, not on those of the old leader.
    assert "degraded" not in survivor.log(), survivor.log()
    beat = read_heartbeat(survivor.heartbeat, max_age_s=10)
    assert beat.enforcing and beat.heartbeat is not None, beat
    assert beat.heartbeat.holder.startswith(f"{survivor.name}:"), beat
    return counts


def test_a_frozen_then_a_killed_leader_hand_over_and_no_job_is_acted_on_twice(
    pair: list[Controller],
) -> None:
    a, b = pair
    a.start()
    a.wait_enforcing()
    b.start()
    _wait("the second daemon to stand by", lambda: "standby: the enforcer lease" in b.log())
    assert a.holds_lease() is not None and b.writes() == []

    # Round 1: SIGSTOP the leader mid-cycle; SIGCONT it once the standby holds the lease.
    gangs = [["-N", "2", "--gres=gpu:8"], ["-N", "1", "--gres=gpu:8"]]
    first = _fault_mid_cycle(a, b, [*gangs, ["--gres=gpu:4"], ["--gres=gpu:4"]], kill=False)
    counts = _check(first)
    assert first.token == 2

    # Round 2: SIGKILL the new leader at the same point; the resumed old one takes over.
    second = _fault_mid_cycle(b, a, [*gangs, ["-N", "1", "--gres=gpu:8"]], kill=True)
    counts.update(_check(second))
    assert second.token == 3
    time.sleep(3 * INTERVAL_S)  # a few more cycles: nothing more may happen to any job
    for job, writes in counts.items():
        again = Counter(a for a, j in a.writes() + b.writes() if j == job)
        assert again == writes, (job, again, writes)
    print(
        f"takeover after SIGSTOP {first.takeover_s:.1f} s, after SIGKILL "
        f"{second.takeover_s:.1f} s (TTL {TTL_S:.0f} s); writes per job: "
        + "; ".join(f"{job}: {dict(sorted(w.items()))}" for job, w in sorted(counts.items()))
    )
