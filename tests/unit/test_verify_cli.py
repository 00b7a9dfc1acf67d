"""``slurmopt verify`` against the shared fake Slurm, whose benchmark job the test plays."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import slurmopt.slurm
from slurmopt.cli import main
from slurmopt.errors import SlurmCommandError, SlurmUnavailable
from slurmopt.fabric import Fabric
from slurmopt.model import JobState
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_verify import FABRIC, document, measured, snapshot

RING = ["n1", "n2", "n9", "n10"]
JOB = 77


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """A fake Slurm client and fabric; the benchmark job ends on the first look at its state,
    writing its output and (``doc``) its document and exiting with ``rc``, unless ``hang``."""
    calls: dict[str, Any] = {"error": None, "doc": None, "rc": 0, "hang": False, "refuse": None}

    def play_the_job() -> None:
        slurm: FakeSlurm = calls["slurm"]
        call = submitted(calls)
        assert call is not None
        opts = dict(a[2:].split("=", 1) for a in call["argv"] if a.startswith("--") and "=" in a)
        Path(opts["output"].replace("%j", str(JOB))).write_text(
            "torchrun says hello\nFAKE LAST LINE\n"
        )
        if calls["doc"] is not None:
            out = re.search(r"--out (\S+)", call["script"])
            assert out is not None
            Path(out.group(1)).write_text(json.dumps(calls["doc"]))
        state = JobState.COMPLETED if calls["rc"] == 0 else JobState.FAILED
        slurm.end(JOB, state, calls["rc"])

    def connect(backend: str = "cli", **options: Any) -> FakeSlurm:
        slurm = FakeSlurm.from_snapshot(snapshot(), calls["error"])
        slurm.next_job_id = JOB
        if calls["refuse"] is not None:
            words = calls["refuse"]
            slurm.fail("before:submit", lambda _p: SlurmCommandError(["sbatch"], 1, words))
        if not calls["hang"]:
            slurm.during["status"] = play_the_job
        calls["slurm"] = slurm
        return slurm

    def load_fabric(**kwargs: Any) -> Fabric:
        calls["fabric"] = kwargs
        return FABRIC

    discover = types.ModuleType("slurmopt.fabric.discover")
    discover.load_fabric = load_fabric  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "slurmopt.fabric.discover", discover)
    monkeypatch.setattr(slurmopt.slurm, "connect", connect, raising=False)
    monkeypatch.delenv("SLURMOPT_RDZV_PORT", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    calls.update(work=work, tmp=tmp_path)
    return calls


def submitted(fake: dict[str, Any]) -> dict[str, Any] | None:
    """What the command asked the fake to submit: sbatch's arguments, script, environment."""
    slurm: FakeSlurm | None = fake.get("slurm")
    subs = [c for c in slurm.calls if c[0] == "submit"] if slurm is not None else []
    if not subs:
        return None
    _, _, argv, script, env = subs[-1]
    return {"argv": list(argv), "script": script, "env": env}


def run(
    capsys: pytest.CaptureFixture[str], fake: dict[str, Any], *argv: str
) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(["verify", "--workdir", str(fake["work"]), *argv])
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


