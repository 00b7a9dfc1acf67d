"""Placement over every tier of a real three-tier fabric (leaf, pod spine, core).

These run on a sandbox started with ``scripts/slurm-sandbox up --topology
tests/fixtures/fabric/clos3-sandbox.conf`` (2 pods x 3 leaves x 5 nodes ``cn01``-``cn30``;
``scripts/test`` starts one beside the default sandbox with ``--port-base``), with
``SLURMOPT_SANDBOX_DIR`` naming it; they are marked ``clos3`` so runs against the default
sandbox leave them out.

* The 10-node case: with two whole leaves free in different pods and three leaves of one pod
  free, the daemon puts a 10-node gang in the one pod (4 hops), not on two leaves over the
  core (6 hops).
* The simulator's ``topology/tree`` model (:class:`TreePlacement`, which the
  ``slurm-backfill-tree`` baseline places with) against real Slurm: for seeded random
  occupancies, the nodes real Slurm gives plain ``sbatch`` gangs are the nodes the model
  picks from the same free nodes; from Slurm 24.05.3 on with its ``closer_first`` rule, which
  the trixie and sid sandboxes run.
"""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest

from slurmopt.daemon.heartbeat import write_heartbeat
from slurmopt.fabric import Fabric
from slurmopt.hostlist import fold
from slurmopt.sim.slurm_baseline import TreePlacement
from tests.integration.test_daemon import CtldLog, DaemonRun, _busy, _running, _started_record
from tests.sandbox import SlurmSandbox, fixture_fabric

pytestmark = [pytest.mark.slurm, pytest.mark.clos3]

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "fabric" / "clos3-sandbox.conf"
SCRIPT = REPO / "scripts" / "slurm-sandbox"
POD1 = {"leaf1", "leaf2", "leaf3"}
#: Seeds of the random occupancies the model is checked on, and the gang sizes tried on each.
SEEDS = (1, 2, 3, 4, 5, 6)
SIZES = (2, 3, 4, 5, 7)


@pytest.fixture
def fabric(slurm: SlurmSandbox) -> Fabric:
    """The sandbox's own topology.conf, which must be the three-tier fixture's."""
    return fixture_fabric(slurm, FIXTURE, "--port-base 7117")


def _leaves(fabric: Fabric, nodes: list[str]) -> set[str]:
    return {leaf for n in nodes if (leaf := fabric.leaf_of(n)) is not None}


def test_ten_node_gang_stays_in_one_pod(
    slurm: SlurmSandbox, fabric: Fabric, tmp_path: Path
) -> None:
    # Free: leaf1 5, leaf2 3, leaf3 2 (pod1: 10) and leaf4 5 (pod2).  leaf1 + leaf4 would be
    # the fewest leaves, over the core; leaf1-3 stay under pod1's spine.
    busy = _busy(slurm, "cn[09-10,13-15,21-30]", 15, "-t", "10")
    slurm.wait_state(busy, "RUNNING")
    daemon = DaemonRun(slurm, tmp_path)
    ctld = CtldLog(slurm)
    daemon.start()
    try:
        daemon.wait_enforcing()
        gang = daemon.submit("-N", "10", "--gres=gpu:8", "-t", "5")
        nodes = _running(slurm, gang)
        record = _started_record(daemon, gang)
    finally:
        daemon.stop()
        write_heartbeat(daemon.heartbeat, False)
    assert _leaves(fabric, nodes) == POD1, nodes
    assert fabric.span(nodes).max_hops == 4
    # slurmopt chose them (pinned, then released), not Slurm on its own.
    assert record.nodes == fold(nodes)
    assert ctld.pins(gang) == 1


def _occupy(slurm: SlurmSandbox, rng: random.Random, names: list[str]) -> list[str]:
    """Whole nodes taken by one plain job, leaving 14-22 free; returns the free ones in order."""
    busy = sorted(rng.sample(names, len(names) - rng.randint(14, 22)), key=names.index)
    job = _busy(slurm, fold(busy), len(busy), "-t", "10")
    slurm.wait_state(job, "RUNNING")
    return [n for n in names if n not in busy]


def _closer_first(version: str) -> bool:
    """Whether Slurm ``version`` prefers a closer leaf over a tighter one (24.05.3 and later)."""
    if not version:
        pytest.fail("the sandbox's env.sh names no Slurm release; start it again with `up`")
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3]) >= (24, 5, 3)


def test_tree_placement_picks_the_nodes_real_slurm_picks(
    slurm: SlurmSandbox, fabric: Fabric
) -> None:
    names = slurm.node_names()
    closer = _closer_first(slurm.slurm_version)
    model = TreePlacement(fabric, {n: i for i, n in enumerate(names)}, closer_first=closer)
    trials: list[str] = []
    differ: list[str] = []
    for seed in SEEDS:
        rng = random.Random(seed)
        free = _occupy(slurm, rng, names)
        for k in SIZES:
            if k > len(free):
                continue
            want = model.place(free, k)
            job = slurm.sbatch("-N", str(k), "--gres=gpu:8", "-t", "10")
            got = _running(slurm, job)
            trial = (
                f"seed {seed} k={k} free={fold(free)}: Slurm {fold(got)}, model {fold(want or [])}"
            )
            trials.append(trial)
            if sorted(got) != sorted(want or []):
                differ.append(trial)
            free = [n for n in free if n not in got]
        slurm.reset()
    agree = len(trials) - len(differ)
    rule = "closer_first" if closer else "22.05 rule"
    print(
        f"TreePlacement ({rule}) agrees with Slurm {slurm.slurm_version}"
        f" on {agree} of {len(trials)} gangs"
    )
    assert len(trials) >= 24
    assert not differ, "\n".join(differ)


def test_topology_file_is_checked_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "two-leaves.conf"
    bad.write_text(
        "SwitchName=a Nodes=x[1-2]\nSwitchName=b Nodes=x[2-3]\nSwitchName=s Switches=a,b\n"
    )
    proc = subprocess.run(
        ["bash", str(SCRIPT), "up", "--topology", str(bad), "--dir", str(tmp_path / "sb")],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "x2 is under two switches" in lines[0], proc.stderr
    assert not (tmp_path / "sb" / "run").exists()
    clash = subprocess.run(
        ["bash", str(SCRIPT), "up", "--topology", str(FIXTURE), "--nodes", "4"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert clash.returncode == 2 and "--topology replaces --nodes" in clash.stderr
    assert len(clash.stderr.strip().splitlines()) == 1
