"""``slurm-backfill-tree`` makes the same decisions it made before it was made fast.

The fixture ``tests/fixtures/baseline-decisions.json`` holds every job's start
and nodes as the straightforward model (a full scan of the backfill map at
every ``TRY_LATER`` step, no memo) gave them, on queues long enough that most
pending jobs get no hold: a Philly and an ITP window, seeded synthetic
workloads on a three-tier Clos, and one with a wall-clock origin, an agent
phase, a coarse ``bf_resolution``, a short ``bf_window`` and a small
``bf_max_job_test``.  Write it again (only when a decision is meant to change)
with ``PYTHONPATH=$PWD python tests/unit/test_sim_baseline_regression.py --write``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from slurmopt.sim import CommModel, read_trace, scale_load, simulate
from slurmopt.sim.fabrics import parse_fabric_spec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DECISIONS = FIXTURES / "baseline-decisions.json"

#: name -> (trace, format, fabric, load, simulate() keywords)
CASES: dict[str, tuple[str, str, str, float, dict[str, Any]]] = {
    "philly": ("traces/baseline-philly.csv", "philly-sia", "fat-tree:16:4", 6.0, {}),
    "itp": ("traces/baseline-itp.csv", "itp", "fat-tree:16:4", 1.2, {}),
    "clos": ("jobs=400,seed=11,duration_s=14400", "synthetic", "clos:4:4:4:2", 5.0, {}),
    "clos-every-event": (
        "jobs=200,seed=3",
        "synthetic",
        "clos:4:4:4:2",
        4.0,
        {"bf_interval_s": 0, "bf_window_s": 3600.0},
    ),
    "phase-and-window": (
        "jobs=300,seed=5,duration_s=1800",
        "synthetic",
        "fat-tree:32:8",
        3.0,
        {
            "clock_origin_s": 1_700_000_017.0,
            "bf_phase_s": 11.0,
            "bf_resolution_s": 300.0,
            "bf_window_s": 6 * 3600.0,
            "bf_max_job_test": 50,
        },
    ),
}


def decisions(name: str) -> dict[str, list[Any]]:
    """Each job's start and nodes under ``slurm-backfill-tree`` in case ``name``."""
    trace_arg, fmt, spec, load, keywords = CASES[name]
    source = trace_arg if fmt == "synthetic" else str(FIXTURES / trace_arg)
    fabric = parse_fabric_spec(spec)
    trace, _ = scale_load(read_trace(source, fmt), 8 * len(fabric.compute_nodes), load)
    result = simulate(trace, fabric, "slurm-backfill-tree", CommModel(), **keywords)
    return {str(o.job.job_id): [o.start, list(o.nodes or ())] for o in result.outcomes}


@pytest.mark.parametrize("name", sorted(CASES))
def test_backfill_baseline_keeps_its_decisions(name: str) -> None:
    expected = json.loads(DECISIONS.read_text())[name]
    got = decisions(name)
    assert len(got) == len(expected)
    changed = [job for job in expected if got[job] != expected[job]]
    assert not changed, f"{len(changed)} jobs moved, first {changed[0]}: {got[changed[0]]}"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    DECISIONS.write_text(json.dumps({name: decisions(name) for name in sorted(CASES)}) + "\n")
