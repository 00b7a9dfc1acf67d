"""The daemon against the real Slurm sandbox: it places held jobs where it says, and survives.

Each test runs ``slurmopt daemon --enforce --interval 1`` as a subprocess on a
fresh database, writing the sandbox's heartbeat (so the job-submit plugin,
when installed, holds tagged jobs for it), and checks both the daemon's
stored decision and where Slurm really ran the job.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select

from slurmopt.daemon.fenced import HOOK_ENV
from slurmopt.daemon.heartbeat import read_heartbeat, write_heartbeat
from slurmopt.daemon.status import decode
from slurmopt.hostlist import expand
from slurmopt.store import Decision, JobTransition, ManagedJob, ManagedJobState, Store
from tests.sandbox import SlurmSandbox

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from slurmopt.cli import main; main()"]
LEAVES = {
    "leaf1": [f"gpu{i:03d}" for i in range(1, 9)],
    "leaf2": [f"gpu{i:03d}" for i in range(9, 17)],
    "leaf3": [f"gpu{i:03d}" for i in range(17, 25)],
    "leaf4": [f"gpu{i:03d}" for i in range(25, 33)],
}
LEAF_OF = {n: leaf for leaf, nodes in LEAVES.items() for n in nodes}


def _wait(what: str, check: Callable[[], object], timeout: float = 60.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class CtldLog:
    """slurmctld's own log of the writes it carried out, from when this was made.

    Slurm's record, not the daemon's: a write the daemon made and then died
    before logging still counts here.
    """

    def __init__(self, slurm: SlurmSandbox) -> None:
        self.path = Path(slurm.conf).parent.parent / "run" / "log" / "slurmctld.log"
        self.start = self.path.stat().st_size

    def _count(self, *parts: str) -> int:
        """Lines written since this was made that contain every one of ``parts``."""
        with open(self.path, "rb") as fh:
            fh.seek(self.start)
            text = fh.read().decode(errors="replace")
        return sum(1 for line in text.splitlines() if all(p in line for p in parts))

    def pins(self, job_id: int) -> int:
        """``scontrol update JobId=N NodeList=...``."""
        return self._count("setting req_nodes to ", f" for JobId={job_id}")

    def releases(self, job_id: int) -> int:
        return self._count(f"release hold on JobId={job_id} by")

    def signals(self, job_id: int) -> int:
        """``scancel --signal`` (the daemon never cancels a job)."""
        return self._count(f"REQUEST_KILL_JOB JobId={job_id} uid")

    def requeues(self, job_id: int) -> int:
        return self._count(f"Requeuing JobId={job_id}")


class DaemonRun:
    """One ``slurmopt daemon`` subprocess and its database, config and log."""

    def __init__(self, slurm: SlurmSandbox, tmp_path: Path) -> None:
        self.slurm = slurm
        self.db = f"sqlite:///{tmp_path / 'd.db'}"
        self.log_path = tmp_path / "daemon.log"
        heartbeat = str(tmp_path / "heartbeat")
        max_age = 10
        # This sandbox's own config (each sandbox's lives in its own directory), so the plugin
        # of that sandbox, and no other, sees the heartbeat.
        sandbox_toml = slurm.dir / "etc" / "slurmopt.toml"
        if sandbox_toml.exists():
            sandbox = tomllib.loads(sandbox_toml.read_text())
            heartbeat = sandbox.get("heartbeat_path", heartbeat)
            max_age = sandbox.get("heartbeat_max_age_s", max_age)
        self.heartbeat = heartbeat
        self.config = tmp_path / "slurmopt.toml"
        self.config.write_text(
            f'heartbeat_path = "{heartbeat}"\nheartbeat_max_age_s = {max_age}\npin_timeout_s = 30\n'
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.plugin = "JobSubmitPlugins=lua" in Path(slurm.conf).read_text()
        # The daemon runs this checkout's code, whatever is installed.
        path = os.pathsep.join(p for p in (str(REPO), slurm.env.get("PYTHONPATH", "")) if p)
        self.env = {**slurm.env, "PYTHONPATH": path}

    def start(self, hook: str | None = None, interval: float = 1.0) -> None:
        """Start the daemon; ``hook`` puts a fault at a named point of it
        (``SLURMOPT_TEST_HOOK``, see ``slurmopt/daemon/fenced.py``): ``kill@before:pin``..."""
        env = dict(self.env)
        env.pop(HOOK_ENV, None)
        if hook is not None:
            env[HOOK_ENV] = hook
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [
                *CLI,
                "daemon",
                "--config",
                str(self.config),
                "--db",
                self.db,
                "--interval",
                str(interval),
                "--enforce",
            ],
            env=env,
            stdout=log,
            stderr=log,
        )
        log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def enforcing(self) -> bool:
        return read_heartbeat(self.heartbeat, max_age_s=10).enforcing

    def wait_enforcing(self, timeout: float = 60.0) -> None:
        _wait("the daemon to enforce", self.enforcing, timeout)
        self.assert_slurm_release()

    def assert_slurm_release(self) -> None:
        """The daemon reads this sandbox's Slurm (never, say, the host's 22.05 on a chroot's)."""
        read = _wait(
            "the daemon to name the Slurm it reads",
            lambda: re.findall(r" INFO Slurm (\S+) answers$", self.log(), re.MULTILINE),
            timeout=30,
        )
        assert isinstance(read, list)
        self.slurm.assert_version(read[-1])

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def store(self) -> Store:
        return Store(self.db)

    def submit(self, *args: str, wrap: str = "sleep 600") -> int:
        """A tagged job, held for slurmopt: by the plugin when it is installed, else by hand."""
        hold = [] if self.plugin else ["--hold"]
        out = self.slurm.run(
            *CLI,
            "submit",
            "--parsable",
            "-o",
            "/dev/null",
            "-D",
            str(self.slurm.workdir),
            *hold,
            *args,
            "--wrap",
            wrap,
        )
        job_id = int(out.strip().split(";")[0])
        if not self.plugin:
            self.slurm.run("scontrol", "hold", str(job_id))
        return job_id

    def record(self, job_id: int) -> ManagedJob | None:
        store = self.store()
        try:
            with store.begin() as session:
                return session.get(ManagedJob, job_id)
        finally:
            store.close()

    def transitions(self, job_id: int) -> list[JobTransition]:
        store = self.store()
        try:
            with store.begin() as session:
                stmt = select(JobTransition).where(JobTransition.job_id == job_id)
                return list(session.scalars(stmt.order_by(JobTransition.id)))
        finally:
            store.close()

    def decisions(self, job_id: int, kind: str) -> list[Decision]:
        store = self.store()
        try:
            with store.begin() as session:
                stmt = select(Decision).where(Decision.job_id == job_id, Decision.kind == kind)
                return list(session.scalars(stmt.order_by(Decision.id)))
        finally:
            store.close()


