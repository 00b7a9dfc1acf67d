"""``slurmopt fragmentation --history``: stored samples over time, read from the store alone.

The store is filled with real fragmentation reports of hand-built
snapshots, through ``Store.record_fragmentation`` as the daemon fills it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import slurmopt.fabric.discover
import slurmopt.slurm
from slurmopt.cli import cli
from slurmopt.cli.fragmentation import parse_time_bound
from slurmopt.errors import UsageError
from slurmopt.fabric import Fabric
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.policy.fragmentation import FragmentationReport, fragmentation_report
from slurmopt.store import Store, StoreError

NAMES = ("gpu001", "gpu002", "gpu003", "gpu004")
FABRIC = Fabric.from_leaf_map({"leaf1": NAMES[:2], "leaf2": NAMES[2:]})
PARTITIONS = [Partition("gpu", NAMES[:3]), Partition("all", NAMES)]


def node(name: str, alloc: int) -> Node:
    state = NodeState.MIXED if 0 < alloc < 8 else NodeState.ALLOCATED if alloc else NodeState.IDLE
    return Node(name, state, gpus_total=8, gpus_alloc=alloc, cpus=64, alloc_cpus=alloc * 8)


def report(at: float, allocs: tuple[int, ...], partition: str | None = None) -> FragmentationReport:
    """A real report of a snapshot at ``at`` with ``allocs[i]`` GPUs used on node i."""
    nodes = [node(n, a) for n, a in zip(NAMES, allocs, strict=True)]
    queue = [Job(50, JobState.PENDING, partition="gpu", node_count=1, gpus_per_node=8)]
    snapshot = ClusterSnapshot.build(at, nodes, queue, PARTITIONS)
    return fragmentation_report(snapshot, FABRIC, partition=partition)


#: Whole-cluster samples 3 h, 2 h, 40 min and 10 min before the test, more fragmented each time.
SAMPLES: list[FragmentationReport] = []


@pytest.fixture(autouse=True)
def _no_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """History never reads Slurm: any attempt fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("fragmentation --history asked Slurm")

    monkeypatch.setattr(slurmopt.slurm, "connect", refuse)
    monkeypatch.setattr(slurmopt.fabric.discover, "load_fabric", refuse)
    for var in ("SLURMOPT_DB", "SLURMOPT_CONFIG"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def db_url(tmp_path: Path) -> Iterator[str]:
    """A store with :data:`SAMPLES` (made now, as times are relative) and one ``gpu`` sample."""
    now = float(int(time.time()))  # whole seconds: ISO round trips are exact
    SAMPLES[:] = [
        report(now - 3 * 3600, (0, 0, 0, 0)),
        report(now - 2 * 3600, (8, 0, 0, 0)),
        report(now - 40 * 60, (8, 3, 0, 0)),
        report(now - 10 * 60, (8, 3, 5, 0)),
    ]
    url = f"sqlite:///{tmp_path / 'slurmopt.db'}"
    store = Store.open(url)
    for sample in [*SAMPLES, report(now - 10 * 60, (8, 3, 5, 0), partition="gpu")]:
        store.record_fragmentation(sample)
    store.close()
    yield url


def invoke(*argv: str) -> Result:
    return CliRunner().invoke(cli, ["fragmentation", "--history", *argv])


def samples_of(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1
    samples: list[dict[str, Any]] = doc["samples"]
    return samples


def test_json_gives_every_stored_figure_oldest_first(db_url: str) -> None:
    samples = samples_of(invoke("--db", db_url, "--since", "1d", "--json"))

    assert [s["at"] for s in samples] == [r.taken_at for r in SAMPLES]
    for got, made in zip(samples, SAMPLES, strict=True):
        assert got == {
            "at": made.taken_at,
            "partition": None,
            "total_gpus": made.total_gpus,
            "allocated_gpus": made.allocated_gpus,
            "unavailable_gpus": made.unavailable_gpus,
            "free_gpus": made.free_gpus,
            "stranded_gpus": made.stranded_gpus,
            "fragmentation_index": made.fragmentation_index,
            "largest_job_nodes": made.largest_job_nodes,
            "largest_single_leaf_job_nodes": made.largest_single_leaf_job_nodes,
            "fgd_unusable_share": made.fgd_unusable_share,
        }
    last = samples[-1]
    assert (last["free_gpus"], last["stranded_gpus"], last["largest_job_nodes"]) == (16, 8, 1)


def test_since_defaults_to_one_hour_and_takes_durations(db_url: str) -> None:
    assert [s["at"] for s in samples_of(invoke("--db", db_url, "--json"))] == [
        SAMPLES[2].taken_at,
        SAMPLES[3].taken_at,
    ]
    assert len(samples_of(invoke("--db", db_url, "--since", "2h30m", "--json"))) == 3
    assert len(samples_of(invoke("--db", db_url, "--since", "15m", "--json"))) == 1


def test_since_and_until_take_iso_times_and_until_is_exclusive(db_url: str) -> None:
    def iso(at: float) -> str:
        return datetime.fromtimestamp(at, UTC).isoformat()

    window = ("--since", iso(SAMPLES[1].taken_at), "--until", iso(SAMPLES[3].taken_at))
    got = samples_of(invoke("--db", db_url, *window, "--json"))
    assert [s["at"] for s in got] == [SAMPLES[1].taken_at, SAMPLES[2].taken_at]

    epoch = samples_of(
        invoke(
            "--db", db_url, "--since", f"@{SAMPLES[0].taken_at - 1:.0f}", "--until", "1h", "--json"
        )
    )
    assert [s["at"] for s in epoch] == [SAMPLES[0].taken_at, SAMPLES[1].taken_at]


def test_partition_selects_that_partitions_samples(db_url: str) -> None:
    got = samples_of(invoke("--db", db_url, "--partition", "gpu", "--json"))
    assert [(s["partition"], s["total_gpus"]) for s in got] == [("gpu", 24)]
    assert samples_of(invoke("--db", db_url, "-p", "none-such", "--json")) == []


def test_the_table_has_one_row_per_sample(db_url: str) -> None:
    result = invoke("--db", db_url, "--since", "1d")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("GPU fragmentation history (all partitions), ")
    assert lines[0].endswith("to now: 4 sample(s)")
    assert lines[1].split("  ")[0] == "time"
    assert "fragmentation index" in lines[1] and "FGD share" in lines[1]
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == 4
    assert rows[-1][1:] == ["16", "8", "0.500", "1", f"{SAMPLES[3].fgd_unusable_share:.1%}"]
    assert rows[0][1:4] == ["32", "0", "0.000"]


def test_an_empty_history_is_one_line_and_success(db_url: str, tmp_path: Path) -> None:
    result = invoke("--db", db_url, "--since", "5m")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 1
    assert result.stdout.startswith("no fragmentation samples for all partitions from ")

    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    Store.open(empty).close()
    assert invoke("--db", empty, "--json").exit_code == 0


def test_the_store_comes_from_the_config_file(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "slurmopt.toml"
    config.write_text(f'db = "{db_url}"\n')
    assert len(samples_of(invoke("--config", str(config), "--since", "1d", "--json"))) == 4


def test_bad_options_are_one_line_usage_errors(db_url: str, tmp_path: Path) -> None:
    def error_of(*argv: str) -> BaseException | None:
        return CliRunner().invoke(cli, ["fragmentation", *argv]).exception

    for argv in (
        ("--history", "--since", "yesterday"),
        ("--history", "--since", "10m", "--until", "1h"),
        ("--history", "--fabric", "f.yaml"),
        ("--history", "--job-sizes", "queue"),
        ("--since", "1h"),
        ("--db", db_url),
    ):
        assert isinstance(error_of(*argv), UsageError), argv
    missing = f"sqlite:///{tmp_path / 'absent.db'}"
    assert isinstance(error_of("--history", "--db", missing), StoreError)
    assert not (tmp_path / "absent.db").exists()


def test_time_bounds() -> None:
    now = 1_700_000_000.0
    assert parse_time_bound("1h30m", now, "--since") == now - 5400
    assert parse_time_bound("2d", now, "--since") == now - 172_800
    assert parse_time_bound("1.5w", now, "--since") == now - 1.5 * 604_800
    assert parse_time_bound("now", now, "--until") == now
    assert parse_time_bound("@1600000000", now, "--since") == 1_600_000_000
    assert parse_time_bound("2023-11-14T22:13:20Z", now, "--since") == 1_700_000_000
    assert parse_time_bound("2023-11-14T23:13:20+01:00", now, "--since") == 1_700_000_000
    local = datetime(2024, 3, 1, 12, 0)  # no offset: local time
    assert parse_time_bound("2024-03-01T12:00", now, "--since") == local.timestamp()
    assert (
        parse_time_bound("2024-03-01", now, "--since") == (local - timedelta(hours=12)).timestamp()
    )
    for bad in ("", "1x", "90", "@soon", "h", "2024-13-01"):
        with pytest.raises(UsageError, match="^--since: cannot read"):
            parse_time_bound(bad, now, "--since")
