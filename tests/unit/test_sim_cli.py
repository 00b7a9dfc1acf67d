"""``slurmopt simulate``: the JSON document, the tables, --load, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmopt.cli import cli, main

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
KEYS = {
    "avg_jct_s",
    "p95_queue_delay_s",
    "avg_slowdown",
    "gpu_allocation_ratio",
    "avg_stranded_gpus",
    "avg_wait_multinode_s",
    "avg_leaves_spanned_multinode",
}


def _simulate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["simulate", *args])
    return result.exit_code, result.output


def test_json_echoes_the_setup_and_maps_each_policy_to_its_metrics() -> None:
    code, out = _simulate(
        "--trace", str(TRACES / "backfill.csv"), "--trace-format", "csv",
        "--fabric", "fat-tree:4:4", "--policy", "slurmopt", "--policy", "slurm-fifo",
        "--penalty", "off", "--json", "--no-series",
    )  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    assert doc["fabric"]["gpus"] == 32 and doc["fabric"]["spec"] == "fat-tree:4:4"
    assert doc["trace"]["jobs"] == 3 and doc["penalty"]["penalty"] == "off"
    assert set(doc["policies"]) == {"slurmopt", "slurm-fifo"}
    for metrics in doc["policies"].values():
        assert KEYS <= set(metrics)
        assert "over_time" not in metrics
    # Backfill lets job 3 start at 2 under slurmopt; FIFO keeps it to 100.
    assert doc["policies"]["slurmopt"]["avg_queue_delay_s"] == 33.0
    assert doc["policies"]["slurm-fifo"]["avg_queue_delay_s"] == 65.67


def test_load_option_scales_arrivals_and_is_echoed() -> None:
    code, out = _simulate(
        "--trace", str(TRACES / "load.csv"), "--trace-format", "csv",
        "--fabric", "fat-tree:1:1", "--policy", "slurm-fifo", "--load", "0.75", "--json",
    )  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    assert doc["load"] == {
        "requested": 0.75,
        "native": 1.5,
        "offered": 0.75,
        "arrival_scale": 2.0,
    }
    # Arrivals 0, 200, 400 on one node, 100 s each: nobody waits.
    assert doc["policies"]["slurm-fifo"]["avg_queue_delay_s"] == 0.0
    assert doc["policies"]["slurm-fifo"]["makespan_s"] == pytest.approx(500.0)


def test_table_per_policy_names_the_gang_rule() -> None:
    code, out = _simulate(
        "--trace", str(TRACES / "philly.csv"), "--trace-format", "philly-sia",
        "--fabric", "fat-tree:8:4",
    )  # fmt: skip
    assert code == 0, out
    assert "became gangs of whole 8-GPU nodes" in out
    for policy in ("slurmopt", "slurm-fifo", "slurm-backfill-tree"):
        assert policy in out
    assert "avg leaves spanned, multi-node" in out
    assert "of those, a waiting job could use" in out  # where stranded GPUs sit


def test_bad_trace_is_one_line_and_exit_65(capsys: object) -> None:
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(TRACES / "bad.csv"), "--trace-format", "csv"])
    assert exc.value.code == 65
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert err.count("\n") == 1 and "bad.csv:3: duration_s is not a number" in err


def test_bad_fabric_is_a_usage_error(capsys: object) -> None:
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(TRACES / "load.csv"), "--trace-format", "csv",
              "--fabric", "fat-tree:x:4"])  # fmt: skip
    assert exc.value.code == 2
    assert "bad fabric 'fat-tree:x:4'" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_plot_writes_a_png_of_each_policy(tmp_path: Path) -> None:
    png = tmp_path / "run.png"
    code, out = _simulate(
        "--trace", str(TRACES / "philly.csv"), "--trace-format", "philly-sia",
        "--fabric", "fat-tree:8:4", "--policy", "slurmopt", "--policy", "slurm-fifo",
        "--json", "--plot", str(png),
    )  # fmt: skip
    assert code == 0, out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_best_fit_runs_in_fill_mode_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(TRACES / "load.csv"), "--trace-format", "csv",
              "--policy", "best-fit"])  # fmt: skip
    assert exc.value.code == 2
    assert "best-fit runs in --mode fill only" in capsys.readouterr().err
