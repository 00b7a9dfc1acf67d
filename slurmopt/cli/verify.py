"""``slurmopt verify``: the acceptance test of a cluster, before paying for it or after changing it.

Options in, report out: :class:`slurmopt.verify_run.VerifyRunner` chooses
the nodes, submits the ``nccl-allreduce-bench`` job through the Slurm
client, waits for it (cancelling it on ``--timeout`` or Ctrl-C) and judges
its JSON document (:mod:`slurmopt.verify`); this module prints the bandwidth
per message size, the ring pairs and leaf groups, the flags, and each node's
GPU topology and power (:mod:`slurmopt.cli.verify_output`).  Exit 0 when
nothing is flagged, 1 when something is, so a script (or a purchase) can
stop on it.  See docs/verify.md.
"""

from __future__ import annotations

import dataclasses

import click

from slurmopt.cli.common import emit_json
from slurmopt.cli.verify_output import print_report, write_plot
from slurmopt.cli.wiring import config_option, fabric_option, resolve
from slurmopt.errors import UsageError
from slurmopt.verify import (
    DEFAULT_MIN_EFFICIENCY,
    DEFAULT_NODES,
    DEFAULT_OUTLIER,
    VerifyFailed,
)
from slurmopt.verify_run import (
    DEFAULT_TIMEOUT_S,
    VerifyRequest,
    VerifyRunner,
    check_workdir,
    expand_nodelist,
    parse_size,
)


@click.command()
@click.option(
    "--nodes",
    "-N",
    "node_count",
    type=int,
    default=DEFAULT_NODES,
    show_default=True,
    help="Nodes to test, chosen idle and spread over leaf switches.",
)
@click.option("--partition", "-p", default=None, help="Partition to test and submit to.")
@click.option(
    "--nodelist", "-w", default=None, metavar="HOSTLIST", help="Test exactly these nodes."
)
@click.option(
    "--nproc-per-node", type=int, default=1, show_default=True, help="Processes (GPUs) per node."
)
@click.option(
    "--min-bytes",
    default="1K",
    metavar="SIZE",
    show_default=True,
    help="Smallest message (K, M, G).",
)
@click.option(
    "--max-bytes", default="256M", metavar="SIZE", show_default=True, help="Largest message."
)
@click.option("--iters", type=int, default=5, show_default=True, help="Timed all-reduces per size.")
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for the job, pending and running; then it is cancelled.",
)
@fabric_option
@config_option
@click.option(
    "--min-efficiency",
    type=float,
    default=DEFAULT_MIN_EFFICIENCY,
    show_default=True,
    help="Flag bus bandwidth below this share of the expected one.",
)
@click.option(
    "--outlier",
    type=float,
    default=DEFAULT_OUTLIER,
    show_default=True,
    help="Flag a pair or leaf below this times the median of the others.",
)
@click.option(
    "--expect-busbw",
    type=float,
    default=None,
    metavar="GBps",
    help="Expected bus bandwidth in GB/s (default: slowest fabric link / 8).",
)
@click.option("--plot", default=None, metavar="FILE.png", help="Write bandwidth vs size here.")
@click.option(
    "--workdir",
    default=None,
    metavar="DIR",
    help="Where the job runs and writes its files; the nodes must see it [default: cwd].",
)
@click.option(
    "--rdzv-port", type=int, default=None, metavar="PORT", help="torchrun rendezvous port [29400]."
)
@click.option(
    "--sbatch-arg",
    "sbatch_args",
    multiple=True,
    metavar="ARG",
    help="One more sbatch argument, e.g. --sbatch-arg=--time=20 (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema v1).")
@click.pass_context
def verify(
    ctx: click.Context,
    node_count: int,
    partition: str | None,
    nodelist: str | None,
    nproc_per_node: int,
    min_bytes: str,
    max_bytes: str,
    iters: int,
    timeout: float,
    fabric_file: str | None,
    config_path: str | None,
    min_efficiency: float,
    outlier: float,
    expect_busbw: float | None,
    plot: str | None,
    workdir: str | None,
    rdzv_port: int | None,
    sbatch_args: tuple[str, ...],
    as_json: bool,
) -> None:
    """Acceptance test: all-reduce bandwidth across nodes, GPU topology and power.

    \b
    Runs the nccl-allreduce-bench template (NCCL on GPUs, gloo on CPU) on
    N idle nodes, then ring-neighbour node pairs and each leaf switch's
    nodes alone, and compares the bus bandwidth with what the fabric's
    links predict.  Exit 0: nothing flagged; 1: something is (see the
    FLAG lines); 2: bad option; 65: bad fabric or report; 69: Slurm or
    the job failed; 75: the job did not finish within --timeout.
    """
    from slurmopt.hostlist import fold

    request = VerifyRequest(
        node_count=node_count,
        partition=partition,
        nproc_per_node=nproc_per_node,
        min_bytes=parse_size(min_bytes, "--min-bytes"),
        max_bytes=parse_size(max_bytes, "--max-bytes"),
        iters=iters,
        timeout_s=timeout,
        min_efficiency=min_efficiency,
        outlier=outlier,
        expect_busbw=expect_busbw,
        rdzv_port=rdzv_port,
        sbatch_args=sbatch_args,
    )
    request.check()
    if plot is not None:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise UsageError("--plot needs matplotlib: pip install matplotlib")
    request = dataclasses.replace(request, workdir=check_workdir(workdir))
    if nodelist is not None:
        given = ctx.get_parameter_source("node_count") is click.core.ParameterSource.COMMANDLINE
        names = expand_nodelist(nodelist, node_count, given)
        request = dataclasses.replace(request, nodelist=names)

    wiring = resolve(ctx, config_path, {"fabric": fabric_file})
    runner = VerifyRunner(
        wiring.client(), wiring.fabric, warn=lambda text: click.echo(text, err=True, nl=False)
    )
    report = runner.run(request)
    if plot is not None:
        write_plot(report, plot)
    if as_json:
        emit_json(report.as_dict())
    else:
        print_report(report)
    if not report.passed:
        raise VerifyFailed(
            f"verify: {len(report.flags)} flag(s) on {fold(report.nodes)}: "
            + report.flags[0].message
        )
