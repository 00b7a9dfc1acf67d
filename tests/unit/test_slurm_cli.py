"""CliSlurmClient against recorded Slurm output, through a fake command runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurmopt.errors import SlurmCommandError, SlurmResponseError, SlurmUnavailable
from slurmopt.model import JobState
from slurmopt.slurm import connect
from slurmopt.slurm.base import JobStatus, SlurmClient
from slurmopt.slurm.cli import CliSlurmClient, CommandResult, Env, SubprocessRunner

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm-json"

PING_UP = "Slurmctld(primary) at vm is UP\n"
PING_DOWN = "Slurmctld(primary) at vm is DOWN\n"


class FakeRunner:
    """Answers each argv from a table of recorded results; records every call."""

    def __init__(self, answers: dict[tuple[str, ...], CommandResult | Exception]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, ...], str | None]] = []

    def __call__(
        self, argv: Sequence[str], stdin: str | None, timeout: float, env: Env = None, /
    ) -> CommandResult:
        key = tuple(argv)
        self.calls.append((key, stdin))
        answer = self.answers.get(key, CommandResult(0, "", ""))
        if isinstance(answer, Exception):
            raise answer
        return answer


def _ok(text: str) -> CommandResult:
    return CommandResult(0, text, "")


def _file(rel: str) -> CommandResult:
    return _ok((FIXTURES / rel).read_text())


def recorded(release: str) -> dict[tuple[str, ...], CommandResult | Exception]:
    base = release
    answers: dict[tuple[str, ...], CommandResult | Exception] = {
        ("sinfo", "--version"): _file(f"{base}/sinfo_version.txt"),
        ("squeue", "--json"): _file(f"{base}/squeue.json"),
        ("scontrol", "show", "topology"): _file(f"{base}/scontrol_show_topology.txt"),
        ("scontrol", "ping"): _ok(PING_UP),
    }
    if release == "22.05":
        answers[("sinfo", "--json")] = _file(f"{base}/sinfo.json")
        answers[("scontrol", "show", "partition", "-o")] = _file(
            f"{base}/scontrol_show_partition_o.txt"
        )
    else:
        answers[("scontrol", "show", "nodes", "--json")] = _file(f"{base}/scontrol_show_nodes.json")
        answers[("scontrol", "show", "partitions", "--json")] = _file(
            f"{base}/scontrol_show_partitions.json"
        )
        answers[("scontrol", "show", "partition", "-o")] = _file(
            f"{base}/scontrol_show_partition_o.txt"
        )
    return answers


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_snapshot_reads_the_right_commands_per_release(release: str) -> None:
    runner = FakeRunner(recorded(release))
    client = CliSlurmClient(runner=runner)
    assert isinstance(client, SlurmClient)
    snap = client.snapshot()
    called = [argv for argv, _ in runner.calls]
    if release == "22.05":
        assert ("sinfo", "--json") in called
        assert ("scontrol", "show", "partition", "-o") in called
    else:
        assert ("scontrol", "show", "nodes", "--json") in called
        assert ("sinfo", "--json") not in called
    assert snap.source == "cli" and snap.slurm_version.startswith(release)
    assert snap.jobs[1].gpu_indices["gpu002"] == tuple(range(8))
    assert snap.jobs[2].held and snap.jobs[5].state is JobState.PENDING
    assert snap.nodes["gpu003"].gpus_alloc == 5 and "DRAIN" in snap.nodes["gpu008"].flags
    assert snap.partitions["gpu"].nodes[-1] == "gpu008"


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_slurm_version_is_detected_once_per_client(release: str) -> None:
    runner = FakeRunner(recorded(release))
    client = CliSlurmClient(runner=runner)
    assert client.slurm_version.startswith(release + ".")
    first, second = client.snapshot(), client.snapshot()
    assert first.slurm_version == second.slurm_version == client.slurm_version
    called = [argv for argv, _ in runner.calls]
    assert called.count(("sinfo", "--version")) == 1


def test_snapshot_version_falls_back_to_the_detected_one() -> None:
    """A document without ``meta`` (a proxy that strips it) still gets the release."""
    answers = recorded("24.11")
    doc = json.loads((FIXTURES / "24.11/squeue.json").read_text())
    del doc["meta"]
    answers[("squeue", "--json")] = _ok(json.dumps(doc))
    nodes = json.loads((FIXTURES / "24.11/scontrol_show_nodes.json").read_text())
    del nodes["meta"]
    answers[("scontrol", "show", "nodes", "--json")] = _ok(json.dumps(nodes))
    snap = CliSlurmClient(runner=FakeRunner(answers)).snapshot()
    assert snap.slurm_version == "24.11.5"


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_the_default_partition_is_known_on_every_release(release: str) -> None:
    """24.11's partitions JSON has no flags: the default comes from the text form there."""
    runner = FakeRunner(recorded(release))
    snap = CliSlurmClient(runner=runner).snapshot()
    assert snap.partitions["gpu"].default
    text_read = ("scontrol", "show", "partition", "-o") in [argv for argv, _ in runner.calls]
    assert text_read == (release != "26.05")


