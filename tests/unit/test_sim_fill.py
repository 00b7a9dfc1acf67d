"""Arrival-fill mode: shares on one device, the allocation curve, each policy's node choice."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmopt.cli import cli, main
from slurmopt.fabric import leaf_spine
from slurmopt.sim.fill import (
    MILLI,
    FillCluster,
    NodeSpec,
    Pod,
    arrivals,
    fill,
    published_allocation,
    read_node_list,
    read_pods,
)

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
BIG_AND_SMALL = [NodeSpec(8, 32000, 131072), NodeSpec(2, 16000, 65536)]


def _one_gpu_pods(count: int) -> list[Pod]:
    return [Pod(i, 1, 1) for i in range(1, count + 1)]


def test_openb_pods_keep_shares_cpu_and_memory() -> None:
    pods, notes = read_pods(TRACES / "openb-fill.csv", "openb")
    assert [(p.gpus_per_node, p.gpu_milli, p.cpu_milli) for p in pods] == [
        (1, 1000, 4000),
        (1, 500, 2000),
        (1, 500, 2000),
        (4, 1000, 8000),
        (0, 0, 1000),
    ]
    assert [p.milli_gpus for p in pods] == [1000, 500, 500, 4000, 0]
    assert "2 pods ask for a share of one GPU" in notes[0]
    assert [s.gpus for s in read_node_list(TRACES / "openb-nodes.csv")] == [8, 2]


def test_two_half_gpu_shares_take_one_device() -> None:
    cluster = FillCluster.build(leaf_spine(1, 1), [NodeSpec(2)])
    half = Pod(1, 1, 1, 500)
    for _ in range(2):
        cluster.place(half, [0])
    assert sorted(cluster.nodes[0].devices) == [0, MILLI]
    assert cluster.allocated_milli == MILLI
    assert not cluster.nodes[0].fits(Pod(2, 1, 2))  # the shared device is not whole
    assert cluster.nodes[0].fits(Pod(3, 1, 1))


def test_cpu_and_memory_limit_a_node_too() -> None:
    cluster = FillCluster.build(leaf_spine(1, 1), [NodeSpec(8, cpu_milli=4000, memory_mib=100)])
    assert not cluster.nodes[0].fits(Pod(1, 1, 1, cpu_milli=5000))
    assert not cluster.nodes[0].fits(Pod(1, 1, 1, memory_mib=200))
    assert cluster.nodes[0].fits(Pod(1, 1, 1, cpu_milli=4000, memory_mib=100))


def test_curve_follows_arrivals_until_full_then_flattens() -> None:
    # 4 GPUs; 1-GPU pods arrive until 130% is asked for: 6 pods, the last two turned away.
    specs = [NodeSpec(2), NodeSpec(2)]
    result = fill(_one_gpu_pods(4), leaf_spine(2, 2), specs, "slurm-fifo", seed=1)
    curve = dict(result.curve)
    assert list(curve) == list(range(0, 131))
    # Each step shows the allocation once the arrivals first ask for that much.
    assert curve[25] == 25.0 and curve[75] == 75.0 and curve[76] == 100.0
    assert curve[130] == 100.0 and result.allocation_at_max == 100.0
    assert (result.arrived_pods, result.placed_pods, result.rejected_gpu_pods) == (6, 4, 2)


def test_arrivals_are_seeded_and_redraw_until_the_goal() -> None:
    pods = _one_gpu_pods(10)
    first = arrivals(pods, 10, 1.3, seed=7)
    assert [p.pod_id for p in first] == [p.pod_id for p in arrivals(pods, 10, 1.3, seed=7)]
    assert [p.pod_id for p in first] != [p.pod_id for p in arrivals(pods, 10, 1.3, seed=8)]
    assert len(first) == 13 and len({p.pod_id for p in first}) == 13
    assert sorted(p.pod_id for p in first[:10]) == list(range(1, 11))


@pytest.mark.parametrize(
    ("policy", "node"),
    [("slurm-fifo", 0), ("slurm-backfill-tree", 0), ("best-fit", 1), ("slurmopt", 1)],
)
def test_one_gpu_pod_goes_where_each_policy_puts_it(policy: str, node: int) -> None:
    # An 8-GPU node and a 2-GPU node: first fit takes the first; best fit and the planner's FGD
    # choice keep the 8-GPU node whole for the 4- and 8-GPU pods of the distribution.
    pods = [Pod(1, 1, 1), Pod(2, 1, 4), Pod(3, 1, 8)]
    result = fill(pods[:1], leaf_spine(2, 2), BIG_AND_SMALL, policy, max_arrived=0.05)
    assert result.placed_pods == 1
    cluster = FillCluster.build(leaf_spine(2, 2), BIG_AND_SMALL)
    from slurmopt.sim import fill as fill_module

    choosers: dict[str, Callable[[FillCluster, Pod], list[int] | None]] = {
        "slurm-fifo": fill_module._first_fit,
        "slurm-backfill-tree": fill_module._Tree(),
        "best-fit": fill_module._best_fit,
        "slurmopt": fill_module._Planner(fill_module.gpu_pod_shapes(pods)),
    }
    assert choosers[policy](cluster, pods[0]) == [node]


def test_slurmopt_puts_a_share_on_a_partly_used_device_first() -> None:
    from slurmopt.sim import fill as fill_module

    cluster = FillCluster.build(leaf_spine(2, 2), BIG_AND_SMALL)
    cluster.place(Pod(1, 1, 1, 700), [0])
    planner = fill_module._Planner(fill_module.gpu_pod_shapes([Pod(9, 1, 8)]))
    assert planner(cluster, Pod(2, 1, 1, 300)) == [0]  # fills the 700-milli device
    assert planner(cluster, Pod(3, 1, 1, 400)) == [1]  # no room there: a whole GPU, planned


def test_published_allocation_is_the_mean_over_seeds() -> None:
    path = TRACES / "fgd-results.csv"
    assert published_allocation(path, "openb_pod_list_default", "BestFit", 2) == pytest.approx(1.95)
    assert published_allocation(path, "openb_pod_list_default", "FGD", 1) == 1.0


def test_cli_fill_json_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "fill.png"
    result = CliRunner().invoke(
        cli,
        [
            "simulate", "--mode", "fill", "--trace", str(TRACES / "openb-fill.csv"),
            "--trace-format", "openb", "--node-list", str(TRACES / "openb-nodes.csv"),
            "--policy", "best-fit", "--policy", "slurmopt", "--seed", "1", "--seed", "2",
            "--json", "--no-series", "--plot", str(png),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["mode"] == "fill" and doc["fabric"]["gpus"] == 10
    assert doc["fabric"]["spec"] == "fat-tree:2:32"
    assert set(doc["policies"]) == {"best-fit", "slurmopt"}
    for entry in doc["policies"].values():
        assert [r["seed"] for r in entry["runs"]] == [1, 2]
        assert 0 < entry["mean_gpu_allocation_pct"] <= 100
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_fill_node_list_and_fabric_must_agree(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(
            ["simulate", "--mode", "fill", "--trace", str(TRACES / "openb-fill.csv"),
             "--trace-format", "openb", "--node-list", str(TRACES / "openb-nodes.csv"),
             "--fabric", "fat-tree:4:2"],
        )  # fmt: skip
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has 4 nodes" in err
