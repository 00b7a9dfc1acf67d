"""``slurmopt submit`` against the real ``sbatch``, side by side on the sandbox cluster.

Every case is submitted twice, once with ``sbatch`` and once with the
installed ``slurmopt`` console script, and the two must be
indistinguishable: exit code, stdout (up to the job id), stderr (up to
slurmopt's one warning line when the cluster has no job-submit plugin),
and, for jobs that were accepted, what Slurm recorded about them.  Jobs are
held, so none of them takes nodes from the cluster.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slurmopt.slurm.cli import version_tuple
from slurmopt.slurm.sbatch_probe import probe
from slurmopt.submit import NO_PLUGIN_WARNING, has_submit_plugin
from slurmopt.submit.options import tables
from slurmopt.tag import JobTag, parse_comment
from tests.sandbox import SlurmSandbox

pytestmark = pytest.mark.slurm

JOB = """#!/bin/sh
#SBATCH --partition=gpu
#SBATCH -N 2 --gres=gpu:4   # two nodes, half their GPUs
#SBATCH --time=00:07:00
#SBATCH --job-name="dir job"
#SBATCH --comment 'nightly #3'
#SOPT --preemptible

  #SBATCH -N 9
sleep 1
#SBATCH -N 5
#SBATCH --time=1
"""
PLAIN = "#!/bin/sh\nsleep 1\n"
TAGGED = "#!/bin/sh\n#SBATCH -p gpu -N 2\n#SOPT --preemptible\nsleep 1\n"


@dataclass(frozen=True)
class Case:
    id: str
    args: list[str]
    script: str | None = PLAIN
    stdin: bool = False
    own: list[str] = field(default_factory=list)  # given to slurmopt only
    ok: bool = True
    tag: JobTag = JobTag()
    since: tuple[int, int] = (0, 0)  # the first Slurm release whose sbatch has the options


CASES = [
    Case("flags", ["-p", "gpu", "-N", "2", "--gres=gpu:4", "-t", "10", "-J", "f", "--hold",
                   "job.sh"]),
    Case("directives", ["--hold", "job.sh"], JOB, tag=JobTag(preemptible=True)),
    Case("command-line-wins", ["-N3", "--comment", "mine", "--hold", "-t", "2", "job.sh"], JOB,
         tag=JobTag(preemptible=True)),
    Case("script-args-are-not-options", ["--hold", "job.sh", "-N", "4", "--elastic", "9:9"]),
    Case("own-options", ["--hold", "-J", "own", "job.sh"],
         own=["--elastic", "1:3", "--preemptible"], tag=JobTag(preemptible=True, elastic=(1, 3))),
    Case("clusters-and-abbreviations", ["-HN2", "--part", "gpu", "--gpus-per-n=2", "job.sh"]),
    Case("parsable", ["--parsable", "--hold", "-J", "p", "job.sh"]),
    Case("wrap", ["--hold", "--wrap", "sleep 1", "-N", "2"], None),
    Case("stdin", ["--hold", "-J", "piped"], JOB, stdin=True, tag=JobTag(preemptible=True)),
    Case("tres-per-task", ["--tres-per-task", "gres/gpu:1", "--hold", "job.sh"], TAGGED,
         tag=JobTag(preemptible=True), since=(24, 11)),
    Case("segment", ["--segment", "1", "--hold", "job.sh"], TAGGED, tag=JobTag(preemptible=True),
         since=(24, 11)),
    Case("gres-flags", ["--gres-flags=enforce-binding", "--gres=gpu:2", "--hold", "job.sh"],
         TAGGED, tag=JobTag(preemptible=True)),
    Case("gpus-per-task", ["--gpus-per-task", "1", "-n2", "--hold", "job.sh"], TAGGED,
         tag=JobTag(preemptible=True)),
    Case("bad-partition", ["-p", "nosuch", "--hold", "job.sh"], ok=False),
    Case("missing-script", ["--hold", "missing.sh"], None, ok=False),
    Case("bad-directive", ["--hold", "job.sh"], "#!/bin/sh\n#SBATCH --nodes=x\ntrue\n", ok=False),
    Case("not-a-script", ["--hold", "job.sh"], "sleep 1\n", ok=False),
]  # fmt: skip


def _slurmopt() -> str:
    beside = Path(sys.executable).with_name("slurmopt")
    found = str(beside) if beside.exists() else shutil.which("slurmopt")
    assert found, "the slurmopt console script is not installed (pip install -e .)"
    return found


def _submit(argv: list[str], cwd: Path, env: dict[str, str], stdin: str | None) -> Any:
    return subprocess.run(
        argv, cwd=cwd, env=env, input=stdin or "", capture_output=True, text=True, timeout=60
    )


def _job_id(stdout: str) -> int:
    match = re.fullmatch(r"(?:Submitted batch job )?(\d+)(;\S+)?\n", stdout)
    assert match, f"unexpected sbatch output {stdout!r}"
    return int(match[1])


def _jobs(slurm: SlurmSandbox, ids: set[int]) -> dict[int, dict[str, Any]]:
    """What Slurm recorded for these jobs (squeue --json on 22.05 ignores -j: filter here)."""
    data = json.loads(slurm.run("squeue", "--json"))
    keys = (
        "partition", "node_count", "tres_per_node", "tres_per_task", "segment_size",
        "time_limit", "name", "comment",
    )  # fmt: skip
    return {
        j["job_id"]: {k: _plain(j.get(k)) for k in keys} for j in data["jobs"] if j["job_id"] in ids
    }


def _plain(value: Any) -> Any:
    """A number as 22.05 writes it: 23.02 and later wrap it as ``{set, infinite, number}``."""
    if isinstance(value, dict) and "number" in value:
        return value["number"] if value.get("set", True) and not value.get("infinite") else None
    return value


@pytest.fixture(scope="module")
def plugin_present(slurm_cluster: SlurmSandbox) -> bool:
    return has_submit_plugin(slurm_cluster.run("scontrol", "show", "config"))


@pytest.fixture(scope="module")
def release(slurm_cluster: SlurmSandbox) -> tuple[int, int]:
    """The Slurm release of the sandbox's sbatch."""
    return version_tuple(slurm_cluster.run("sbatch", "--version"))


