"""``slurmopt node-agent``: GPU health from NVML, and a capped drain through Slurm.

Runs on compute nodes (as a systemd service, or once per Slurm
``HealthCheckProgram`` call).  Without an NVIDIA driver it exits 69 with one
line naming NVML and the cause.  Thresholds and cap come from the config's
``health_*`` keys; the options override them.  See ``docs/health.md``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.cli.wiring import config_option, connect_for
from slurmopt.errors import UsageError

if TYPE_CHECKING:
    from slurmopt.health.agent import DrainClient

#: Agents started together (a rack booting) wait a random part of one interval, at most this.
MAX_FIRST_DELAY_S = 300.0


def _node_name(given: str | None) -> str:
    """``--node``, else Slurm's name for this node (set for HealthCheckProgram), else hostname."""
    if given:
        return given
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _gpu_rows(result: Any) -> list[list[str]]:
    rows: list[list[str]] = []
    verdicts = {g.index: g for g in result.verdict.gpus}
    for gpu in result.reading.gpus:
        verdict = verdicts.get(gpu.index)
        links = gpu.nvlinks
        ecc = gpu.ecc
        rows.append(
            [
                str(gpu.index),
                gpu.name or "?",
                "-" if gpu.temperature_c is None else str(gpu.temperature_c),
                "-" if ecc is None or ecc.volatile_uncorrected is None
                else str(ecc.volatile_uncorrected),
                "-" if gpu.xids is None else (",".join(map(str, gpu.xids)) or "none"),
                "-" if links is None else f"{sum(1 for lk in links if lk.active)}/{len(links)}",
                "-" if gpu.pcie is None or gpu.pcie.width is None
                else f"x{gpu.pcie.width}/x{gpu.pcie.max_width}",
                "lost" if gpu.lost else (verdict.severity.value if verdict else "?"),
                ", ".join(f.tag for f in verdict.findings) if verdict else "",
            ]
        )  # fmt: skip
    return rows


@click.command("node-agent")
@click.option("--once", is_flag=True, help="Check once and exit (as HealthCheckProgram does).")
@click.option(
    "--interval",
    type=float,
    default=None,
    help="Seconds between checks when running continuously [config health_interval_s: 60].",
)
@click.option("--dry-run", is_flag=True, help="Judge and report; never drain.")
@click.option("--node", default=None, help="Slurm node name [default: $SLURMD_NODENAME or host].")
@click.option("--json", "as_json", is_flag=True, help="Print readings, verdict and decision.")
@click.option(
    "--max-drain-share",
    type=float,
    default=None,
    help="Most of the cluster slurmopt may hold drained, 0-1 [config health_max_drain_share: 0.1].",
)
@click.option(
    "--max-drain-nodes",
    type=int,
    default=None,
    help="Most nodes slurmopt may hold drained [config health_max_drain_nodes: 4].",
)
@click.option(
    "--expected-gpus",
    type=int,
    default=None,
    help="Drain when NVML sees fewer GPUs than this [config health_expected_gpus: 0, no check].",
)
@click.option(
    "--xid-wait-ms",
    type=int,
    default=None,
    help="How long each check waits for Xid events [config health_xid_wait_ms: 100].",
)
@config_option
@click.option("--fake-nvml", type=click.Path(dir_okay=False), default=None, hidden=True)
@click.pass_context
def node_agent(
    ctx: click.Context,
    once: bool,
    interval: float | None,
    dry_run: bool,
    node: str | None,
    as_json: bool,
    max_drain_share: float | None,
    max_drain_nodes: int | None,
    expected_gpus: int | None,
    xid_wait_ms: int | None,
    config_path: str | None,
    fake_nvml: str | None,
) -> None:
    """Check this node's GPUs through NVML; drain the node in Slurm when they fail.

    \b
    healthy   nothing to do
    degraded  reported, node stays in service
    drain     scontrol update NodeName=... State=DRAIN Reason="slurmopt: ..."
              unless Slurm has it drained already, or slurmopt already holds
              the cap (--max-drain-nodes / --max-drain-share) of nodes drained.
    undone    several nodes drained at once beyond the cap: the newest
              resume their own node, so exactly the cap stays drained.
    Each drain decision is also written to stderr as one JSON line.
    Thresholds come from the config's health_* keys (docs/health.md).
    """
    from slurmopt.config import load_config
    from slurmopt.health.agent import DrainCap, NodeAgent, describe
    from slurmopt.health.nvml import FakeNvml, NvmlBackend, NvmlReader
    from slurmopt.health.rules import HealthThresholds

    # Options are checked here, so a bad one is a usage error (2), not a config error (78).
    if interval is not None and not interval > 0:
        raise UsageError(f"--interval must be a positive number of seconds, got {interval:g}")
    if xid_wait_ms is not None and xid_wait_ms < 0:
        raise UsageError(f"--xid-wait-ms must be 0 or more, got {xid_wait_ms}")
    if expected_gpus is not None and expected_gpus < 1:
        raise UsageError(f"--expected-gpus must be 1 or more, got {expected_gpus}")
    if max_drain_nodes is not None and max_drain_nodes < 0:
        raise UsageError(
            f"--max-drain-nodes: max drained nodes must be 0 or more, got {max_drain_nodes}"
        )
    if max_drain_share is not None and not 0.0 <= max_drain_share <= 1.0:
        raise UsageError(
            f"--max-drain-share: max drained share must be from 0 to 1, got {max_drain_share:g}"
        )
    config = load_config(
        config_path,
        overrides={
            "health_interval_s": interval,
            "health_xid_wait_ms": xid_wait_ms,
            "health_expected_gpus": expected_gpus,
            "health_max_drain_share": max_drain_share,
            "health_max_drain_nodes": max_drain_nodes,
        },
    )
    thresholds = HealthThresholds.from_config(config)
    cap = DrainCap(max_nodes=config.health_max_drain_nodes, max_share=config.health_max_drain_share)
    interval_s = config.health_interval_s

    backend: NvmlBackend | None = None
    if fake_nvml is not None:
        try:
            backend = FakeNvml.from_file(fake_nvml)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"--fake-nvml {fake_nvml}: {exc}") from None
    reader = NvmlReader(backend, xid_wait_ms=config.health_xid_wait_ms)
    agent = NodeAgent(
        _node_name(node),
        reader,
        lambda: cast("DrainClient", connect_for(ctx, config)),
        thresholds=thresholds,
        cap=cap,
        dry_run=dry_run,
    )
    with reader:
        if once:
            result = agent.run_pass()
            if as_json:
                emit_json(result.as_dict())
                return
            print_table(
                f"{agent.node}: driver {result.reading.driver_version or '?'}",
                ["gpu", "name", "temp", "dbe", "xid", "nvlink", "pcie", "verdict", "findings"],
                _gpu_rows(result),
            )
            for problem in result.reading.errors:
                click.echo(f"{agent.node}: NVML: {problem}")
            click.echo(describe(result.decision))
            return

        stop = threading.Event()

        def _stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)

        def _report(result: Any) -> None:
            if as_json:
                click.echo(json.dumps(result.as_dict(), default=str))
            else:
                click.echo(describe(result.decision))

        first_delay = random.uniform(0.0, min(interval_s, MAX_FIRST_DELAY_S))
        click.echo(f"{agent.node}: checking every {interval_s:g} s, first in {first_delay:.0f} s")
        agent.run(interval_s, stop, on_pass=_report, first_delay_s=first_delay)
