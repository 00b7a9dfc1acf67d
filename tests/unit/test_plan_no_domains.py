"""Plans on fabrics without NVLink domains are the plans made before domains were placed.

The golden file holds the plans of seeded random clusters on 2- and 3-level
fabrics, made by the planner before domains were units of placement; run
this module as a script to write it again after a deliberate change.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from slurmopt.fabric.generators import fat_tree, leaf_spine
from slurmopt.model import Job, Node
from slurmopt.policy.plan import PlanRequest, Policy, plan
from tests.unit.test_plan_helpers import gpu_node, pending, running, snapshot

GOLDEN = Path(__file__).parent.parent / "fixtures" / "plans" / "no_domains.json"
CASES = 40


def _case(seed: int) -> dict[str, Any]:
    """One random cluster, queue and policy, and the plan made for it, as plain JSON."""
    rng = random.Random(seed)
    if seed % 2:
        fabric = leaf_spine(rng.choice([16, 24, 32]), rng.choice([4, 8]))
    else:
        fabric = fat_tree(32, 4, rng.choice([2, 4]))
    nodes: list[Node] = []
    jobs: list[Job] = []
    for i, name in enumerate(sorted(fabric.compute_nodes)):
        used = rng.choice([0, 0, 0, 2, 4, 8])
        nodes.append(gpu_node(name, alloc=used))
        if used:
            jobs.append(running(10_000 + i, [name], gpus=used, ends_in=rng.randint(60, 7200)))
    for job_id in range(1, 15):
        width = rng.choice([1, 1, 1, 2, 3, 4, 6, 8])
        jobs.append(pending(job_id, nodes=width, gpus=8 if width > 1 else rng.choice([1, 2, 4, 8])))
    policy = Policy(
        require_single_leaf=rng.random() < 0.5,
        align_ends=rng.random() < 0.5,
        backfill_depth=rng.choice([0, 2, 10]),
    )
    result = plan(PlanRequest(snapshot(nodes, jobs), fabric, policy))
    return {"seed": seed, "plan": result.to_json()}


def test_plans_without_domains_match_the_golden_file() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert len(golden) == CASES
    for expected in golden:
        assert _case(expected["seed"]) == expected


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps([_case(seed) for seed in range(CASES)], indent=1) + "\n")
    sys.exit(0)
