"""The in-job runtime: atomic checkpoints, resume from the newest valid one, the ack."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurmopt.elastic.checkpoint import (
    LATEST,
    CheckpointError,
    CheckpointManager,
    newest_valid,
    verify,
    write_checkpoint,
)
from slurmopt.elastic.runtime import (
    PREEMPTED_FILE,
    REQUEST_FILE,
    JobEnv,
    acknowledge,
    agree,
    checkpoint_requested,
    mark_preempted,
)
from slurmopt.tag import checkpoint_of


def test_checkpoint_round_trip_and_manifest(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path, 7, {"a.bin": b"alpha", "b.bin": b"beta"}, 100.0)
    found = verify(path)
    assert found.step == 7 and found.read("a.bin") == b"alpha"
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest["files"]) == {"a.bin", "b.bin"}
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_resume_skips_corrupt_and_partial_checkpoints(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, 10, {"s": b"ten"}, 1.0)
    newer = write_checkpoint(tmp_path, 20, {"s": b"twenty"}, 2.0)
    newest = write_checkpoint(tmp_path, 30, {"s": b"thirty"}, 3.0)
    (newest / "s").write_bytes(b"flipped")  # corrupt on purpose
    partial = tmp_path / "step-00000040"
    partial.mkdir()  # no manifest: a crash mid-copy
    (tmp_path / ".step-00000050.tmp-1-1").mkdir()  # an unfinished write
    found = newest_valid(tmp_path)
    assert found is not None and found.step == 20 and found.path == newer
    with pytest.raises(CheckpointError, match="checksum"):
        verify(newest)
    with pytest.raises(CheckpointError, match="manifest"):
        verify(partial)


def test_manifest_naming_a_missing_file_is_invalid(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path, 1, {"s": b"x"}, 1.0)
    (path / "s").unlink()
    assert newest_valid(tmp_path) is None


def test_manager_copies_to_shared_and_moves_latest_after_verifying(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "local", tmp_path / "shared")
    manager.save(5, {"s": b"five"}, wait=True)
    assert manager.latest() == "step-00000005"
    assert verify(tmp_path / "shared" / "step-00000005").read("s") == b"five"
    manager.save(6, {"s": b"six"})
    manager.wait()
    assert manager.latest() == "step-00000006"
    found = manager.resume()
    assert found is not None and found.step == 6


def test_failed_copy_leaves_latest_where_it_was(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    manager = CheckpointManager(tmp_path / "local", shared)
    manager.save(1, {"s": b"one"}, wait=True)
    (shared / "step-00000002").write_text("a file where the copy's directory must go")
    with pytest.raises(CheckpointError):
        manager.save(2, {"s": b"two"}, wait=True)
    assert (shared / LATEST).read_text().strip() == "step-00000001"


def test_resume_prefers_the_newest_valid_of_local_and_shared(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "shared", 3, {"s": b"3"}, 1.0)
    write_checkpoint(tmp_path / "local", 4, {"s": b"4"}, 2.0)
    manager = CheckpointManager(tmp_path / "local", tmp_path / "shared")
    found = manager.resume()
    assert found is not None and found.step == 4


def test_request_flag_agreement_and_preempted_marker(tmp_path: Path) -> None:
    assert not checkpoint_requested(tmp_path)
    (tmp_path / REQUEST_FILE).touch()
    assert checkpoint_requested(tmp_path)
    assert agree(False, lambda v: max(v, 1)) is True  # another rank saw the request
    assert agree(False, lambda v: v) is False
    assert agree(True) is True
    mark_preempted(tmp_path)
    assert (tmp_path / PREEMPTED_FILE).is_file()


class FakeSlurmCommands:
    """Stands in for squeue/scontrol: holds one job's comment."""

    def __init__(self, comment: str) -> None:
        self.comment = comment
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        if argv[0] == "squeue":
            return self.comment + "\n"
        assert argv[:2] == ["scontrol", "update"]
        self.comment = argv[3].removeprefix("Comment=")
        return ""


def test_acknowledge_writes_the_checkpoint_into_the_jobs_own_comment() -> None:
    slurm = FakeSlurmCommands("slurmopt:managed,preemptible | my run")
    acknowledge(42, 120, at=1700000000.0, run=slurm)
    assert slurm.comment == "slurmopt:managed,preemptible,ckpt=120@1700000000 | my run"
    assert slurm.calls[-1][:3] == ["scontrol", "update", "JobId=42"]
    acknowledge(42, 130, at=1700000050.0, run=slurm)
    assert checkpoint_of(slurm.comment) == (130, 1700000050.0)


def test_job_env_from_the_template_variables(tmp_path: Path) -> None:
    env = JobEnv.from_environ(
        {
            "SLURM_JOB_ID": "9",
            "SLURMOPT_CKPT_DIR": str(tmp_path / "l"),
            "SLURMOPT_CKPT_SHARED": str(tmp_path / "s"),
            "SLURMOPT_COLLECTIVE_TIMEOUT_MIN": "2",
        }
    )
    assert env.job_id == 9 and env.collective_timeout_s == 120.0
    assert env.shared_dir == tmp_path / "s"
