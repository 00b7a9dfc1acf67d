"""The shipped sbatch option tables against each release's own ``sbatch --help`` and ``--usage``.

The fixtures under ``tests/fixtures/sbatch/RELEASE/`` are those commands'
output, recorded from the sandbox of each release; an option they list
that the table lacks would make ``slurmopt submit`` refuse a valid command.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmopt.errors import UsageError
from slurmopt.submit import build_submission
from slurmopt.submit.options import Arity, help_options, table_for, tables

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sbatch"
RELEASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())

#: Options a release's help still lists that its sbatch rejects ("unrecognized option").
STALE_IN_HELP = {"22.05": set(), "24.11": {"power"}, "26.05": {"power"}}


def test_every_release_has_a_table_and_recorded_help() -> None:
    assert RELEASES == sorted(tables()) == ["22.05", "24.11", "26.05"]


@pytest.mark.parametrize("release", RELEASES)
def test_table_has_every_option_sbatch_help_lists(release: str) -> None:
    table = tables()[release]
    text = "".join((FIXTURES / release / f"{name}.txt").read_text() for name in ("help", "usage"))
    listed, shorts = help_options(text)
    assert len(listed) > 90  # the parse found the options, not a stray few
    assert sorted(listed - set(table.long)) == sorted(STALE_IN_HELP[release])
    assert {k: v for k, v in table.short.items() if k in shorts} == shorts
    assert sorted(set(table.short) - set(shorts)) == []


def test_tables_differ_where_the_releases_do() -> None:
    old, mid, new = (tables()[r] for r in ("22.05", "24.11", "26.05"))
    assert "segment" not in old.long and "tres-per-task" not in old.long
    assert mid.long["segment"] is Arity.REQUIRED and mid.long["tres-per-task"] is Arity.REQUIRED
    assert old.long["requeue"] is Arity.NONE and new.long["requeue"] is Arity.OPTIONAL


@pytest.mark.parametrize(
    ("answer", "release", "warned"),
    [
        ("slurm-wlm 22.05.8\n", "22.05", False),
        ("slurm 24.11.5\n", "24.11", False),
        ("slurm-wlm 26.05.5\n", "26.05", False),
        ("slurm 27.11.0\n", "26.05", True),
        ("", "26.05", True),
    ],
)
def test_table_is_chosen_by_release_newest_with_a_warning(
    answer: str, release: str, warned: bool
) -> None:
    table, warning = table_for(answer)
    assert table.release == release
    assert (warning is not None) == warned
    if warning is not None:
        assert warning.startswith("slurmopt: warning: ") and "\n" not in warning


def test_a_failed_version_query_is_named_in_the_warning() -> None:
    cause = "sbatch: fatal: Could not establish a configuration source"
    table, warning = table_for("", cause)
    assert table.release == "26.05"
    assert warning is not None and f"sbatch --version failed ({cause})" in warning


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_tres_per_task_value_is_not_the_script(release: str) -> None:
    script = "#!/bin/sh\n#SOPT --preemptible\nhostname\n"
    args = ["--tres-per-task", "gres/gpu:1", "job.sh"]
    sub = build_submission(args, script, "job.sh", table=tables()[release])
    assert sub.request.script == "job.sh"
    assert sub.request.tag.preemptible
    assert sub.args[1:] == args


def test_an_option_the_release_lacks_is_named_and_never_reaches_sbatch() -> None:
    args = ["--segment", "4", "--template", "single-node", "train.py"]
    with pytest.raises(UsageError, match=r"^unknown sbatch option '--segment' for Slurm 22\.05$"):
        build_submission(args, None, "train.py", table=tables()["22.05"])
    sub = build_submission(args, None, "train.py", table=tables()["24.11"])
    assert sub.args[1:] == ["--segment", "4"]
    assert sub.request.tag.template == "single-node"
