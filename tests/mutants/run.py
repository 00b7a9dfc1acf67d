"""Run the daemon's unit tests against each hand-written mutant; fail if any survives.

Each ``*.patch`` here breaks one rule the daemon must keep (see ``MUTANTS``).
For each, the repository's ``slurmopt/`` and ``tests/`` (as they are in the
working tree) are copied to a temporary directory, the patch is applied
there, and the tests that guard that rule run against the copy.  A mutant is
*killed* when a test fails; it *survives* when they all pass.  A patch that no
longer applies, or a copy that fails without any patch, is an error too.

    python tests/mutants/run.py [NAME ...]

Prints one line per mutant and exits 1 if any survived or could not be run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
COPIED = ("slurmopt", "tests", "pyproject.toml", "etc", "sbatch_templates")
UNIT = "tests/unit/"


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str
    tests: tuple[str, ...]


DAEMON_TESTS = (
    UNIT + "test_daemon_rules.py",
    UNIT + "test_daemon.py",
    UNIT + "test_fencing.py",
    UNIT + "test_reconcile.py",
    UNIT + "test_actuator.py",
)
RULES = UNIT + "test_daemon_rules.py"
PREEMPT_TESTS = (RULES, UNIT + "test_preemption_daemon.py")

MUTANTS = (
    Mutant("a-no-lease-check", "Store.guard checks no lease before a Slurm write", DAEMON_TESTS),
    Mutant(
        "b-preempt-while-in-flight", "starts a preemption while one is in flight", PREEMPT_TESTS
    ),
    Mutant("c-requeue-any-run", "requeues whichever run acknowledged", PREEMPT_TESTS),
    Mutant(
        "d-ours-any-incarnation",
        "lifts a hold on a newer job with a recorded id",
        (*DAEMON_TESTS, UNIT + "test_status_cli.py"),
    ),
    Mutant("e-stale-snapshot", "acts on a stale snapshot", DAEMON_TESTS),
    Mutant("f-rehold-unchecked", "holds again after a pin time-out unchecked", DAEMON_TESTS),
    Mutant(
        "g-requeue-before-signal", "takes a requeue before the signal for its own", PREEMPT_TESTS
    ),
)


def _copy(dest: Path) -> None:
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(
                src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "mutants")
            )
        elif src.exists():
            shutil.copy2(src, dest / name)


def _pytest(root: Path, tests: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        # SQLite is enough to judge a mutant; the PostgreSQL variants need scripts/pg-sandbox.
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not postgres"]
        + list(tests),
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def run_one(mutant: Mutant, pristine: Path) -> tuple[str, float, str]:
    """(verdict, seconds, detail): killed, SURVIVED or ERROR."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        root = Path(tmp)
        shutil.copytree(pristine, root, dirs_exist_ok=True)
        patch = HERE / f"{mutant.name}.patch"
        applied = subprocess.run(
            ["git", "apply", str(patch)], cwd=root, capture_output=True, text=True
        )
        if applied.returncode != 0:
            return "ERROR", time.monotonic() - started, "patch does not apply"
        proc = _pytest(root, mutant.tests)
    took = time.monotonic() - started
    if proc.returncode == 1:
        failed = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED")]
        return "killed", took, (failed[0].removeprefix("FAILED ") if failed else "a test failed")
    if proc.returncode == 0:
        return "SURVIVED", took, "every test passed"
    return "ERROR", took, f"pytest exit {proc.returncode}: {proc.stdout[-300:]}"


def main(argv: list[str]) -> int:
    chosen = [m for m in MUTANTS if not argv or m.name in argv]
    unknown = set(argv) - {m.name for m in MUTANTS}
    if unknown:
        print(f"unknown mutants: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        pristine = Path(tmp)
        _copy(pristine)
        tests = sorted({t for m in chosen for t in m.tests})
        clean = _pytest(pristine, tuple(tests))
        if clean.returncode != 0:
            print("the tests fail without any mutant:\n" + clean.stdout[-2000:], file=sys.stderr)
            return 1
        rows = [(m, *run_one(m, pristine)) for m in chosen]
    width = max(len(m.name) for m in chosen)
    print(f"{'mutant':<{width}}  {'verdict':<8}  {'secs':>5}  killed by / why")
    for mutant, verdict, took, detail in rows:
        print(f"{mutant.name:<{width}}  {verdict:<8}  {took:5.0f}  {detail}")
    bad = [m.name for m, verdict, _, _ in rows if verdict != "killed"]
    print(f"{len(rows) - len(bad)} of {len(rows)} killed in {time.monotonic() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