@contextmanager
def enforcing_daemon(slurm: SlurmSandbox, tmp_path: Path) -> Iterator[DaemonRun]:
    """A started daemon, once it says enforce=1 in the heartbeat; stopped on the way out."""
    run = DaemonRun(slurm, tmp_path)
    run.start()
    try:
        run.wait_enforcing()
        yield run
    finally:
        run.stop()


@pytest.fixture
def daemon(slurm: SlurmSandbox, tmp_path: Path) -> Iterator[DaemonRun]:
    run = DaemonRun(slurm, tmp_path)
    try:
        yield run
    finally:
        run.stop()
        # Whatever happened, leave a heartbeat that lets the plugin fail open.
        write_heartbeat(run.heartbeat, False)
        if run.proc is not None and run.proc.returncode not in (0, None, -signal.SIGKILL):
            print(run.log())


def _nodes(slurm: SlurmSandbox, job_id: int) -> list[str]:
    return expand(slurm.job_field(job_id, "%N"))


def _running(slurm: SlurmSandbox, job_id: int, timeout: float = 60.0) -> list[str]:
    slurm.wait_state(job_id, "RUNNING", timeout=timeout)
    return _nodes(slurm, job_id)


def _busy(slurm: SlurmSandbox, nodes: str, count: int, *extra: str, wrap: str = "sleep 600") -> int:
    """A plain sbatch job that occupies whole nodes (not tagged: Slurm's own)."""
    return slurm.sbatch("-N", str(count), "-w", nodes, "--gres=gpu:8", *extra, wrap=wrap)


def _started_record(run: DaemonRun, job_id: int) -> ManagedJob:
    record = _wait(
        f"job {job_id} recorded running",
        lambda: (r := run.record(job_id)) is not None and r.state is ManagedJobState.RUNNING and r,
    )
    assert isinstance(record, ManagedJob)
    return record


