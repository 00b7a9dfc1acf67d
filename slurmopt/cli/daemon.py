"""``slurmopt daemon``, and the kill switch ``slurmopt disable`` / ``slurmopt enable``."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from slurmopt.cli.common import emit_json
from slurmopt.cli.wiring import config_option, connect_for, db_option, resolve
from slurmopt.config import Config
from slurmopt.errors import SlurmCommandError, SlurmoptError

if TYPE_CHECKING:
    from slurmopt.metrics import DaemonMetrics, MetricsServer
    from slurmopt.store import Store

#: Same as ``slurmopt.metrics.DEFAULT_METRICS_ADDRESS`` (not imported: it pulls in
#: prometheus_client and the planner for every command).
_METRICS_ADDRESS = "127.0.0.1"


def _connect(ctx: click.Context, config: Config) -> Any:
    """The Slurm client (a seam the tests replace with a fake)."""
    return connect_for(ctx, config)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s slurmopt[%(process)d] %(levelname)s %(message)s",
    )
    for chatty in ("alembic", "apscheduler"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


@click.command()
@config_option
@db_option
@click.option("--interval", type=float, default=None, help="Seconds between cycles.")
@click.option(
    "--enforce/--advisory",
    default=None,
    help="Act on plans (hold, pin, release), or only log and store them (default: config).",
)
@click.option("--once", is_flag=True, help="Run one cycle, then exit.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this TCP port; 0: none (default: config metrics_port).",
)
@click.option(
    "--metrics-address",
    default=_METRICS_ADDRESS,
    show_default=True,
    help="Address the metrics endpoint binds to (0.0.0.0 or :: for every interface).",
)
@click.pass_context
def daemon(
    ctx: click.Context,
    config_path: str | None,
    db: str | None,
    interval: float | None,
    enforce: bool | None,
    once: bool,
    metrics_port: int | None,
    metrics_address: str,
) -> None:
    """Plan every interval; with --enforce, pin and release the jobs slurmopt holds."""
    from slurmopt.daemon.loop import Daemon

    wiring = resolve(
        ctx,
        config_path,
        {"db": db, "interval_s": interval, "enforce": enforce, "metrics_port": metrics_port},
    )
    config = wiring.config
    _setup_logging(config.log_level)
    from slurmopt.daemon.proof import wrong_user
    from slurmopt.errors import ConfigError

    if (problem := wrong_user(config.daemon_user)) is not None:
        raise ConfigError(problem)  # before the store is opened, let alone created
    store = wiring.open_store(create=True)  # only the daemon creates the store
    try:
        runner = Daemon(config, _connect(ctx, config), store)
        runner.preflight()  # --enforce that cannot work exits 78 here, naming the fix
        if once:
            result = runner.run_once()
            click.echo(f"{result.mode}: {'; '.join(result.notes) or 'done'}")
        else:
            server = _serve_metrics(runner.metrics, config.metrics_port, metrics_address)
            try:
                runner.run_forever()
            finally:
                if server is not None:
                    server.close()
    finally:
        store.close()


def _serve_metrics(metrics: DaemonMetrics, port: int, address: str) -> MetricsServer | None:
    """Start the metrics endpoint; a port that cannot be bound is logged, not fatal.

    Metrics only observe: a clash on the port must not stop scheduling, and
    Prometheus already reports the missing endpoint (``up == 0``).
    """
    from slurmopt.metrics import serve

    if port == 0:
        return None
    try:
        return serve(metrics, port, address)
    except OSError as exc:
        logging.getLogger("slurmopt.metrics").error(
            "cannot serve metrics on %s:%d: %s; running without them", address, port, exc
        )
        return None


@dataclass
class _Released:
    released: list[int]
    failed: dict[int, str]


def _release_all(ctx: click.Context, config: Config, store: Store) -> _Released:
    """Release every hold slurmopt recorded as its own, from one fresh snapshot.

    An operator's hold, or the owner's, is never lifted: only jobs the store
    records ``waiting`` under slurmopt's hold (:func:`slurmopt.daemon.managed.ours`),
    and the plugin's marked hold on jobs no daemon registered yet.
    """
    from slurmopt.daemon.managed import awaits_admin_hold, ours
    from slurmopt.daemon.reconcile import live_records

    records = {r.job_id: r for r in live_records(store)}
    client = _connect(ctx, config)
    snapshot = client.snapshot()
    out = _Released([], {})
    for job in sorted(snapshot.jobs.values(), key=lambda j: j.job_id):
        # Also the plugin's own holds that no daemon took over (it was down or disabled).
        if not ours(job, records.get(job.job_id)) and not awaits_admin_hold(job):
            continue
        try:
            client.release(job.job_id)
        except SlurmCommandError as exc:
            out.failed[job.job_id] = str(exc)
            continue
        out.released.append(job.job_id)
    return out


@click.command()
@config_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_context
def disable(ctx: click.Context, config_path: str | None, db: str | None, as_json: bool) -> None:
    """Kill switch: stop enforcing everywhere and release every job slurmopt holds.

    Writes the heartbeat with enforce=0 (the job-submit plugin stops holding
    new jobs), records "disabled" in the store (running daemons turn
    advisory until `slurmopt enable`), then releases slurmopt's holds on
    managed jobs (admin holds and the plugin's marked holds).
    """
    from slurmopt.daemon.heartbeat import write_heartbeat
    from slurmopt.daemon.switch import operator, set_switch
    from slurmopt.store import StoreError

    wiring = resolve(ctx, config_path, {"db": db})
    config = wiring.config

    def stop_holding() -> str | None:
        try:
            write_heartbeat(
                config.heartbeat_path, False, managed_partitions=config.managed_partitions
            )
        except OSError as exc:
            return f"cannot write heartbeat {config.heartbeat_path}: {exc}"
        return None

    try:
        store = wiring.open_store()
    except StoreError:
        stop_holding()  # whatever else fails, the plugin stops holding new jobs
        raise
    try:
        set_switch(store, True, operator())  # first, so no daemon writes enforce=1 again
        heartbeat_error = stop_holding()
        outcome = _release_all(ctx, config, store)
    finally:
        store.close()
    if as_json:
        emit_json(
            {
                "disabled": True,
                "heartbeat": config.heartbeat_path,
                "heartbeat_error": heartbeat_error,
                "released": outcome.released,
                "failed": {str(k): v for k, v in outcome.failed.items()},
            }
        )
    else:
        click.echo(f"slurmopt disabled; heartbeat {config.heartbeat_path} says enforce=0")
        ids = " ".join(str(j) for j in outcome.released) or "none"
        click.echo(f"released {len(outcome.released)} held jobs: {ids}")
        for job_id, why in outcome.failed.items():
            click.echo(f"could not release job {job_id}: {why}")
    if heartbeat_error is not None:
        raise SlurmoptError(heartbeat_error)
    if outcome.failed:
        raise SlurmoptError(f"{len(outcome.failed)} held jobs could not be released")


@click.command()
@config_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_context
def enable(ctx: click.Context, config_path: str | None, db: str | None, as_json: bool) -> None:
    """Undo `slurmopt disable`: daemons started with --enforce enforce again."""
    from slurmopt.daemon.switch import operator, set_switch

    store = resolve(ctx, config_path, {"db": db}).open_store()
    try:
        set_switch(store, False, operator())
    finally:
        store.close()
    if as_json:
        emit_json({"disabled": False})
    else:
        click.echo("slurmopt enabled; enforcing daemons act again from their next cycle")


__all__ = ["daemon", "disable", "enable"]
