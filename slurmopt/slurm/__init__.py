"""Adapters between slurmopt and Slurm, all behind the :class:`SlurmClient` interface.

``connect("cli")`` runs Slurm's commands, ``connect("rest")`` talks to
slurmrestd, ``connect("pyslurm")`` uses pyslurm (Slurm 25.11 only).  Each
import of an adapter happens on demand, so a missing optional dependency only
matters to the backend that needs it.
"""

from __future__ import annotations

import os
from typing import Any

from slurmopt.errors import ConfigError, UsageError
from slurmopt.slurm.base import SlurmClient

BACKENDS = ("cli", "rest", "pyslurm")


def connect(backend: str = "cli", **options: Any) -> SlurmClient:
    """A client for ``backend``; options go to that backend's constructor.

    rest: ``url`` (``unix:/path.sock`` or ``http://host:port``; default
    ``$SLURMOPT_REST_URL``), ``token``, ``token_file`` or ``token_command``
    (default ``$SLURM_JWT``), ``user``, ``api_version`` (default: negotiated),
    ``timeout``.  cli: ``timeout``, ``slurm_conf``, ``runner``.
    """
    if backend == "cli":
        from slurmopt.slurm.cli import CliSlurmClient

        return CliSlurmClient(**options)
    if backend == "rest":
        from slurmopt.slurm.rest import RestSlurmClient

        url = options.pop("url", None) or os.environ.get("SLURMOPT_REST_URL")
        if not url:
            raise ConfigError(
                "the rest backend needs a slurmrestd address: pass url= or set SLURMOPT_REST_URL "
                "(e.g. unix:/tmp/slurmopt-sandbox/run/slurmrestd.sock or http://127.0.0.1:6820)"
            )
        return RestSlurmClient(url, **options)
    if backend == "pyslurm":
        from slurmopt.slurm.pyslurm_client import PyslurmSlurmClient

        return PyslurmSlurmClient(**options)
    raise UsageError(f"unknown Slurm backend {backend!r} (choose from {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "SlurmClient", "connect"]