def test_gangs_go_to_the_leaf_that_fits_exactly_then_to_two_leaves(
    slurm: SlurmSandbox, daemon: DaemonRun
) -> None:
    # 6 in-service nodes per leaf (2 drained), so a 7-node job cannot fit on one leaf;
    # busy jobs leave 3, 5, 2 and 6 whole nodes free.
    slurm.run(
        "scontrol",
        "update",
        "NodeName=gpu[007-008,015-016,023-024,031-032]",
        "State=DRAIN",
        "Reason=slurmopt-test",
    )
    busy = [
        _busy(slurm, "gpu[001-003]", 3, "-t", "5"),
        _busy(slurm, "gpu009", 1, "-t", "5"),
        _busy(slurm, "gpu[017-020]", 4, "-t", "5"),
    ]
    for job in busy:
        slurm.wait_state(job, "RUNNING")
    daemon.start()
    daemon.wait_enforcing()

    five = daemon.submit("-N", "5", "--gres=gpu:8", "-t", "2")
    nodes = _running(slurm, five)
    assert nodes == [f"gpu{i:03d}" for i in range(10, 15)]
    record = _started_record(daemon, five)
    assert record.nodes == "gpu[010-014]"
    start = daemon.decisions(five, "start")[0]
    assert start.reason.value == "GANG_FEWEST_LEAVES" and start.nodes == "gpu[010-014]"

    seven = daemon.submit("-N", "7", "--gres=gpu:8", "-t", "2")
    nodes = _running(slurm, seven)
    assert len(nodes) == 7
    assert len({LEAF_OF[n] for n in nodes}) == 2
    record = _started_record(daemon, seven)
    assert record.nodes is not None and expand(record.nodes) == nodes


def test_two_gpu_job_fills_the_partly_used_node_where_slurm_alone_would_not(
    slurm: SlurmSandbox, daemon: DaemonRun
) -> None:
    partly = slurm.sbatch("-w", "gpu012", "--gres=gpu:6", "-t", "5")
    slurm.wait_state(partly, "RUNNING")
    # Plain Slurm first, same cluster state, no daemon.
    alone = slurm.sbatch("--gres=gpu:2", "-t", "2")
    slurm_choice = _running(slurm, alone)
    slurm.run("scancel", str(alone))
    _wait(
        "the plain job to end",
        lambda: slurm.job_field(alone, "%T") in ("", "COMPLETED", "CANCELLED"),
    )
    assert slurm_choice != ["gpu012"], "Slurm alone already picks the exact fit"

    daemon.start()
    daemon.wait_enforcing()
    job = daemon.submit("--gres=gpu:2", "-t", "2")
    assert _running(slurm, job) == ["gpu012"]
    assert _started_record(daemon, job).nodes == "gpu012"
    assert daemon.decisions(job, "start")[0].reason.value == "BEST_FIT_NODE"


def test_elastic_job_starts_on_the_four_nodes_free_instead_of_waiting_for_eight(
    slurm: SlurmSandbox, daemon: DaemonRun
) -> None:
    # Slurm's own jobs without a time limit hold 28 of the 32 nodes: 8 may never be free.
    busy = _busy(slurm, "gpu[001-028]", 28)
    slurm.wait_state(busy, "RUNNING")
    daemon.start()
    daemon.wait_enforcing()
    job = daemon.submit("-N", "8", "--gres=gpu:8", "-t", "4", "--elastic", "4:8")
    assert _running(slurm, job) == [f"gpu{i:03d}" for i in range(29, 33)]
    assert slurm.job_field(job, "%D") == "4"
    start = daemon.decisions(job, "start")[0]
    assert start.reason.value == "ELASTIC_START"
    assert start.detail.startswith("elastic 4:8: 4 of 8 nodes now (8 never)")


def test_backfill_starts_a_short_job_in_a_gap_and_the_head_job_starts_on_time(
    slurm: SlurmSandbox, daemon: DaemonRun
) -> None:
    # leaf1: 7 nodes busy for at most 2 minutes (they end after 40 s), gpu008 free;
    # leaves 2-4 busy for 10 minutes.  The head job needs a whole leaf.
    short = _busy(slurm, "gpu[001-007]", 7, "-t", "2", wrap="sleep 40")
    long = _busy(slurm, "gpu[009-032]", 24, "-t", "10")
    slurm.wait_state(short, "RUNNING")
    slurm.wait_state(long, "RUNNING")
    daemon.start()
    daemon.wait_enforcing()

    head = daemon.submit("-N", "8", "--gres=gpu:8", "-t", "2")
    small = daemon.submit("-N", "1", "--gres=gpu:8", "-t", "1", wrap="sleep 15")
    assert _running(slurm, small) == ["gpu008"]
    assert daemon.decisions(small, "start")[0].reason.value == "BACKFILL"
    reservation = _wait("the head job's reservation", lambda: daemon.decisions(head, "reservation"))
    assert isinstance(reservation, list)
    reserved = reservation[-1]
    assert reserved.nodes is not None and set(expand(reserved.nodes)) == set(LEAVES["leaf1"])
    assert slurm.job_field(head, "%T") == "PENDING"

    nodes = _running(slurm, head, timeout=150)
    seen_running = time.time()
    assert nodes == LEAVES["leaf1"]
    assert reserved.start_time is not None and seen_running <= reserved.start_time + 30
    assert _started_record(daemon, head).nodes == "gpu[001-008]"


