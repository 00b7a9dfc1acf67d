"""The slurmrestd adapter: ``/slurm/<version>/jobs``, ``/nodes`` and ``/partitions`` over httpx.

Two ways in: a unix socket served with ``rest_auth/local`` (no token; the
socket's permissions authenticate), or TCP with JWT (``X-SLURM-USER-NAME``
and ``X-SLURM-USER-TOKEN``).  Responses go through the same parse functions
as the command-line adapter, so both produce identical snapshots.

openapi v0.0.38 (Slurm 22.05) cannot set a job's node list, and slurmrestd
has no topology endpoint, so writes, ``topology_text`` and ``job_status``
delegate to a :class:`CliSlurmClient`.
"""

from __future__ import annotations

import getpass
import os
import time
from typing import Any

import httpx

from slurmopt.errors import ConfigError, SlurmResponseError, SlurmUnavailable
from slurmopt.model import ClusterSnapshot
from slurmopt.slurm import parse
from slurmopt.slurm.cli import CliSlurmClient, ScontrolWrites

DEFAULT_API = "v0.0.38"


class RestSlurmClient(ScontrolWrites):
    """:class:`~slurmopt.slurm.base.SlurmClient` over slurmrestd."""

    name = "rest"

    def __init__(
        self,
        url: str,
        token: str | None = None,
        user: str | None = None,
        api_version: str = DEFAULT_API,
        timeout: float = 30.0,
        cli: CliSlurmClient | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``url`` is ``unix:/path/to.sock`` or ``http(s)://host:port``.

        Over TCP the JWT comes from ``token`` or ``SLURM_JWT`` (``SLURM_JWT=...``
        as ``scontrol token`` prints it is accepted too).
        """
        self.url = url
        self.api_version = api_version
        self.cli = cli or CliSlurmClient(timeout=timeout)
        headers: dict[str, str] = {}
        if url.startswith("unix:"):
            path = url.removeprefix("unix:").removeprefix("//")
            if not path:
                raise ConfigError(f"slurmrestd URL {url!r} names no socket path")
            transport = transport or httpx.HTTPTransport(uds=path)
            base = "http://slurmrestd"
        elif url.startswith(("http://", "https://")):
            jwt = token if token is not None else os.environ.get("SLURM_JWT", "")
            jwt = jwt.strip().removeprefix("SLURM_JWT=")
            if not jwt:
                raise ConfigError(
                    f"slurmrestd at {url} needs a JWT: pass token= or set SLURM_JWT "
                    "(e.g. from `scontrol token`)"
                )
            headers["X-SLURM-USER-NAME"] = user or getpass.getuser()
            headers["X-SLURM-USER-TOKEN"] = jwt
            base = url.rstrip("/")
        else:
            raise ConfigError(f"slurmrestd URL {url!r} must start with unix:, http:// or https://")
        self._http = httpx.Client(
            base_url=base, headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    @property
    def slurm_version(self) -> str:
        """The cluster's release (``24.11.5``), as the command-line client detects it."""
        return self.cli.slurm_version

    def _get(self, endpoint: str) -> dict[str, Any]:
        path = f"/slurm/{self.api_version}/{endpoint}"
        where = f"slurmrestd {self.url}{path}"
        try:
            resp = self._http.get(path)
        except httpx.TimeoutException:
            raise SlurmUnavailable(f"{where}: no answer in time") from None
        except (httpx.TransportError, OSError) as exc:
            raise SlurmUnavailable(f"{where}: cannot connect: {exc}") from None
        if resp.status_code in (401, 403):
            raise SlurmUnavailable(
                f"{where}: authentication refused (HTTP {resp.status_code}): "
                f"{resp.text.strip()[:80]}"
            )
        if resp.status_code == 404:
            raise SlurmResponseError(f"{where}: HTTP 404 (API {self.api_version} not served?)")
        try:
            doc = parse.load_json(resp.text, where)
        except SlurmResponseError as exc:
            if "contact slurm controller" in str(exc).lower() or resp.status_code >= 500:
                raise SlurmUnavailable(str(exc)) from None
            raise
        if resp.status_code >= 400:
            raise SlurmResponseError(f"{where}: HTTP {resp.status_code}")
        return doc

    def snapshot(self) -> ClusterSnapshot:
        taken_at = time.time()
        jobs_doc = self._get("jobs")
        nodes_doc = self._get("nodes")
        parts_doc = self._get("partitions")
        partitions = parse.parse_partitions_json(parts_doc, "slurmrestd partitions")
        if not parse.partitions_mark_default(parts_doc):
            # 24.11 (v0.0.40-42) does not say which partition is the default
            partitions = parse.with_defaults(partitions, self.cli.default_partitions())
        return parse.build_snapshot(
            jobs_doc,
            nodes_doc,
            partitions,
            taken_at=taken_at,
            source=self.name,
            jobs_source="slurmrestd jobs",
            nodes_source="slurmrestd nodes",
        )