def test_unreachable_on_stderr_says_so() -> None:
    """24.11 and later print the controller's absence on stderr, 22.05 inside the JSON."""
    answers = recorded("24.11")
    answers[("squeue", "--json")] = CommandResult(
        1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
    )
    with pytest.raises(SlurmUnavailable, match="slurmctld unreachable: slurm_load_jobs error"):
        CliSlurmClient(runner=FakeRunner(answers)).snapshot()


def test_topology_text_is_passed_through() -> None:
    client = CliSlurmClient(runner=FakeRunner(recorded("22.05")))
    text = client.topology_text()
    assert text is not None and "SwitchName=leaf1" in text and "Switches=leaf[1-2]" in text


def test_no_topology_plugin_gives_none() -> None:
    answers = recorded("22.05")
    answers[("scontrol", "show", "topology")] = _ok("No topology information available\n")
    assert CliSlurmClient(runner=FakeRunner(answers)).topology_text() is None


def test_missing_binary_is_unavailable() -> None:
    answers = recorded("22.05")
    answers[("sinfo", "--version")] = FileNotFoundError("sinfo")
    with pytest.raises(SlurmUnavailable, match="sinfo: command not found"):
        CliSlurmClient(runner=FakeRunner(answers)).snapshot()


def test_timeout_is_unavailable() -> None:
    answers = recorded("22.05")
    answers[("squeue", "--json")] = subprocess.TimeoutExpired(["squeue"], 5)
    with pytest.raises(SlurmUnavailable, match="no answer within 5 s"):
        CliSlurmClient(runner=FakeRunner(answers), timeout=5).snapshot()


def test_controller_down_in_json_is_unavailable() -> None:
    """22.05 prints a JSON error with exit 0 when slurmctld is down; ping tells why."""
    answers = recorded("22.05")
    answers[("squeue", "--json")] = _ok(
        '{"meta": {}, "errors": [{"description": "Failed while looking for jobs",'
        ' "error": "Unspecified error"}], "jobs": []}'
    )
    answers[("scontrol", "ping")] = _ok(PING_DOWN)
    with pytest.raises(SlurmUnavailable, match="slurmctld unreachable: .*is DOWN"):
        CliSlurmClient(runner=FakeRunner(answers)).snapshot()


def test_unable_to_contact_on_stderr_is_unavailable() -> None:
    answers = recorded("22.05")
    answers[("scontrol", "show", "partition", "-o")] = CommandResult(
        1, "", "slurm_load_partitions error: Unable to contact slurm controller (connect failure)\n"
    )
    with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller"):
        CliSlurmClient(runner=FakeRunner(answers)).snapshot()


def test_garbage_output_with_controller_up_is_a_response_error() -> None:
    answers = recorded("22.05")
    answers[("sinfo", "--json")] = _ok("Segmentation fault\n")
    with pytest.raises(SlurmResponseError, match="sinfo --json: not JSON"):
        CliSlurmClient(runner=FakeRunner(answers)).snapshot()


def test_one_failed_read_fails_the_whole_snapshot() -> None:
    answers = recorded("24.11")
    answers[("scontrol", "show", "partitions", "--json")] = CommandResult(
        1, "", "scontrol: error: something odd\n"
    )
    runner = FakeRunner(answers)
    with pytest.raises(SlurmResponseError, match="something odd"):
        CliSlurmClient(runner=runner).snapshot()


def test_unknown_release_text_is_a_response_error() -> None:
    answers = recorded("22.05")
    answers[("sinfo", "--version")] = _ok("garbage\n")
    with pytest.raises(SlurmResponseError, match="cannot tell the Slurm release"):
        CliSlurmClient(runner=FakeRunner(answers)).snapshot()


@pytest.mark.parametrize(
    ("call", "argv"),
    [
        (lambda c: c.hold(7), ("scontrol", "hold", "7")),
        (lambda c: c.release(7), ("scontrol", "release", "7")),
        (
            lambda c: c.pin(7, ["gpu003", "gpu001", "gpu002"]),
            ("scontrol", "update", "JobId=7", "NodeList=gpu[001-003]"),
        ),
        (lambda c: c.signal(7, "USR1"), ("scancel", "--signal=USR1", "--batch", "7")),
        (
            lambda c: c.signal(7, "TERM", batch_only=False),
            ("scancel", "--signal=TERM", "--full", "7"),
        ),
        (lambda c: c.requeue(7), ("scontrol", "requeuehold", "7")),
        (lambda c: c.requeue(7, hold=False), ("scontrol", "requeue", "7")),
        (lambda c: c.shrink(7, 1), ("scontrol", "update", "JobId=7", "NumNodes=1")),
        (
            lambda c: c.set_comment(7, "moved by slurmopt"),
            ("scontrol", "update", "JobId=7", "AdminComment=moved by slurmopt"),
        ),
        (
            lambda c: c.set_comment(7, "x y", admin=False),
            ("scontrol", "update", "JobId=7", "Comment=x y"),
        ),
        (lambda c: c.cancel(7), ("scancel", "7")),
    ],
)
def test_writes_run_one_slurm_command(call: object, argv: tuple[str, ...]) -> None:
    runner = FakeRunner({})
    client = CliSlurmClient(runner=runner)
    call(client)  # type: ignore[operator]
    assert [a for a, _ in runner.calls] == [argv]


