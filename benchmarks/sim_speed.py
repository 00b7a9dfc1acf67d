"""How fast the simulator replays the Philly trace with the slurmopt policy.

The first N jobs by submit time of ``philly-sia/philly.csv`` on a 1,024-GPU
two-level fat tree (128 nodes of 8 GPUs, 16 per leaf), comm penalty on.
Each N runs in a fresh Python process.  Reported per N: wall time, events
(arrivals + ends), scheduler passes, events per second.  By default the last
run is the whole trace (82,247 jobs; target: under 3 minutes), so the target
is checked by measurement; the growth exponent between the two smallest runs
is printed beside it.

    python -m benchmarks.sim_speed                  # table, then one JSON object
    python -m benchmarks.sim_speed --json           # the JSON object only
    python -m benchmarks.sim_speed --sizes 2000,5000 # no full-trace run
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from benchmarks.synthetic import child_json

TRACE = (
    Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly-sia" / "philly.csv"
)
FABRIC = "fat-tree:128:16"
FULL_TRACE_JOBS = 82_247
SIZES = (2000, 10_000, FULL_TRACE_JOBS)
TARGET_S = 180.0


def run_child(jobs: int, trace: str) -> dict[str, Any]:
    from slurmopt.sim import read_trace, simulate
    from slurmopt.sim.fabrics import parse_fabric_spec

    loaded = read_trace(trace, "philly-sia", limit_jobs=jobs)
    result = simulate(loaded, parse_fabric_spec(FABRIC), "slurmopt")
    m = result.metrics
    return {
        "jobs": jobs,
        "wall_s": m["wall_s"],
        "events": m["events"],
        "scheduler_passes": m["scheduler_passes"],
        "events_per_s": m["events_per_s"],
        "ms_per_pass": round(1000 * m["wall_s"] / max(m["scheduler_passes"], 1), 3),
        "avg_queue_delay_s": m["avg_queue_delay_s"],
    }


def _child(jobs: int, trace: str) -> dict[str, Any]:
    return child_json("sim_speed", "--child", str(jobs), "--trace", trace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child, args.trace)))
        return
    rows = [_child(int(n), args.trace) for n in args.sizes.split(",")]
    growth = None
    if len(rows) >= 2:
        a, b = rows[0], rows[1]
        growth = math.log(b["wall_s"] / a["wall_s"]) / math.log(b["jobs"] / a["jobs"])
    full = next((r for r in rows if r["jobs"] >= FULL_TRACE_JOBS), None)
    doc = {
        "trace": args.trace,
        "fabric": FABRIC,
        "policy": "slurmopt",
        "runs": rows,
        "wall_growth_exponent": None if growth is None else round(growth, 3),
        "full_trace_jobs": FULL_TRACE_JOBS,
        "full_trace_wall_s": None if full is None else full["wall_s"],
        "target_s": TARGET_S,
        "meets_target": None if full is None else full["wall_s"] < TARGET_S,
    }
    if not args.json:
        print(
            f"{'jobs':>7} {'wall s':>8} {'events':>8} {'passes':>8} {'events/s':>9} {'ms/pass':>8}"
        )
        for r in rows:
            print(
                f"{r['jobs']:>7} {r['wall_s']:>8.2f} {r['events']:>8} {r['scheduler_passes']:>8} "
                f"{r['events_per_s']:>9.0f} {r['ms_per_pass']:>8.2f}"
            )
        if growth is not None:
            print(f"wall time grows as jobs^{growth:.2f} between the first two runs")
        if full is not None:
            print(
                f"full trace ({FULL_TRACE_JOBS} jobs): {full['wall_s']:.0f} s "
                f"(target {TARGET_S:.0f} s)"
            )
        print()
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
