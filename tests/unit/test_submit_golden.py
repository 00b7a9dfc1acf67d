"""Golden files: the exact sbatch argument list ``slurmopt submit`` builds for each case.

Each directory under ``tests/fixtures/submit/`` holds ``args.json`` (the
words given to ``slurmopt submit``, and the Slurm release whose sbatch
option table splits them: ``release``, 22.05 unless given), the script as ``job.sh`` or, for a
script piped in, ``stdin.sh``, and ``expected.json``: the sbatch arguments,
the merged request and the tag, or the one-line error.  After a deliberate
change, rewrite them with ``SLURMOPT_UPDATE_GOLDEN=1 pytest tests/unit/test_submit_golden.py``
and review the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from slurmopt.errors import UsageError
from slurmopt.submit import build_submission, parse_command_line
from slurmopt.submit.options import tables
from slurmopt.tag import parse_comment

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "submit"
CASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "args.json").is_file())
UPDATE = os.environ.get("SLURMOPT_UPDATE_GOLDEN") == "1"


def _outcome(case: Path) -> dict[str, Any]:
    given = json.loads((case / "args.json").read_text())
    args, table = given["args"], tables()[given.get("release", "22.05")]
    try:
        parsed = parse_command_line(args, table)
        text: str | None = None
        if (case / "stdin.sh").is_file():
            text = (case / "stdin.sh").read_text()
        elif parsed.script is not None and (case / parsed.script).is_file():
            text = (case / parsed.script).read_text()
        sub = build_submission(args, text, parsed.script or "-", table=table)
    except UsageError as exc:
        return {"error": str(exc), "exit_code": exc.exit_code}
    request = dataclasses.asdict(sub.request)
    request["script_args"] = list(sub.request.script_args)
    request["tag"] = dataclasses.asdict(sub.request.tag)
    if request["tag"]["elastic"] is not None:
        request["tag"]["elastic"] = list(request["tag"]["elastic"])
    return {
        "sbatch_args": sub.args,
        "reads_stdin": sub.reads_stdin,
        "info_only": sub.info_only,
        "request": request,
    }


@pytest.mark.parametrize("name", CASES)
def test_golden(name: str) -> None:
    case = FIXTURES / name
    got = _outcome(case)
    golden = case / "expected.json"
    if UPDATE:
        golden.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
    assert golden.is_file(), f"no {golden}; run with SLURMOPT_UPDATE_GOLDEN=1 to create it"
    assert got == json.loads(golden.read_text())
    assert name.startswith("error_") == ("error" in got)


def test_every_case_has_a_golden_file() -> None:
    assert len(CASES) >= 20
    missing = [n for n in CASES if not (FIXTURES / n / "expected.json").is_file()]
    assert not missing


@pytest.mark.parametrize("name", [n for n in CASES if not n.startswith("error_")])
def test_comment_in_argv_parses_back_to_the_request(name: str) -> None:
    """The --comment handed to sbatch is the tag plus the user's comment, nothing lost."""
    got = _outcome(FIXTURES / name)
    comments = [a for a in got["sbatch_args"] if a.startswith("--comment=")]
    if got["info_only"]:
        assert comments == []
        return
    assert got["sbatch_args"][0] == comments[0]
    tag, user = parse_comment(comments[0].removeprefix("--comment="))
    assert tag is not None
    assert dataclasses.asdict(tag)["preemptible"] == got["request"]["tag"]["preemptible"]
    expected_user = got["request"]["comment"]
    if expected_user is not None:
        _, expected_user = parse_comment(expected_user)
    assert user == expected_user
