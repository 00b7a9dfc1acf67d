"""VerifyRunner with the shared fake Slurm and a fake clock: submit, wait, cancel, judge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmopt.errors import SlurmCommandError, SlurmError, SlurmUnavailable
from slurmopt.model import JobState
from slurmopt.verify import BenchDocumentError, BenchJobFailed, VerifyTimeout
from slurmopt.verify_run import VerifyRequest, VerifyRunner
from tests.fakes.slurm import FakeSlurm, unavailable
from tests.unit.test_verify import FABRIC, document, measured, snapshot

RING = ["n1", "n2", "n9", "n10"]


class Clock:
    """Time that passes only when the runner sleeps; ``at(t, f)`` runs ``f`` once t is reached."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.events: list[tuple[float, Any]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        for event in [e for e in self.events if e[0] <= self.now]:
            self.events.remove(event)
            event[1]()


def runner(slurm: FakeSlurm, clock: Clock, warned: list[str] | None = None) -> VerifyRunner:
    return VerifyRunner(
        slurm,
        lambda _snapshot: FABRIC,
        clock=clock,
        sleep=clock.sleep,
        warn=(warned if warned is not None else []).append,
        token=lambda: "cafe",
    )


@pytest.fixture
def slurm() -> FakeSlurm:
    fake = FakeSlurm.from_snapshot(snapshot())
    fake.next_job_id = 500
    return fake


def finish(slurm: FakeSlurm, tmp_path: Path, doc: dict[str, Any] | None, rc: int = 0) -> None:
    """The job runs, writes its document (when given) and exits with ``rc``."""
    slurm.start(500)
    if doc is not None:
        (tmp_path / "slurmopt-verify-cafe.json").write_text(json.dumps(doc))
    slurm.end(500, JobState.COMPLETED if rc == 0 else JobState.FAILED, rc)


def test_success_gives_the_report_and_cancels_nothing(slurm: FakeSlurm, tmp_path: Path) -> None:
    clock = Clock()
    doc = document(RING, 22.0, measured(RING, {}, 23.0))
    clock.events.append((30.0, lambda: finish(slurm, tmp_path, doc)))
    request = VerifyRequest(workdir=tmp_path, rdzv_port=29555, sbatch_args=("--qos=high",))
    report = runner(slurm, clock).run(request)
    assert report.passed and list(report.nodes) == RING
    assert report.job == {
        "id": "500",
        "output": str(tmp_path / "slurmopt-verify-cafe-500.out"),
        "document": str(tmp_path / "slurmopt-verify-cafe.json"),
    }
    ((_, job_id, argv, script, env),) = [c for c in slurm.calls if c[0] == "submit"]
    assert job_id == 500 and argv[0] == "--job-name=slurmopt-verify-cafe"
    assert "--wait" not in argv and argv[-1] == "--qos=high"
    assert "-m slurmopt.elastic.bench" in script and env == {"SLURMOPT_RDZV_PORT": "29555"}
    assert slurm.writes_total("cancel") == 0
    # Backing off from 1 s, never past 10 s, until the job ended at 30 s.
    assert clock.sleeps == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_submit_refusal_passes_sbatch_words_then_one_line_69(
    slurm: FakeSlurm, tmp_path: Path
) -> None:
    words = "sbatch: error: Batch job submission failed: Invalid account\n"
    slurm.fail("before:submit", lambda _p: SlurmCommandError(["sbatch", "--parsable"], 1, words))
    warned: list[str] = []
    with pytest.raises(SlurmError) as info:
        runner(slurm, Clock(), warned).run(VerifyRequest(workdir=tmp_path))
    assert info.value.exit_code == 69
    assert str(info.value) == "sbatch did not submit the benchmark job (exit 1)"
    assert warned == [words]
    assert slurm.writes_total() == 0


def test_timeout_cancels_the_job_exactly_once(slurm: FakeSlurm, tmp_path: Path) -> None:
    clock = Clock()
    with pytest.raises(VerifyTimeout) as info:
        runner(slurm, clock).run(VerifyRequest(workdir=tmp_path, timeout_s=60))
    assert info.value.exit_code == 75
    assert str(info.value) == (
        "benchmark job 500 did not finish within 60 s (pending or running); it was cancelled"
    )
    assert clock.now == 60.0
    assert slurm.writes(500, "cancel") == 1 and slurm.writes_total("cancel") == 1
    assert slurm.jobs[500].state is JobState.CANCELLED


def test_ctrl_c_cancels_the_job_exactly_once(slurm: FakeSlurm, tmp_path: Path) -> None:
    clock = Clock()

    def interrupt() -> None:
        raise KeyboardInterrupt

    clock.events.append((5.0, interrupt))
    with pytest.raises(KeyboardInterrupt):
        runner(slurm, clock).run(VerifyRequest(workdir=tmp_path))
    assert slurm.writes(500, "cancel") == 1 and slurm.writes_total("cancel") == 1


def test_a_failing_cancel_does_not_hide_the_timeout(slurm: FakeSlurm, tmp_path: Path) -> None:
    slurm.fail("before:cancel", unavailable)
    with pytest.raises(VerifyTimeout):
        runner(slurm, Clock()).run(VerifyRequest(workdir=tmp_path, timeout_s=5))
    assert slurm.fired() == ["before:cancel"]


def test_an_unreachable_controller_is_asked_again_until_the_job_ends(
    slurm: FakeSlurm, tmp_path: Path
) -> None:
    clock = Clock()
    slurm.fail("before:status", lambda p: SlurmUnavailable(p), times=3)
    doc = document(RING, 22.0, measured(RING, {}, 23.0))
    clock.events.append((2.0, lambda: finish(slurm, tmp_path, doc)))
    report = runner(slurm, clock).run(VerifyRequest(workdir=tmp_path))
    assert report.passed and slurm.reads("status") == 4
    assert slurm.writes_total("cancel") == 0


def test_a_failed_job_names_its_exit_and_output(slurm: FakeSlurm, tmp_path: Path) -> None:
    clock = Clock()
    clock.events.append((1.0, lambda: finish(slurm, tmp_path, None, rc=3)))
    (tmp_path / "slurmopt-verify-cafe-500.out").write_text("NCCL WARN boom\n")
    with pytest.raises(BenchJobFailed) as info:
        runner(slurm, clock).run(VerifyRequest(workdir=tmp_path))
    assert str(info.value) == (
        f"benchmark job 500 failed (exit 3); its output is {tmp_path}/slurmopt-verify-cafe-500.out"
        " (last line: NCCL WARN boom)"
    )
    assert slurm.writes_total("cancel") == 0


def test_a_job_slurm_forgot_is_judged_by_its_document(slurm: FakeSlurm, tmp_path: Path) -> None:
    clock = Clock()
    clock.events.append((1.0, lambda: slurm.jobs.pop(500)))
    with pytest.raises(BenchDocumentError, match="benchmark job 500 wrote no report to "):
        runner(slurm, clock).run(VerifyRequest(workdir=tmp_path))
    assert slurm.writes_total("cancel") == 0
