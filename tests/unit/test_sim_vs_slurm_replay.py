"""The simulated Slurm baseline against real Slurm runs, replayed without a cluster.

``tests/fixtures/sim_vs_slurm/`` keeps real runs of the sandbox's Slurm 22.05 as
``tests/integration/test_sim_vs_slurm.py`` saved them (``SLURMOPT_SIM_VS_SLURM_SAVE``):
the test's own seed 2023 and two batches of five seeds on the default 32-node sandbox
(``default``, ``earlier``, ``new``), the 7919 mix and seed 7 on the three-tier sandbox,
two runs per seed where there are two.
Each seed must reach the validation's target, at least 90% of jobs agreeing or the noise
floor (run 2 against run 1), so a change to the model that loses what it was validated on
fails here, not only on the next run against the sandbox.  ``earlier/seed-202``'s backfill
rhythm is estimated from the run's own backfill-only starts (its log was not kept).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from slurmopt.sim.fabrics import parse_fabric_spec
from tests.integration.test_sim_vs_slurm import AGREEMENT, JOBS, compare, load_run, replay

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "sim_vs_slurm"
FABRIC = {
    "default": ROOT / "sandbox-topology.conf",
    "earlier": ROOT / "sandbox-topology.conf",
    "new": ROOT / "sandbox-topology.conf",
    "mix": ROOT / "sandbox-topology.conf",
    "clos3": ROOT.parent / "fabric" / "clos3-sandbox.conf",
}


def _seeds() -> list[tuple[str, int, list[Path]]]:
    found: dict[tuple[str, int], list[Path]] = defaultdict(list)
    for batch in FABRIC:
        for path in sorted((ROOT / batch).glob("seed-*-run-*.json")):
            found[batch, int(path.stem.split("-")[1])].append(path)
    return [(batch, seed, runs) for (batch, seed), runs in sorted(found.items())]


SEEDS = _seeds()


def test_every_batch_is_kept() -> None:
    assert {batch for batch, _, _ in SEEDS} == set(FABRIC)
    assert len(SEEDS) == 13


@pytest.mark.parametrize(("batch", "seed", "runs"), SEEDS, ids=[f"{b}-{s}" for b, s, _ in SEEDS])
def test_the_model_agrees_with_real_slurm_or_its_noise_floor(
    batch: str, seed: int, runs: list[Path]
) -> None:
    fabric = parse_fabric_spec(str(FABRIC[batch]))
    differences = [line for path in runs for line in replay(path, fabric)]
    agreed = 1 - len(differences) / (JOBS * len(runs))
    target = AGREEMENT
    if len(runs) > 1:
        first = load_run(runs[0])
        noise = sum(len(compare(first, load_run(p), "run 1")) for p in runs[1:])
        target = min(AGREEMENT, 1 - noise / (JOBS * (len(runs) - 1)))
    assert agreed >= target - 1e-9, "\n".join(differences)
