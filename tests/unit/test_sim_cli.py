"""``slurmopt simulate``: the JSON document, the tables, --load, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def _queue_delays(*flags: str, tmp_path: Path) -> dict[str, Any]:
    """The echoed daemon settings and mean queueing delay of two lone jobs (submits 0 s and
    3 s) under slurmopt."""
    trace = tmp_path / "two.csv"
    trace.write_text("submit_s,duration_s,gpus,time_limit_s\n0,10,2,60\n3,10,2,60\n")
    code, out = _simulate(
        "--trace", str(trace), "--trace-format", "csv", "--fabric", "fat-tree:2:2",
        "--policy", "slurmopt", "--penalty", "off", "--json", "--no-series", *flags,
    )  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    metrics = doc["policies"]["slurmopt"]
    return {"daemon": doc["daemon"], "avg_queue_delay_s": metrics["avg_queue_delay_s"]}


def test_daemon_interval_and_pin_latency_start_jobs_at_the_next_cycle_plus_latency(
    tmp_path: Path,
) -> None:
    off = _queue_delays(tmp_path=tmp_path)
    assert off["avg_queue_delay_s"] == 0.0
    assert off["daemon"] == {"interval_s": 0.0, "pin_latency_s": 0.0}
    on = _queue_delays("--daemon-interval", "2", "--pin-latency", "1.5", tmp_path=tmp_path)
    # Submit 0 is a cycle: start 1.5 (waits 1.5); submit 3: the cycle at 4, start 5.5 (2.5).
    assert on["avg_queue_delay_s"] == pytest.approx((1.5 + 2.5) / 2)
    assert on["daemon"] == {"interval_s": 2.0, "pin_latency_s": 1.5}
    latency_only = _queue_delays("--pin-latency", "1.5", tmp_path=tmp_path)
    assert latency_only["avg_queue_delay_s"] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--daemon-interval", "-2"), ("--pin-latency", "-0.5"), ("--pin-latency", "nan"),
     ("--daemon-interval", "inf"), ("--pin-latency", "soon")],
)  # fmt: skip
def test_bad_daemon_interval_or_pin_latency_is_one_line_and_exit_2(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(TRACES / "load.csv"), "--trace-format", "csv",
              "--policy", "slurmopt", flag, value])  # fmt: skip
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err
