"""Job templates for ``slurmopt submit --template NAME``: Jinja2, strict, shell-quoted.

A template is ``sbatch_templates/NAME.sh.j2`` (shipped in the package,
or in ``$SLURMOPT_TEMPLATE_DIR``).  Rendering uses ``StrictUndefined`` so a
missing value is an error, never an empty string in a shell script, and
every value from the user goes through the ``shquote`` filter.  The user's
own ``#SBATCH`` lines come right after the template's, before the first
command, because sbatch stops reading directives at the first command.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from slurmopt.errors import UsageError
from slurmopt.signals import ALLOWED_SIGNALS, DEFAULT_SIGNAL, check_signal

#: Where a site keeps its own templates (searched before the shipped ones).
TEMPLATE_DIR_ENV = "SLURMOPT_TEMPLATE_DIR"
#: File name suffix of a template.
SUFFIX = ".sh.j2"
#: Templates slurmopt ships.
SHIPPED = ("elastic-torchrun", "single-node", "nccl-allreduce-bench")


def shipped_dir() -> Path:
    """The templates shipped inside the package (the top-level ``sbatch_templates/`` links here)."""
    return Path(__file__).resolve().parent / "data" / "sbatch_templates"


def template_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Directories searched for templates, site directory first."""
    env = os.environ if environ is None else environ
    dirs = [Path(env[TEMPLATE_DIR_ENV])] if env.get(TEMPLATE_DIR_ENV) else []
    return [*dirs, shipped_dir()]


def available(environ: Mapping[str, str] | None = None) -> list[str]:
    """The template names that can be rendered."""
    names: set[str] = set()
    for directory in template_dirs(environ):
        if directory.is_dir():
            names.update(
                p.name[: -len(SUFFIX)] for p in directory.glob(f"*{SUFFIX}") if p.name[0] != "_"
            )
    return sorted(names)


def shquote(value: Any) -> str:
    """One shell word, whatever the value holds."""
    return shlex.quote(str(value))


@dataclass(frozen=True)
class TemplateValues:
    """What a template may use; the user's values are quoted when rendered."""

    program: str
    program_args: Sequence[str] = ()
    directives: Sequence[str] = ()
    min_nodes: int = 1
    max_nodes: int = 1
    nproc_per_node: int = 1
    signal: str = DEFAULT_SIGNAL
    signal_lead_s: int = 120
    max_restarts: int = 3
    collective_timeout_min: int = 5
    rdzv_port: int = 29400
    extra: Mapping[str, Any] = field(default_factory=dict)

    def context(self) -> dict[str, Any]:
        """The Jinja2 context."""
        ctx = {
            k: getattr(self, k)
            for k in (
                "program",
                "program_args",
                "directives",
                "min_nodes",
                "max_nodes",
                "nproc_per_node",
                "signal",
                "signal_lead_s",
                "max_restarts",
                "collective_timeout_min",
                "rdzv_port",
            )
        }
        ctx.update(self.extra)
        return ctx


def environment(environ: Mapping[str, str] | None = None) -> jinja2.Environment:
    """A strict environment over the template directories, with ``shquote``."""
    loader = jinja2.FileSystemLoader([str(d) for d in template_dirs(environ)])
    env = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["shquote"] = shquote
    return env


def render(name: str, values: TemplateValues, environ: Mapping[str, str] | None = None) -> str:
    """The batch script for template ``name``; UsageError for an unknown name or value."""
    if name not in available(environ):
        raise UsageError(f"unknown template {name!r} (have: {', '.join(available(environ))})")
    for line in values.directives:
        if not line.startswith("#SBATCH"):
            raise UsageError(f"not an #SBATCH directive: {line!r}")
        if "\n" in line:
            raise UsageError(f"a directive must be one line: {line!r}")
    try:
        return environment(environ).get_template(name + SUFFIX).render(values.context())
    except jinja2.UndefinedError as exc:
        raise UsageError(f"template {name!r}: {exc.message}") from None


__all__ = [
    "ALLOWED_SIGNALS",
    "DEFAULT_SIGNAL",
    "check_signal",
    "SHIPPED",
    "TEMPLATE_DIR_ENV",
    "TemplateValues",
    "available",
    "environment",
    "render",
    "shipped_dir",
    "shquote",
    "template_dirs",
]
