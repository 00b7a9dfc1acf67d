"""The pure core imports no I/O: checked in a clean interpreter, not by reading imports.

``slurmopt.policy`` (placement, backfill, preemption, fragmentation) must be
a function of its inputs, so loading it must not load a database, HTTP,
template, NVML or subprocess library, nor slurmopt's own adapters, loaders,
store, daemon or CLI.  A lazy import inside a function is allowed; a module
that pulls any of these in at import time fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

POLICY = Path(__file__).resolve().parents[2] / "slurmopt" / "policy"
#: The pure core: every module of ``slurmopt.policy`` (a new one is checked without a word
#: here), the model, the tag parser and the fabric's core.
CORE = (
    "slurmopt.policy",
    *sorted(f"slurmopt.policy.{p.stem}" for p in POLICY.glob("*.py") if p.stem != "__init__"),
    "slurmopt.model",
    "slurmopt.tag",
    "slurmopt.fabric",
)

#: Top-level packages that mean I/O (or a heavy runtime) when loaded.
FORBIDDEN_LIBRARIES = (
    "subprocess",
    "sqlalchemy",
    "alembic",
    "httpx",
    "jinja2",
    "pynvml",
    "torch",
    "yaml",
    "click",
    "rich",
    "apscheduler",
    "prometheus_client",
)
#: slurmopt's own modules that read or write the outside world.
FORBIDDEN_MODULES = (
    "slurmopt.slurm",
    "slurmopt.store",
    "slurmopt.daemon",
    "slurmopt.cli",
    "slurmopt.config",
    "slurmopt.submit",
    "slurmopt.templates",
    "slurmopt.fabric.loaders",
    "slurmopt.fabric.tree",
    "slurmopt.fabric.topology_conf",
    "slurmopt.fabric.yaml_formats",
    "slurmopt.fabric.discover",
    "slurmopt.health",
    "slurmopt.sim",
)


def _loaded_by(*modules: str) -> set[str]:
    repo = Path(__file__).resolve().parents[2]
    code = (
        f"import json, sys\nsys.path.insert(0, {str(repo)!r})\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo
    ).stdout
    return set(json.loads(out))


def test_the_core_loads_no_io_module() -> None:
    loaded = _loaded_by(*CORE)
    bad = sorted(
        m
        for m in loaded
        if m.split(".")[0] in FORBIDDEN_LIBRARIES
        or any(m == f or m.startswith(f + ".") for f in FORBIDDEN_MODULES)
    )
    assert bad == [], f"the pure core imports I/O modules: {bad}"
    assert {"slurmopt.policy.plan", "slurmopt.policy.request"} <= set(loaded)  # all were found


def test_the_check_sees_an_io_import() -> None:
    # The same check on a module that does I/O finds it, so an empty answer above means something.
    loaded = _loaded_by("slurmopt.slurm.cli")
    assert "subprocess" in loaded and "slurmopt.slurm.cli" in loaded