def test_side_by_side_with_sbatch(
    slurm: SlurmSandbox, tmp_path: Path, plugin_present: bool, release: tuple[int, int]
) -> None:
    slurmopt = _slurmopt()
    env = {k: v for k, v in slurm.env.items() if not k.startswith("SBATCH_")}
    pairs: list[tuple[Case, int, int]] = []
    cases = [c for c in CASES if release >= c.since]
    for case in cases:
        cwd = tmp_path / case.id
        cwd.mkdir()
        if case.script is not None and not case.stdin:
            (cwd / "job.sh").write_text(case.script)
        stdin = case.script if case.stdin else None
        ref = _submit(["sbatch", *case.args], cwd, env, stdin)
        got = _submit([slurmopt, "submit", *case.own, *case.args], cwd, env, stdin)
        where = f"case {case.id}: sbatch {ref!r} / slurmopt {got!r}"

        assert got.returncode == ref.returncode, where
        assert (ref.returncode == 0) == case.ok, where
        assert re.sub(r"\d+", "N", got.stdout) == re.sub(r"\d+", "N", ref.stdout), where
        stderr = got.stderr
        if not plugin_present:
            assert stderr.startswith(NO_PLUGIN_WARNING + "\n"), where
            stderr = stderr[len(NO_PLUGIN_WARNING) + 1 :]
        assert NO_PLUGIN_WARNING not in stderr, where
        assert stderr == ref.stderr, where
        if case.ok:
            pairs.append((case, _job_id(ref.stdout), _job_id(got.stdout)))

    assert len(pairs) == sum(c.ok for c in cases)
    jobs = _jobs(slurm, {i for _, a, b in pairs for i in (a, b)})
    for case, ref_id, got_id in pairs:
        ref_job, got_job = dict(jobs[ref_id]), dict(jobs[got_id])
        tag, user = parse_comment(got_job.pop("comment"))
        assert tag == case.tag, case.id
        assert user == (ref_job.pop("comment") or None), case.id
        assert got_job == ref_job, case.id


def test_directives_after_the_first_command_are_ignored_by_both(
    slurm: SlurmSandbox, tmp_path: Path
) -> None:
    (tmp_path / "job.sh").write_text(JOB)
    env = dict(slurm.env)
    ref = _submit(["sbatch", "--parsable", "--hold", "job.sh"], tmp_path, env, None)
    got = _submit([_slurmopt(), "submit", "--parsable", "--hold", "job.sh"], tmp_path, env, None)
    jobs = _jobs(slurm, {_job_id(ref.stdout), _job_id(got.stdout)})
    for job in jobs.values():
        assert job["node_count"] == 2  # not the 5 after `sleep 1`, not the indented 9
        assert job["time_limit"] == 7
    assert len(jobs) == 2


def _table_name(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]:02d}"


@pytest.mark.parametrize(
    ("own", "message"),
    [
        (["--elastic", "0:2"], "slurmopt: --elastic MIN must be at least 1, got '0:2'"),
        (["--elastic", "3:2"], "slurmopt: --elastic MIN must not exceed MAX, got '3:2'"),
        (["--template", "nope"], "slurmopt: unknown template 'nope'"),
        (["--no-such-flag"], "slurmopt: unknown sbatch option '--no-such-flag' for Slurm {}"),
        (["--segment", "4", "--template", "single-node"],
         "slurmopt: unknown sbatch option '--segment' for Slurm {}"),
    ],
)  # fmt: skip
def test_bad_options_never_reach_sbatch(
    slurm: SlurmSandbox,
    tmp_path: Path,
    own: list[str],
    message: str,
    release: tuple[int, int],
) -> None:
    if "--segment" in own and "segment" in tables()[_table_name(release)].long:
        return  # the release's sbatch has --segment: the side-by-side cases submit it
    message = message.format(_table_name(release))
    (tmp_path / "job.sh").write_text(PLAIN)
    before = slurm.run("squeue", "-h", "-o", "%i").split()
    got = _submit([_slurmopt(), "submit", *own, "--hold", "job.sh"], tmp_path, slurm.env, None)
    assert got.returncode == 2
    assert got.stdout == ""
    assert got.stderr == message + "\n"
    assert slurm.run("squeue", "-h", "-o", "%i").split() == before


def test_option_table_is_the_live_sbatchs(slurm: SlurmSandbox, release: tuple[int, int]) -> None:
    """The shipped table of this release is what its sbatch's getopt answers today."""
    live = probe(["sbatch"])  # the sandbox's, through the PATH and SLURM_CONF it set
    shipped = tables()[_table_name(release)]
    assert live.release == shipped.release
    assert dict(live.long) == dict(shipped.long)
    assert dict(live.short) == dict(shipped.short)
