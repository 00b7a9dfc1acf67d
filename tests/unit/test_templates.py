"""Job templates: golden renderings, quoting, strictness, and shell syntax.

After a deliberate template change, rewrite the golden files with
``SLURMOPT_UPDATE_GOLDEN=1 pytest tests/unit/test_templates.py`` and review the diff.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmopt.errors import UsageError
from slurmopt.submit import build_submission
from slurmopt.tag import parse_comment
from slurmopt.templates import SHIPPED, TemplateValues, available, render, shquote

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "templates"
UPDATE = os.environ.get("SLURMOPT_UPDATE_GOLDEN") == "1"

VALUES = TemplateValues(
    program="train.py",
    program_args=("--data", "/data/my set", "--note=it's"),
    directives=("#SBATCH --time=00:10:00", "#SBATCH --job-name=demo"),
    min_nodes=1,
    max_nodes=2,
    nproc_per_node=2,
)


@pytest.mark.parametrize("name", SHIPPED)
def test_golden(name: str) -> None:
    text = render(name, VALUES)
    golden = FIXTURES / f"{name}.sh"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("name", SHIPPED)
def test_rendered_script_is_valid_bash_with_directives_before_the_first_command(
    name: str,
) -> None:
    text = render(name, VALUES)
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run([bash, "-n"], input=text, text=True, check=True)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    first_command = next(
        i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")
    )
    directive_lines = [i for i, line in enumerate(lines) if line.startswith("#SBATCH")]
    assert max(directive_lines) < first_command
    assert "#SBATCH --time=00:10:00" in lines


def test_shipped_templates_are_the_available_ones() -> None:
    assert set(SHIPPED) <= set(available())
    assert not any(name.startswith("_") for name in available())


def test_elastic_torchrun_has_the_fixed_design() -> None:
    text = render("elastic-torchrun", VALUES)
    for needle in (
        "--nnodes=1:2",
        "--nproc-per-node=2",
        "--max-restarts=3",
        "--rdzv-backend=c10d",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR2@120",
        "trap request_checkpoint USR2",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
        "NCCL_IB_TIMEOUT=22",
        'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1',
        "SLURMOPT_COLLECTIVE_TIMEOUT_MIN=5",
    ):
        assert needle in text, needle


def test_user_values_are_shell_quoted() -> None:
    hostile = TemplateValues(program="x.py; rm -rf /", program_args=("$(id)", "`id`", "a b"))
    text = render("single-node", hostile)
    assert "'x.py; rm -rf /' '$(id)' '`id`' 'a b'" in text
    assert shquote("it's") == "'it'\"'\"'s'"


def test_a_missing_value_is_an_error_not_an_empty_string(tmp_path: Path) -> None:
    (tmp_path / "broken.sh.j2").write_text("#!/bin/bash\necho {{ not_given }}\n")
    env = {"SLURMOPT_TEMPLATE_DIR": str(tmp_path)}
    with pytest.raises(UsageError, match="not_given"):
        render("broken", VALUES, env)


def test_unknown_template_and_bad_directives_are_refused() -> None:
    with pytest.raises(UsageError, match="unknown template"):
        render("nope", VALUES)
    with pytest.raises(UsageError, match="not an #SBATCH"):
        render("single-node", TemplateValues(program="p", directives=("echo hi",)))
    with pytest.raises(UsageError, match="one line"):
        render("single-node", TemplateValues(program="p", directives=("#SBATCH -N1\nrm x",)))


def test_submit_with_a_template_renders_it_onto_stdin() -> None:
    args = [
        "--template",
        "elastic-torchrun",
        "--elastic",
        "1:2",
        "-N",
        "2",
        "--time=5",
        "--preemptible",
        "train.py",
        "--steps",
        "10",
    ]
    sub = build_submission(args, None, "train.py")
    assert sub.reads_stdin and sub.script_text is not None
    assert sub.args[0].startswith("--comment=")
    tag, _ = parse_comment(sub.args[0].removeprefix("--comment="))
    assert tag is not None and tag.template == "elastic-torchrun" and tag.preemptible
    assert "train.py" not in sub.args and "--steps" not in sub.args
    assert "-N" in sub.args and "--time=5" in sub.args
    assert "--nnodes=1:2" in sub.script_text
    assert "train.py --steps 10 &" in sub.script_text


def test_submit_bench_template_takes_the_words_as_benchmark_options() -> None:
    sub = build_submission(
        ["--template", "nccl-allreduce-bench", "-N", "2", "--", "--iters", "3"], None, "-"
    )
    assert sub.script_text is not None
    assert "-m slurmopt.elastic.bench --iters 3" in sub.script_text
    assert "--nnodes=2 " in sub.script_text


def test_submit_template_without_program_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="needs a program"):
        build_submission(["--template", "single-node"], None, "-")


@pytest.mark.parametrize("template", ["elastic-torchrun", "single-node"])
def test_the_template_traps_the_sites_preemption_signal(template: str) -> None:
    args = ["-N", "2", "--gres=gpu:4", "--template", template, "train.py"]
    text = build_submission(args, signal="TERM").script_text or ""
    assert "#SBATCH --signal=B:TERM@" in text and "trap request_checkpoint TERM" in text
    assert "USR2" not in text


@pytest.mark.parametrize(
    "gpus",
    [
        ["--gpus-per-node=4"],
        ["--gpus-per-node", "a100:4"],
        ["--gres=gpu:4"],
        ["--gres=gpu:a100:4"],
        ["--gres", "gpu:2,gpu:a100:2"],
        ["--gres=shard:1,gpu:4"],
        ["-G", "8"],  # with -N 2 below
        ["--gpus=a100:8"],
        ["--gpus-per-task=1", "--ntasks-per-node=4"],
        ["--gpus-per-task=2", "--ntasks=4"],
        ["--gres=gpu:4", "--gpus-per-node=4"],  # two spellings that agree
    ],
)
def test_every_way_to_ask_for_gpus_reaches_the_process_count(gpus: list[str]) -> None:
    args = ["-N", "2", *gpus, "--template", "elastic-torchrun", "train.py"]
    text = build_submission(args).script_text or ""
    assert "--nproc-per-node=4 " in text or "--nproc-per-node=4\n" in text, text


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (["--gres=gpu:2", "--gpus-per-node=4"], "--gpus-per-node gives 4, --gres gives 2"),
        (["-G", "3"], "no whole number per node"),
        (["--gpus-per-node=lots"], "expected a GPU count"),
    ],
)
def test_gpu_counts_that_cannot_be_read_or_disagree_are_refused(
    gpus: list[str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        build_submission(["-N", "2", *gpus, "--template", "elastic-torchrun", "train.py"])