@pytest.mark.parametrize("point", ["before:pin", "after:pin"])
def test_sigkill_inside_the_pin_window_then_restart_pins_exactly_once(
    slurm: SlurmSandbox, daemon: DaemonRun, point: str
) -> None:
    """Killed right before its pin reaches Slurm (recorded, not made), or right after (made,
    not released): the restarted daemon pins the job exactly once in all and releases it once."""
    ctld = CtldLog(slurm)
    daemon.start(hook=f"kill@{point}")
    daemon.wait_enforcing()
    job = daemon.submit("-N", "2", "--gres=gpu:8", "-t", "2")
    assert daemon.proc is not None and daemon.proc.wait(timeout=60) == -signal.SIGKILL
    record = daemon.record(job)
    assert record is not None and record.state is ManagedJobState.PINNED
    made = 1 if point == "after:pin" else 0
    assert (ctld.pins(job), ctld.releases(job)) == (made, 0)

    daemon.start()
    nodes = _running(slurm, job, timeout=120)
    record = _started_record(daemon, job)
    assert record.nodes is not None and expand(record.nodes) == nodes
    time.sleep(3)  # a few more cycles: nothing else may happen to the job
    assert (ctld.pins(job), ctld.releases(job)) == (1, 1)
    transitions = daemon.transitions(job)
    keys = [t.key for t in transitions]
    assert len(keys) == len(set(keys))
    pins = [t for t in transitions if t.to_state is ManagedJobState.PINNED]
    if point == "before:pin":  # withdrawn in the store, then decided again under a new key
        assert len(pins) == 2
        assert [t.reason for t in transitions].count("pin_not_applied") == 1
    else:  # found in Slurm: only the release was finished
        assert len(pins) == 1
    assert [t.to_state for t in transitions].count(ManagedJobState.RUNNING) == 1
    assert slurm.run("squeue", "-h", "-t", "PD", "-o", "%i %r").strip() == ""


