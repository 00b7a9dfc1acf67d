"""The all-reduce benchmark's own logic: options, groups, node names, the NVML probe.

Everything here runs without torch; one test runs the benchmark under torchrun.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurmopt.elastic.bench import (
    Group,
    NodeProbe,
    bandwidth,
    group_ranks,
    node_name,
    parse_args,
    parse_group,
    sizes,
)
from slurmopt.health.nvml import FakeNvml
from tests.unit.test_health_nvml import fixture


def test_sizes_double_up_to_the_maximum() -> None:
    assert sizes(1024, 8192) == [1024, 2048, 4096, 8192]
    assert sizes(1000, 5000) == [1000, 2000, 4000]


def test_bus_bandwidth_is_algorithm_bandwidth_times_2_n_minus_1_over_n() -> None:
    row = bandwidth(1_000_000_000, 0.5, 4)
    assert row["algbw_gbps"] == pytest.approx(2.0)
    assert row["busbw_gbps"] == pytest.approx(2.0 * 2 * 3 / 4)
    assert row["time_us"] == pytest.approx(500_000)


def test_groups_take_hostlists() -> None:
    assert parse_group("leaf:leaf1=gpu[001-003]") == Group(
        "leaf:leaf1", ("gpu001", "gpu002", "gpu003")
    )
    assert parse_group("pair:a+b=a,b").nodes == ("a", "b")
    for bad in ("nodes", "=a,b", "x=", "x=gpu[1-"):
        with pytest.raises(ValueError, match="--group"):
            parse_group(bad)


def test_options(capsys: pytest.CaptureFixture[str]) -> None:
    args, groups = parse_args(["--max-bytes", "65536", "--group", "p=a,b", "--group", "q=c,d"])
    assert args.group_bytes == 65536
    assert [g.name for g in groups] == ["p", "q"]
    args, _ = parse_args(["--min-bytes", "1000", "--max-bytes", "5000", "--group-bytes", "64"])
    assert args.group_bytes == 64
    args, _ = parse_args(["--min-bytes", "1000", "--max-bytes", "5000"])
    assert args.group_bytes == 4000  # the largest size the sweep reaches
    for argv, words in (
        (["--group", "p=a,b", "--group", "p=c,d"], "--group p is given twice"),
        (["--group", "p"], "--group needs NAME=HOSTLIST"),
        (["--max-bytes", str(512 << 20)], "--max-bytes is at most"),
        (["--min-bytes", "2"], "--min-bytes must be at least 4"),
        (["--iters", "0"], "--iters must be at least 1"),
    ):
        with pytest.raises(SystemExit) as info:
            parse_args(argv)
        assert info.value.code == 2
        assert words in capsys.readouterr().err


def test_node_name_prefers_slurms_names_over_the_host_name() -> None:
    assert node_name({"SLURMD_NODENAME": "gpu007", "SLURM_NODEID": "0"}) == "gpu007"
    env = {"SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "gpu[001-002,009]"}
    assert node_name(env) == "gpu009"
    host = socket.gethostname().split(".")[0]
    assert node_name({"SLURM_NODEID": "5", "SLURM_JOB_NODELIST": "gpu[001-002]"}) == host
    assert node_name({}) == host


def test_group_ranks_from_the_rank_to_node_map() -> None:
    ranks = ["a", "a", "b", "b", "c", "c"]  # two processes per node
    assert group_ranks(ranks, Group("p", ("a", "c"))) == ([0, 1, 4, 5], "")
    assert group_ranks(ranks, Group("p", ("a", "z", "y"))) == ([], "not in this job: z, y")
    assert group_ranks(["a", "b"], Group("p", ("a",))) == ([0], "fewer than 2 ranks")


def test_probe_reports_topology_and_power_under_load() -> None:
    description = copy.deepcopy(fixture("h100_healthy"))
    description["gpu_count"] = 2
    description["defaults"]["nvlink"]["remote_default"] = "switch"
    nvml = FakeNvml(description)
    probe = NodeProbe(nvml, interval_s=3600)
    assert probe.report["nvml"] == "ok"
    probe.start_power()
    nvml.gpus[0]["power_usage_mw"] = 512000
    report = probe.finish()
    assert report["driver_version"] == "550.90.07"
    assert report["topology"]["matrix"] == [["X", "NV18"], ["NV18", "X"]]
    power = report["power"]
    assert [p["index"] for p in power] == [0, 1]
    assert power[0]["peak_w"] == pytest.approx(512.0)
    assert power[1]["peak_w"] == pytest.approx(71.234)
    assert power[0]["limit_w"] == pytest.approx(700.0)
    assert "errors" not in report
    assert nvml.shutdowns == 1
    json.dumps(report)


def test_probe_without_nvml_says_why_and_never_raises() -> None:
    probe = NodeProbe(FakeNvml({"init_error": "LIBRARY_NOT_FOUND", "gpu_count": 0}))
    probe.start_power()
    report = probe.finish()
    assert report == {
        "nvml": "unavailable: nvmlInit failed: NVML Shared Library Not Found "
        "(no libnvidia-ml.so.1: is the NVIDIA driver installed?)"
    }


def test_probe_records_a_failing_query_and_carries_on() -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetTopologyCommonAncestor(self, handle1: Any, handle2: Any) -> int:
            raise RuntimeError("driver hiccup")

    description = copy.deepcopy(fixture("h100_healthy"))
    description["gpu_count"] = 2
    probe = NodeProbe(Broken(description), interval_s=3600)
    probe.start_power()
    report = probe.finish()
    assert report["topology"] is None
    assert report["errors"] == ["topology: RuntimeError: driver hiccup"]
    assert len(report["power"]) == 2


@pytest.mark.torch
def test_benchmark_under_torchrun_writes_groups_and_node_map(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env["SLURMD_NODENAME"] = "gpu042"
    argv = [torchrun, "--standalone", "--nproc-per-node=3", "-m", "slurmopt.elastic.bench"]
    argv += ["--min-bytes", "1024", "--max-bytes", "16384", "--iters", "2", "--out", str(out)]
    argv += ["--group", "all=gpu042", "--group", "gone=gpu042,gpu099", "--no-nvml"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc == json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["schema_version"] == 1 and doc["world_size"] == 3
    assert doc["ranks"] == ["gpu042"] * 3 and doc["nproc_per_node"] == 3
    assert [r["bytes"] for r in doc["results"]] == [1024, 2048, 4096, 8192, 16384]
    ran, gone = doc["groups"]
    assert (ran["name"], ran["ranks"], ran["bytes"]) == ("all", [0, 1, 2], 16384)
    assert ran["busbw_gbps"] == pytest.approx(ran["algbw_gbps"] * 4 / 3)
    assert gone == {
        "name": "gone",
        "nodes": ["gpu042", "gpu099"],
        "ranks": [],
        "error": "not in this job: gpu099",
    }
    assert doc["node_gpus"] == {}


@pytest.mark.parametrize(
    ("gpus", "local_ranks", "backend"),
    [
        (0, 1, "gloo"),
        (0, 2, "gloo"),
        (1, 1, "nccl"),
        (1, 2, "gloo"),  # two ranks on one GPU: NCCL would stop with "Duplicate GPU"
        (8, 2, "nccl"),
        (8, 8, "nccl"),
        (8, 9, "gloo"),
        *[
            (gpus, ranks, "nccl" if 0 < ranks <= gpus else "gloo")
            for gpus in (0, 1, 8)
            for ranks in (1, 2, 8)
        ],
    ],
)
def test_backend_is_nccl_only_with_a_gpu_per_rank(
    gpus: int, local_ranks: int, backend: str
) -> None:
    from slurmopt.elastic.bench import choose_backend

    chosen, why = choose_backend(gpus, local_ranks)
    assert chosen == backend and why
