"""End to end on the sandbox: ``slurmopt verify`` runs the benchmark on 4 emulated nodes.

gloo on CPU; every emulated node is this host, so the rendezvous is
127.0.0.1 and the bandwidth is loopback bandwidth.  The test checks the
mechanics: the nodes chosen and reported, the sweep up to 256 MiB, the
ring pairs and leaf groups, NVML reported unavailable per node, the PNG,
and an exit code that matches the flags.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_daemon import CLI
from tests.sandbox import SlurmSandbox, free_port

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

pytest.importorskip("torch")

MAX_BYTES = 256 << 20


def test_verify_on_four_emulated_nodes(slurm: SlurmSandbox, tmp_path: Path) -> None:
    plot = tmp_path / "bandwidth.png"
    env = {**slurm.env, "SLURMOPT_RDZV_HOST": "127.0.0.1"}
    proc = subprocess.run(
        [
            *CLI,
            "verify",
            "--nodes",
            "4",
            "--json",
            "--plot",
            str(plot),
            "--workdir",
            str(tmp_path),
            "--rdzv-port",
            str(free_port()),
            "--timeout",
            "240",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1
    # Four distinct emulated nodes, two under each of two leaf switches.
    nodes = doc["nodes"]
    assert len(set(nodes)) == 4 == doc["world_size"]
    assert set(slurm.node_names()) >= set(nodes)
    assert doc["backend"] == "gloo"
    # The sweep doubles from 1 KiB up to the maximum, with busbw = algbw * 2(n-1)/n.
    results = doc["results"]
    assert [r["bytes"] for r in results] == [1024 << i for i in range(19)]
    assert results[-1]["bytes"] == MAX_BYTES
    for row in results:
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * 3 / 4)
        assert row["algbw_GBps"] > 0
    # Ring-neighbour pairs and the two leaves, each measured at the largest size.
    groups = {g["name"]: g for g in doc["groups"]}
    pairs = [g for g in doc["groups"] if g["kind"] == "pair"]
    leaves = [g for g in doc["groups"] if g["kind"] == "leaf"]
    assert len(pairs) == 4 and len(leaves) == 2
    assert sorted(len(g["nodes"]) for g in leaves) == [2, 2]
    assert len({g["switches"][0] for g in leaves}) == 2
    assert {n for p in pairs for n in p["nodes"]} == set(nodes)
    for group in groups.values():
        assert "error" not in group, group
        assert group["bytes"] == MAX_BYTES and group["ranks"] == len(group["nodes"])
        assert group["busbw_GBps"] == pytest.approx(group["algbw_GBps"] * 2 * 1 / 2)
    assert doc["expected"]["busbw_GBps"] == pytest.approx(200 / 8)  # topology.conf: 200 Gb/s
    # No NVIDIA driver on the sandbox: each node says so, and the run goes on.
    assert set(doc["node_gpus"]) == set(nodes)
    for report in doc["node_gpus"].values():
        assert report["nvml"].startswith("unavailable: ")
    # The report's files, and the plot.
    assert Path(doc["job"]["document"]).is_file()
    assert Path(doc["job"]["output"]).is_file()
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # An acceptance test fails loudly: exit 1 exactly when something is flagged.
    assert doc["passed"] is (doc["flags"] == [])
    assert proc.returncode == (0 if doc["passed"] else 1)
    if not doc["passed"]:
        assert proc.stderr.strip().splitlines()[-1].startswith("slurmopt: verify: ")
    # Loopback is far below 200 Gb/s links: the whole run is flagged for efficiency.
    assert {"kind": "run", "subject": "all", "rule": "efficiency"}.items() <= next(
        f for f in doc["flags"] if f["kind"] == "run"
    ).items()