def _ctld_pid(run_dir: Path) -> int | None:
    try:
        pid = int((run_dir / "slurmctld.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"slurmctld" in cmdline else None


def _start_ctld(slurm: SlurmSandbox) -> None:
    """Start slurmctld as scripts/slurm-sandbox does (a release's inside its chroot: the
    daemon symlinks name the chroot's binaries), and record its pid for ``down``."""
    run_dir = Path(slurm.conf).parent.parent / "run"
    subprocess.run(
        slurm.in_root(str(run_dir / "bin" / "slurmctld"), "-f", slurm.conf),
        env=slurm.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=True,
    )
    _wait("slurmctld to answer", lambda: "UP" in slurm.run("scontrol", "ping", check=False), 60)
    pid = _ctld_pid(run_dir)
    if pid is not None:
        with open(run_dir / "pids", "a") as fh:
            fh.write(f"slurmctld {pid}\n")


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def test_slurmctld_outage_between_the_pin_record_and_the_pin_acts_on_nothing_then_pins_once(
    slurm: SlurmSandbox, daemon: DaemonRun
) -> None:
    """slurmctld goes away while the daemon sits between recording a pin and making it."""
    run_dir = Path(slurm.conf).parent.parent / "run"
    ctld = CtldLog(slurm)
    # A command retries a dead controller once a second for MessageTimeout (10 s) before it gives
    # up (9 to 10 s on 22.05, 24.11 and 26.05): the lease (three intervals, at least 10 s) must
    # outlast that read, or the outage cycle's record is refused as a lost leader's write.
    daemon.start(hook="stop@before:pin", interval=4.0)
    daemon.wait_enforcing()
    job = daemon.submit("--gres=gpu:4", "-t", "2")
    proc = daemon.proc
    assert proc is not None
    _wait("the daemon to stop right before its pin", lambda: _stopped(proc.pid), 60)
    record = daemon.record(job)
    assert record is not None and record.state is ManagedJobState.PINNED
    pid = _ctld_pid(run_dir)
    assert pid is not None
    try:
        os.kill(pid, signal.SIGTERM)
        _wait("slurmctld to exit", lambda: not Path(f"/proc/{pid}").exists(), 60)
        os.kill(proc.pid, signal.SIGCONT)  # the pin now meets a dead controller
        # The refused pin can take longer than the lease; the daemon takes it again, then backs off.
        outage = "Slurm unavailable, acting on nothing"
        _wait("the daemon to record the outage", lambda: outage in daemon.log(), 120)
        store = daemon.store()
        beat = store.last_beat("daemon")
        store.close()
        assert beat is not None and outage in beat.detail
        assert not daemon.enforcing()
        assert proc.poll() is None
    finally:
        if _ctld_pid(run_dir) is None:
            _start_ctld(slurm)
    daemon.wait_enforcing(90)
    nodes = _running(slurm, job, timeout=120)
    assert _started_record(daemon, job).nodes == nodes[0]
    assert "Slurm answers again" in daemon.log()
    time.sleep(3)
    assert (ctld.pins(job), ctld.releases(job)) == (1, 1)


def test_disable_releases_every_held_job_and_slurm_runs_them_alone(
    slurm: SlurmSandbox, daemon: DaemonRun
) -> None:
    full = slurm.sbatch("-N", "32", "--gres=gpu:8", "-t", "5")
    slurm.wait_state(full, "RUNNING")
    daemon.start()
    daemon.wait_enforcing()
    first = daemon.submit("--gres=gpu:8", "-t", "2")
    second = daemon.submit("--gres=gpu:4", "-t", "2")
    user_held = slurm.sbatch("--hold", "--comment", "slurmopt:managed", "--gres=gpu:1")
    for job in (first, second):
        _wait(f"job {job} waiting", lambda j=job: daemon.record(j) is not None)  # type: ignore[misc]
        assert slurm.job_field(job, "%r") in ("JobHeldAdmin", "JobHeldUser")  # plugin: User

    out = daemon.slurm.run(
        *CLI, "disable", "--config", str(daemon.config), "--db", daemon.db, "--json"
    )
    released = json.loads(out)["released"]
    assert sorted(released) == sorted([first, second])
    assert slurm.job_field(user_held, "%r") == "JobHeldUser"
    _wait("the daemon to stop enforcing", lambda: not daemon.enforcing(), 20)

    def last_beat() -> str:
        store = daemon.store()
        try:
            beat = store.last_beat("daemon")
        finally:
            store.close()
        return "" if beat is None else beat.detail

    # `disable` writes the heartbeat file itself; the daemon's own record follows on its
    # next cycle (a cycle already under way when the switch flipped still records its mode).
    _wait(
        "the daemon to record that it is disabled",
        lambda: decode(last_beat()).mode == "disabled",
        20,
    )

    slurm.run("scancel", str(full))
    for job in (first, second):
        slurm.wait_state(job, "RUNNING", timeout=90)
        assert not [t for t in daemon.transitions(job) if t.to_state is ManagedJobState.PINNED]
        assert slurm.job_field(job, "%n") in ("", "(null)")  # no node list of ours

    daemon.slurm.run(*CLI, "enable", "--config", str(daemon.config), "--db", daemon.db)
    daemon.wait_enforcing(30)
    assert daemon.stop() == 0
    assert not daemon.enforcing()


def test_plain_sbatch_in_a_managed_partition_is_placed_then_runs_alone_once_the_daemon_stops(
    slurm: SlurmSandbox, daemon: DaemonRun
) -> None:
    assert daemon.plugin, "the sandbox must run the job-submit plugin (scripts/slurm-sandbox up)"
    daemon.config.write_text(daemon.config.read_text() + 'managed_partitions = ["gpu"]\n')
    partly = slurm.sbatch("-w", "gpu020", "--gres=gpu:6", "-t", "5")
    slurm.wait_state(partly, "RUNNING")
    daemon.start()
    daemon.wait_enforcing()

    # Plain sbatch, no slurmopt anywhere in the submission: the plugin holds and tags it.
    placed = slurm.sbatch("-p", "gpu", "--gres=gpu:2", "-t", "2")
    assert _running(slurm, placed) == ["gpu020"]
    assert slurm.job(placed).admin_comment.startswith("slurmopt:managed,held,hb=")
    record = _started_record(daemon, placed)
    assert record.nodes == "gpu020"
    assert [t.to_state for t in daemon.transitions(placed)].count(ManagedJobState.PINNED) == 1

    # The daemon goes away: its heartbeat says so, and the same job passes through untouched.
    assert daemon.stop() == 0
    assert not daemon.enforcing()
    alone = slurm.sbatch("-p", "gpu", "--gres=gpu:2", "-t", "2")
    slurm.wait_state(alone, "RUNNING", timeout=20)
    assert "slurmopt:" not in slurm.job(alone).admin_comment
    assert daemon.record(alone) is None
