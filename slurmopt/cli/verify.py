"""``slurmopt verify``: the acceptance test of a cluster, before paying for it or after changing it.

Submits the ``nccl-allreduce-bench`` template over N nodes with
``sbatch --parsable --wait``, reads the JSON document the benchmark wrote,
judges it against the fabric (:mod:`slurmopt.verify`) and prints the
bandwidth per message size, the ring pairs and leaf groups, the flags, and
each node's GPU topology and power.  Exit 0 when nothing is flagged, 1 when
something is, so a script (or a purchase) can stop on it.  See docs/verify.md.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from slurmopt.cli.common import emit_json, print_table
from slurmopt.cli.submit import SBATCH_ENV
from slurmopt.cli.wiring import config_option, fabric_option, resolve
from slurmopt.errors import SlurmError, SlurmUnavailable, UsageError
from slurmopt.verify import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MIN_EFFICIENCY,
    DEFAULT_NODES,
    DEFAULT_OUTLIER,
    BenchDocumentError,
    BenchJobFailed,
    Measurement,
    VerifyFailed,
    VerifyReport,
    VerifyTimeout,
    check_thresholds,
)

#: The template the job is rendered from.
TEMPLATE = "nccl-allreduce-bench"
#: Default wait for the job (pending and running), in seconds.
DEFAULT_TIMEOUT_S = 900
#: Files the job leaves in the work directory: ``<prefix>-<token>.json`` and ``...-<job>.out``.
FILE_PREFIX = "slurmopt-verify"

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str, option: str) -> int:
    """Bytes from ``1024``, ``64K``, ``256MiB``, ``1G`` (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        raise UsageError(f"{option}: cannot read {text!r}: give bytes, or a number with K, M or G")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def human_bytes(size: int) -> str:
    """``268435456`` -> ``256 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _check_options(
    nodes: int,
    nproc: int,
    min_bytes: int,
    max_bytes: int,
    iters: int,
    timeout: float,
    min_efficiency: float,
    outlier: float,
    expect_busbw: float | None,
    rdzv_port: int | None,
) -> None:
    if nodes < 2:
        raise UsageError(f"--nodes must be at least 2, got {nodes}")
    if nproc < 1:
        raise UsageError(f"--nproc-per-node must be at least 1, got {nproc}")
    if not 4 <= min_bytes <= max_bytes:
        raise UsageError(f"--min-bytes must be 4 to --max-bytes ({max_bytes}), got {min_bytes}")
    if max_bytes > DEFAULT_MAX_BYTES:
        raise UsageError(f"--max-bytes is at most {human_bytes(DEFAULT_MAX_BYTES)}")
    if iters < 1:
        raise UsageError(f"--iters must be at least 1, got {iters}")
    if not timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout:g}")
    check_thresholds(min_efficiency, outlier, expect_busbw)
    if rdzv_port is not None and not 1 <= rdzv_port <= 65535:
        raise UsageError(f"--rdzv-port must be 1 to 65535, got {rdzv_port}")


def _workdir(given: str | None) -> Path:
    path = Path(given or os.getcwd()).resolve()
    if not path.is_dir():
        raise UsageError(f"--workdir {path}: not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--workdir {path}: not writable")
    return path


def _job_id(stdout: str) -> str | None:
    """The job id ``sbatch --parsable`` printed (``123`` or ``123;cluster``), if any."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    job = first.split(";")[0].strip()
    return job if job.isdigit() else None


def _cancel(job_id: str | None, name: str, env: Mapping[str, str]) -> None:
    """Cancel the job this command submitted (by id, else by its unique name); best effort."""
    argv = ["scancel", job_id] if job_id else ["scancel", f"--name={name}"]
    try:
        subprocess.run(argv, env=dict(env), capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass


def run_job(
    argv: Sequence[str], script: str, env: Mapping[str, str], timeout: float, name: str
) -> tuple[str, int]:
    """Submit ``script`` with ``argv`` (``sbatch --parsable --wait ...``) and wait for the job.

    Returns the job id and sbatch's exit status (the job's).  sbatch's stderr
    passes through verbatim.  A job still unfinished after ``timeout`` seconds
    (or on Ctrl-C) is cancelled.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env),
        )
    except FileNotFoundError:
        raise SlurmUnavailable(f"{argv[0]} not found; is Slurm installed?") from None
    except PermissionError as exc:
        raise SlurmUnavailable(f"cannot run {argv[0]}: {exc.strerror}") from None
    try:
        out, err = proc.communicate(script, timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
        proc.kill()
        out, err = proc.communicate()
        job_id = _job_id(out)
        _cancel(job_id, name, env)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise VerifyTimeout(
            f"benchmark job {job_id or name} did not finish within {timeout:g} s "
            "(pending or running); it was cancelled"
        ) from None
    if err:
        click.echo(err, err=True, nl=False)
    job_id = _job_id(out)
    if job_id is None:
        if proc.returncode != 0:
            raise SlurmError(f"{argv[0]} did not submit the benchmark job (exit {proc.returncode})")
        raise SlurmError(f"{argv[0]} printed no job id: {out.strip()[:200]!r}")
    return job_id, proc.returncode


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _read_document(path: Path, output: Path, job_id: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        last = _last_line(output)
        raise BenchDocumentError(
            f"benchmark job {job_id} wrote no report to {path}; its output is {output}"
            + (f" (last line: {last})" if last else "")
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchDocumentError(f"cannot read {path}: {exc}") from None


def _gpus_per_node(snapshot: Any, nodes: Sequence[str], nproc: int) -> bool:
    """True when every chosen node has at least ``nproc`` GPUs in Slurm (then ask for them)."""
    return all(snapshot.nodes[n].gpus_total >= nproc for n in nodes)


# ---------------------------------------------------------------------- output


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _group_row(group: Measurement, flagged: set[str]) -> list[str]:
    from slurmopt.hostlist import fold

    size = "-" if group.result is None else human_bytes(group.result.bytes)
    return [
        group.name,
        fold(group.nodes),
        str(group.ranks),
        size,
        _gb(group.busbw_GBps),
        _gb(group.expected.busbw_GBps),
        _pct(group.efficiency),
        "FLAGGED" if group.name in flagged else ("not run" if group.error else "ok"),
    ]


def _gpu_lines(node: str, info: Mapping[str, Any]) -> list[str]:
    state = str(info.get("nvml", "?"))
    if state != "ok":
        return [f"{node}: NVML {state}"]
    lines = [f"{node}: driver {info.get('driver_version') or '?'}"]
    topology = info.get("topology")
    if isinstance(topology, Mapping) and topology.get("gpus"):
        from slurmopt.health.nvml import GpuTopology

        matrix = GpuTopology(
            tuple(topology["gpus"]), tuple(tuple(r) for r in topology.get("matrix", ()))
        )
        lines += ["  " + row for row in matrix.lines()]
    for draw in info.get("power") or ():
        peak, mean, limit = draw.get("peak_w"), draw.get("mean_w"), draw.get("limit_w")
        text = (
            f"  GPU{draw.get('index')}: power under load peak "
            f"{'-' if peak is None else f'{peak:.0f}'} W, mean "
            f"{'-' if mean is None else f'{mean:.0f}'} W, limit "
            f"{'-' if limit is None else f'{limit:.0f}'} W"
        )
        if peak is not None and limit:
            text += f" (peak {peak / limit:.0%} of limit)"
        if draw.get("unavailable"):
            text += f"; {draw['unavailable']}"
        lines.append(text)
    lines += [f"  error: {e}" for e in info.get("errors") or ()]
    return lines


def print_report(report: VerifyReport) -> None:
    """The report for people: tables, expectation, flags, GPUs, verdict."""
    from slurmopt.hostlist import fold

    job = report.job
    click.echo(
        f"slurmopt verify: {len(report.nodes)} nodes ({fold(report.nodes)}) x "
        f"{report.nproc_per_node} process(es), {report.backend}, job {job.get('id', '?')}"
    )
    print_table(
        f"all-reduce over {report.world_size} ranks",
        ["size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"],
        [
            [human_bytes(r.bytes), f"{r.time_us:.1f}", _gb(r.algbw_GBps), _gb(r.busbw_GBps)]
            for r in report.results
        ],
        right_align=lambda col: col != "size",
    )
    flagged = {f.subject for f in report.flags} | {
        f"leaf:{f.subject}" for f in report.flags if f.kind == "switch"
    }
    columns = ["group", "nodes", "ranks", "size", "busbw", "expected", "efficiency", "result"]
    rows = [_group_row(g, flagged) for g in (report.run, *report.groups)]
    numeric = ("ranks", "busbw", "expected", "efficiency")
    print_table(
        "groups (bus bandwidth in GB/s at the largest size)",
        columns,
        rows,
        right_align=lambda col: col in numeric,
    )
    expected = report.run.expected
    click.echo("")
    click.echo(
        f"expected bus bandwidth: {_gb(expected.busbw_GBps)} GB/s ({expected.source}); "
        f"fabric: {report.fabric_source or 'unnamed'}"
    )
    click.echo(
        f"measured: {_gb(report.run.busbw_GBps)} GB/s at "
        f"{human_bytes(report.run.result.bytes) if report.run.result else '?'}, efficiency "
        f"{_pct(report.run.efficiency)} (minimum {report.min_efficiency:.0%}; outlier below "
        f"{report.outlier:g} x median)"
    )
    click.echo("")
    click.echo("GPUs per node:")
    for node in report.nodes:
        info = report.node_gpus.get(node)
        for line in _gpu_lines(node, info) if info is not None else [f"{node}: no report"]:
            click.echo("  " + line)
    click.echo("")
    for flag in report.flags:
        click.echo(f"FLAG {flag.message}")
    if job.get("output"):
        click.echo(f"job output: {job['output']}; benchmark document: {job.get('document')}")
    click.echo("PASS: nothing flagged" if report.passed else f"FAIL: {len(report.flags)} flag(s)")


def write_plot(report: VerifyReport, path: str) -> None:
    """A PNG of algorithm and bus bandwidth against message size, with the expected line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from slurmopt.hostlist import fold

    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    sizes = [r.bytes for r in report.results]
    ax.plot(sizes, [r.algbw_GBps for r in report.results], marker="o", label="algbw")
    ax.plot(sizes, [r.busbw_GBps for r in report.results], marker="s", label="busbw")
    expected = report.run.expected.busbw_GBps
    if expected:
        ax.axhline(
            expected, color="gray", linestyle="--", label=f"expected busbw {expected:.3g} GB/s"
        )
        if report.min_efficiency:
            floor = expected * report.min_efficiency
            ax.axhline(floor, color="red", linestyle=":", label=f"minimum {floor:.3g} GB/s")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda x, _pos: human_bytes(int(x)).replace(" ", ""))
    )
    ax.set_xlabel("message size")
    ax.set_ylabel("GB/s")
    verdict = "pass" if report.passed else f"{len(report.flags)} flag(s)"
    ax.set_title(
        f"all-reduce, {fold(report.nodes)}: {report.world_size} ranks, {report.backend} ({verdict})"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as exc:
        raise UsageError(f"--plot {path}: {exc.strerror or exc}") from None


# ---------------------------------------------------------------------- the command


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
    from slurmopt.hostlist import HostlistError, expand, fold
    from slurmopt.templates import TemplateValues, render
    from slurmopt.verify import (
        choose_nodes,
        evaluate,
        parse_document,
        plan_groups,
        ring_order,
    )

    low, high = parse_size(min_bytes, "--min-bytes"), parse_size(max_bytes, "--max-bytes")
    _check_options(
        node_count,
        nproc_per_node,
        low,
        high,
        iters,
        timeout,
        min_efficiency,
        outlier,
        expect_busbw,
        rdzv_port,
    )
    if plot is not None:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise UsageError("--plot needs matplotlib: pip install matplotlib")
    work = _workdir(workdir)
    names: list[str] = []
    if nodelist is not None:
        try:
            names = expand(nodelist)
        except HostlistError as exc:
            raise UsageError(f"--nodelist: {exc}") from None
        if len(names) < 2:
            raise UsageError(f"--nodelist must name at least 2 nodes, got {nodelist!r}")
        if ctx.get_parameter_source("node_count") is click.core.ParameterSource.COMMANDLINE:
            if node_count != len(names):
                raise UsageError(f"--nodes {node_count} but --nodelist names {len(names)} nodes")

    wiring = resolve(ctx, config_path, {"fabric": fabric_file})
    client = wiring.client()
    snapshot = client.snapshot()
    if partition is not None and partition not in snapshot.partitions:
        known = ", ".join(sorted(snapshot.partitions)) or "none"
        raise UsageError(f"unknown partition {partition!r} (known: {known})")
    fabric = wiring.fabric(snapshot)
    if names:
        unknown = [n for n in names if n not in snapshot.nodes]
        if unknown:
            raise UsageError(f"--nodelist: not Slurm nodes: {fold(unknown)}")
        ring = ring_order(names, fabric)
    else:
        ring = choose_nodes(snapshot, fabric, node_count, partition)
    groups = plan_groups(ring, fabric)

    token = secrets.token_hex(4)
    name = f"{FILE_PREFIX}-{token}"
    document = work / f"{name}.json"
    program_args = ["--out", str(document), "--min-bytes", str(low), "--max-bytes", str(high)]
    program_args += ["--iters", str(iters)]
    for group in groups:
        program_args += ["--group", f"{group.name}={fold(group.nodes)}"]
    values = TemplateValues(
        program="slurmopt.elastic.bench",
        program_args=program_args,
        min_nodes=len(ring),
        max_nodes=len(ring),
        nproc_per_node=nproc_per_node,
        rdzv_port=rdzv_port or TemplateValues.rdzv_port,
    )
    script = render(TEMPLATE, values)
    argv = [
        os.environ.get(SBATCH_ENV, "sbatch"),
        "--parsable",
        "--wait",
        f"--job-name={name}",
        f"--output={work / name}-%j.out",
        f"--chdir={work}",
        f"--nodes={len(ring)}",
        f"--nodelist={fold(ring)}",
        "--exclusive",
        f"--time={math.ceil(timeout / 60) + 1}",
    ]
    if partition is not None:
        argv.append(f"--partition={partition}")
    if _gpus_per_node(snapshot, ring, nproc_per_node):
        argv.append(f"--gpus-per-node={nproc_per_node}")
    argv += sbatch_args
    env = dict(os.environ)
    if rdzv_port is not None:
        env["SLURMOPT_RDZV_PORT"] = str(rdzv_port)  # the option beats the environment

    job_id, status = run_job(argv, script, env, timeout, name)
    output = work / f"{name}-{job_id}.out"
    if status != 0:
        last = _last_line(output)
        raise BenchJobFailed(
            f"benchmark job {job_id} failed (exit {status}); its output is {output}"
            + (f" (last line: {last})" if last else "")
        )
    data = _read_document(document, output, job_id)
    report = evaluate(
        parse_document(data, str(document)),
        fabric,
        ring,
        min_efficiency=min_efficiency,
        outlier=outlier,
        expect_busbw=expect_busbw,
        job={"id": job_id, "output": str(output), "document": str(document)},
    )
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