def test_failed_write_keeps_slurm_stderr_verbatim() -> None:
    stderr = "Invalid job id specified\nscontrol: error: second line\n"
    runner = FakeRunner({("scontrol", "hold", "99"): CommandResult(1, "", stderr)})
    with pytest.raises(SlurmCommandError, match="scontrol failed: Invalid job id") as info:
        CliSlurmClient(runner=runner).hold(99)
    assert info.value.stderr == stderr and info.value.returncode == 1
    assert info.value.argv == ["scontrol", "hold", "99"]


def test_submit_passes_script_on_stdin_and_returns_the_id() -> None:
    runner = FakeRunner({("sbatch", "--parsable", "-N2"): _ok("4242;cluster\n")})
    assert CliSlurmClient(runner=runner).submit(["-N2"], "#!/bin/sh\nsleep 1\n") == 4242
    assert runner.calls == [(("sbatch", "--parsable", "-N2"), "#!/bin/sh\nsleep 1\n")]


def test_submit_adds_env_to_sbatch_environment_only_when_given() -> None:
    seen: list[object] = []

    def runner(
        argv: Sequence[str], stdin: str | None, timeout: float, *env: object
    ) -> CommandResult:
        seen.append(env)
        return _ok("12\n")

    client = CliSlurmClient(runner=runner)
    assert client.submit(["-N2"], "#!/bin/sh\n", {"SLURMOPT_RDZV_PORT": "29555"}) == 12
    assert client.submit(["-N2"], "#!/bin/sh\n") == 12
    assert seen == [({"SLURMOPT_RDZV_PORT": "29555"},), ()]


def test_subprocess_runner_adds_env_to_its_own() -> None:
    runner = SubprocessRunner({"PATH": os.environ["PATH"], "A": "1"})
    script = "import os; print(os.environ['A'], os.environ['B'])"
    result = runner([sys.executable, "-c", script], None, 30, {"B": "2"})
    assert result.stdout == "1 2\n"


@pytest.mark.parametrize(
    ("stdout", "state", "exit_code"),
    [
        ("JobId=7 JobName=x JobState=PENDING Reason=Priority ExitCode=0:0", JobState.PENDING, None),
        ("JobId=7 JobState=RUNNING Reason=None ExitCode=0:0", JobState.RUNNING, None),
        ("JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0", JobState.COMPLETED, 0),
        ("JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0", JobState.FAILED, 3),
        ("JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15", JobState.CANCELLED, 143),
        ("JobId=7 JobState=NEW_STATE Reason=None ExitCode=0:0", JobState.UNKNOWN, None),
    ],
)
def test_job_status_reads_scontrol_show_job(
    stdout: str, state: JobState, exit_code: int | None
) -> None:
    runner = FakeRunner({("scontrol", "show", "job", "-o", "7"): _ok(stdout + "\n")})
    status = CliSlurmClient(runner=runner).job_status(7)
    assert status == JobStatus(7, state, exit_code)


def test_job_status_of_a_forgotten_job_asks_accounting() -> None:
    forgotten = CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
    sacct = ("sacct", "-n", "-X", "-P", "-j", "7", "-o", "State,ExitCode")
    answers: dict[tuple[str, ...], CommandResult | Exception] = {
        ("scontrol", "show", "job", "-o", "7"): forgotten,
        ("scontrol", "ping"): _ok(PING_UP),
        sacct: _ok("CANCELLED by 1000|0:0\n"),
    }
    client = CliSlurmClient(runner=FakeRunner(answers))
    assert client.job_status(7) == JobStatus(7, JobState.CANCELLED, 0)
    answers[sacct] = CommandResult(1, "", "sacct: error: accounting storage is disabled\n")
    assert client.job_status(7) is None


def test_submit_garbage_answer() -> None:
    runner = FakeRunner({("sbatch", "--parsable"): _ok("Submitted batch job\n")})
    with pytest.raises(SlurmResponseError, match="not a job id"):
        CliSlurmClient(runner=runner).submit([])


def test_connect_builds_the_cli_backend() -> None:
    client = connect("cli", runner=FakeRunner(recorded("26.05")))
    assert client.name == "cli" and len(client.snapshot().jobs) == 5