def test_healthy_run_passes_and_submits_the_benchmark(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake["doc"] = document(RING, 22.0, measured(RING, {}, 23.0))
    plot = fake["tmp"] / "bw.png"
    code, out, err = run(
        capsys, fake, "--rdzv-port", "29555", "--plot", str(plot), "--sbatch-arg=--time=20"
    )
    assert (code, err) == (0, "")
    assert "PASS: nothing flagged" in out
    assert "pair:n2+n9" in out and "256 MiB" in out
    assert "n1: NVML unavailable: no driver" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    call = submitted(fake)
    assert call is not None
    argv = call["argv"]
    assert argv[0].startswith("--job-name=")
    name = argv[0].removeprefix("--job-name=")
    assert f"--output={fake['work']}/{name}-%j.out" in argv
    assert f"--chdir={fake['work']}" in argv
    assert "--nodelist=n[1-2,9-10]" in argv and "--nodes=4" in argv and "--exclusive" in argv
    assert "--gpus-per-node=1" in argv
    assert argv[-1] == "--time=20"  # the user's own arguments come last, and win
    script = call["script"]
    assert "--nnodes=4" in script and "--nproc-per-node=1" in script
    assert f"-m slurmopt.elastic.bench --out {fake['work']}/{name}.json" in script
    assert "--group 'pair:n1+n2=n[1-2]'" in script and "--group 'leaf:leaf2=n[9-10]'" in script
    assert call["env"] == {"SLURMOPT_RDZV_PORT": "29555"}  # the option beats the environment
    assert fake["slurm"].writes_total("cancel") == 0


def test_json_report_and_a_slow_node_exit_1(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = {"pair:n1+n2": 4.0, "pair:n2+n9": 4.0}
    fake["doc"] = document(RING, 8.0, measured(RING, slow, 23.0))
    code, out, err = run(capsys, fake, "--json")
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("slurmopt: verify: ")
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["passed"] is False
    assert doc["job"]["id"] == "77"
    assert doc["job"]["output"].endswith("-77.out")
    node_flags = [f for f in doc["flags"] if f["kind"] == "node"]
    assert [f["subject"] for f in node_flags] == ["n2"]


def test_nodelist_is_tested_as_given(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ring = ["n3", "n4", "n5"]
    fake["doc"] = document(ring, 22.0, measured(ring, {}, 23.0))
    code, out, _ = run(capsys, fake, "--nodelist", "n[3-5]", "--json", "-p", "gpu")
    assert code == 0
    call = submitted(fake)
    assert call is not None
    assert "--nodelist=n[3-5]" in call["argv"] and "--nodes=3" in call["argv"]
    assert "--partition=gpu" in call["argv"]
    assert json.loads(out)["nodes"] == ring


def test_sbatch_refusal_passes_its_words_through(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    words = "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    fake["refuse"] = words
    code, out, err = run(capsys, fake)
    assert code == 69
    assert out == ""
    assert err.startswith(words)
    assert err.removeprefix(words) == "slurmopt: sbatch did not submit the benchmark job (exit 1)\n"


def test_failed_job_names_its_output_and_last_line(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake["rc"] = 1
    code, _, err = run(capsys, fake)
    assert code == 69
    assert err.count("\n") == 1
    assert err.startswith("slurmopt: benchmark job 77 failed (exit 1); its output is ")
    assert err.rstrip().endswith("(last line: FAKE LAST LINE)")


def test_a_job_that_writes_no_report_is_a_data_error(
    fake: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, fake)
    assert code == 65
    assert err.startswith("slurmopt: benchmark job 77 wrote no report to ")
    assert err.count("\n") == 1


def test_timeout_cancels_the_job(
    fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake["hang"] = True
    code, _, err = run(capsys, fake, "--timeout", "2")
    assert code == 75
    assert "did not finish within 2 s" in err and err.count("\n") == 1
    assert fake["slurm"].writes(JOB, "cancel") == 1


def test_slurm_down_is_one_line_and_69(
    fake: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    fake["error"] = SlurmUnavailable("slurmctld unreachable: sinfo: error: cannot connect")
    code, out, err = run(capsys, fake)
    assert (code, out) == (69, "")
    assert err == "slurmopt: slurmctld unreachable: sinfo: error: cannot connect\n"
    assert submitted(fake) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "1"], "--nodes must be at least 2, got 1"),
        (["--max-bytes", "1G"], "--max-bytes is at most 256 MiB"),
        (["--min-bytes", "lots"], "--min-bytes: cannot read 'lots'"),
        (["--min-bytes", "1M", "--max-bytes", "64K"], "--min-bytes must be 4 to --max-bytes"),
        (["--min-efficiency", "2"], "--min-efficiency must be 0 to 1, got 2"),
        (["--outlier", "0"], "--outlier must be above 0 and at most 1, got 0"),
        (["--timeout", "0"], "--timeout must be a positive number of seconds"),
        (["--rdzv-port", "70000"], "--rdzv-port must be 1 to 65535"),
        (["--nodelist", "n[1-"], "--nodelist: bad hostlist"),
        (["--nodelist", "n1"], "--nodelist must name at least 2 nodes"),
        (["--nodes", "3", "--nodelist", "n[1-4]"], "--nodes 3 but --nodelist names 4 nodes"),
        (["--nodelist", "n1,zz[1-2]"], "--nodelist: not Slurm nodes: zz[1-2]"),
        (["--partition", "nope"], "unknown partition 'nope'"),
        (["--nodes", "40"], "32 idle node(s) in the cluster, --nodes 40 needs 40"),
        (["--bogus"], "No such option '--bogus'"),
    ],
)
def test_bad_options_exit_2_with_one_line_and_no_job(
    fake: dict[str, Any], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, fake, *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("slurmopt: ")
    assert message in err
    assert submitted(fake) is None


def test_workdir_must_exist(fake: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["verify", "--workdir", str(fake["tmp"] / "missing")])
    assert info.value.code == 2
    assert "not a directory" in capsys.readouterr().err
