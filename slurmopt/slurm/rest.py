"""The slurmrestd adapter: ``/slurm/<version>/jobs``, ``/nodes`` and ``/partitions`` over httpx.

Two ways in: a unix socket served with ``rest_auth/local`` (no token; the
socket's permissions authenticate), or TCP with JWT (``X-SLURM-USER-NAME``
and ``X-SLURM-USER-TOKEN``).  Responses go through the same parse functions
as the command-line adapter, so both produce identical snapshots.

The openapi version is negotiated on first use: the newest that slurmrestd
lists in ``/openapi/v3`` and :data:`~slurmopt.slurm.parse.REST_API_VERSIONS`
holds, unless one is pinned.  A JWT expires, so when slurmctld refuses it the
token is read again from its source (file, command, ``$SLURM_JWT``) and the
request retried once.

openapi v0.0.38 (Slurm 22.05) cannot set a job's node list, and slurmrestd
has no topology endpoint, so writes, ``topology_text`` and ``job_status``
delegate to a :class:`CliSlurmClient`.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any

import httpx

from slurmopt.errors import ConfigError, SlurmResponseError, SlurmUnavailable
from slurmopt.model import ClusterSnapshot
from slurmopt.slurm import parse
from slurmopt.slurm.cli import CliSlurmClient, ScontrolWrites

#: The openapi version of the newest path in slurmrestd's ``/openapi/v3`` document.
_PATH_VERSION = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))


class TokenSource:
    """Where the JWT comes from, so that an expired one can be read again from the same place.

    Exactly one of ``token`` (fixed), ``file`` or ``command`` (run with no
    shell, e.g. ``scontrol token lifespan=3600``); with none, ``$SLURM_JWT``.
    ``SLURM_JWT=...`` as ``scontrol token`` prints it is accepted from each.
    """

    def __init__(
        self,
        cli: CliSlurmClient,
        token: str | None = None,
        file: str | None = None,
        command: str | None = None,
    ) -> None:
        given = [
            name
            for name, v in (("token", token), ("token_file", file), ("token_command", command))
            if v
        ]
        if len(given) > 1:
            raise ConfigError(f"slurmrestd JWT: give one of {' or '.join(given)}, not both")
        self.cli = cli
        self.token, self.file, self.command = token, file, command
        if command:
            try:
                self.argv = shlex.split(command)
            except ValueError as exc:
                raise ConfigError(f"rest_token_command {command!r}: {exc}") from None
        if file:
            self.what = f"rest_token_file {file}"
        elif command:
            self.what = f"rest_token_command {command!r}"
        elif token:
            self.what = "token="
        else:
            self.what = "$SLURM_JWT"

    @property
    def rereadable(self) -> bool:
        """A token passed in as text cannot change; every other source can."""
        return not self.token

    def read(self) -> str:
        """The token now, or :class:`SlurmUnavailable` saying why there is none."""
        if self.token:
            text = self.token
        elif self.file:
            try:
                text = Path(self.file).read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise SlurmUnavailable(f"cannot read {self.what}: {exc}") from None
        elif self.command:
            text = self.cli.output(self.argv, self.what)
        else:
            text = os.environ.get("SLURM_JWT", "")
        jwt = text.strip().removeprefix("SLURM_JWT=").strip()
        if not jwt:
            raise SlurmUnavailable(f"{self.what} gave no token")
        return jwt


class RestSlurmClient(ScontrolWrites):
    """:class:`~slurmopt.slurm.base.SlurmClient` over slurmrestd."""

    name = "rest"

    def __init__(
        self,
        url: str,
        token: str | None = None,
        user: str | None = None,
        api_version: str | None = None,
        timeout: float = 30.0,
        cli: CliSlurmClient | None = None,
        transport: httpx.BaseTransport | None = None,
        token_file: str | None = None,
        token_command: str | None = None,
    ) -> None:
        """``url`` is ``unix:/path/to.sock`` or ``http(s)://host:port``.

        ``api_version`` pins the openapi version (None: the newest both sides
        speak).  Over TCP the JWT comes from ``token``, ``token_file``,
        ``token_command`` or ``SLURM_JWT`` (see :class:`TokenSource`).
        """
        if api_version and api_version not in parse.REST_API_VERSIONS:
            raise ConfigError(
                f"slurmrestd API {api_version!r} is not one slurmopt reads "
                f"({', '.join(parse.REST_API_VERSIONS)})"
            )
        self.url = url
        self.pinned = api_version or None
        #: The version in use: the pin, or the negotiated one after the first request.
        self.api_version: str | None = self.pinned
        #: What slurmrestd listed in ``/openapi/v3`` (empty until asked).
        self.served: tuple[str, ...] = ()
        #: How often an expired or refused token was read again.
        self.token_rereads = 0
        self.cli = cli or CliSlurmClient(timeout=timeout)
        self.tokens: TokenSource | None = None
        self._jwt = ""
        headers: dict[str, str] = {}
        if url.startswith("unix:"):
            path = url.removeprefix("unix:").removeprefix("//")
            if not path:
                raise ConfigError(f"slurmrestd URL {url!r} names no socket path")
            transport = transport or httpx.HTTPTransport(uds=path)
            base = "http://slurmrestd"
        elif url.startswith(("http://", "https://")):
            self.tokens = TokenSource(self.cli, token, token_file, token_command)
            try:
                self._jwt = self.tokens.read()
            except SlurmUnavailable as exc:
                raise ConfigError(
                    f"slurmrestd at {url} needs a JWT: {exc} (pass token=, rest_token_file, "
                    "rest_token_command or set SLURM_JWT, e.g. from `scontrol token`)"
                ) from None
            headers["X-SLURM-USER-NAME"] = user or getpass.getuser()
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

    def _send(self, path: str) -> httpx.Response:
        headers = {"X-SLURM-USER-TOKEN": self._jwt} if self.tokens else {}
        try:
            return self._http.get(path, headers=headers)
        except httpx.TimeoutException:
            raise SlurmUnavailable(f"slurmrestd {self.url}{path}: no answer in time") from None
        except (httpx.TransportError, OSError) as exc:
            raise SlurmUnavailable(f"slurmrestd {self.url}{path}: cannot connect: {exc}") from None

    def _refused(self, resp: httpx.Response) -> str | None:
        """Why the answer is an authentication refusal, or None when it is not one.

        slurmrestd itself answers 401 without credentials; an expired or
        invalid JWT is refused by slurmctld, which 24.11+ reports as HTTP 511
        with error 1007 "Protocol authentication error" and 22.05 as HTTP 500
        with error -1 "Unspecified error" (nothing more specific).
        """
        if resp.status_code in (401, 403):
            return f"authentication refused (HTTP {resp.status_code}): {resp.text.strip()[:80]}"
        if not self.tokens or resp.status_code not in (500, 511):
            return None
        try:
            errors = json.loads(resp.text).get("errors") or []
        except (ValueError, AttributeError):
            return None
        listed = errors if isinstance(errors, list) else []
        first = listed[0] if listed and isinstance(listed[0], dict) else {}
        code = first.get("error_number", first.get("errno"))
        if resp.status_code == 511 or code == 1007:
            what = first.get("error") or "Protocol authentication error"
        elif code == -1 and first.get("error") == "Unspecified error":
            what = "Unspecified error, 22.05's answer to an expired JWT"
        else:
            return None
        return f"JWT refused (HTTP {resp.status_code}: {what})"

    def _fetch(self, path: str) -> dict[str, Any]:
        """One GET; a refused JWT is read again from its source and the GET sent once more."""
        where = f"slurmrestd {self.url}{path}"
        resp = self._send(path)
        refused = self._refused(resp)
        if refused and self.tokens and self.tokens.rereadable:
            old, self._jwt = self._jwt, self.tokens.read()
            self.token_rereads += 1
            if self._jwt == old:
                refused += f"; {self.tokens.what} still holds the same token"
            else:
                resp = self._send(path)
                refused = self._refused(resp)
                if refused:
                    refused += f", again with a fresh token from {self.tokens.what}"
        if refused:
            raise SlurmUnavailable(f"{where}: {refused}")
        if resp.status_code == 404:
            self.served = ()  # slurmrestd may have been upgraded: ask again next time
            raise SlurmResponseError(f"{where}: HTTP 404 (not served by this slurmrestd)")
        try:
            doc = parse.load_json(resp.text, where)
        except SlurmResponseError as exc:
            if "contact slurm controller" in str(exc).lower() or resp.status_code >= 500:
                raise SlurmUnavailable(str(exc)) from None
            raise
        if resp.status_code >= 400:
            raise SlurmResponseError(f"{where}: HTTP {resp.status_code}")
        return doc

    def negotiate(self) -> str:
        """The openapi version to use, asked of slurmrestd once per client.

        The pin when it is served, else the newest version slurmrestd lists
        that slurmopt reads; either failing is one line naming both lists.
        """
        if self.served and self.api_version:
            return self.api_version
        doc = self._fetch("/openapi/v3")
        paths = doc.get("paths")
        found = {
            m[1]
            for p in (paths if isinstance(paths, dict) else ())
            if (m := _PATH_VERSION.match(p))
        }
        self.served = tuple(sorted(found, key=_version_key))
        ours = parse.REST_API_VERSIONS
        lists = (
            f"slurmrestd at {self.url} serves {', '.join(self.served) or 'no /slurm/ API'}; "
            f"slurmopt reads {', '.join(ours)}"
        )
        if self.pinned:
            if self.pinned not in self.served:
                raise ConfigError(f"rest_api {self.pinned} is not served: {lists}")
            self.api_version = self.pinned
        else:
            common = [v for v in ours if v in found]
            if not common:
                raise SlurmResponseError(f"no openapi version in common: {lists}")
            self.api_version = max(common, key=_version_key)
        return self.api_version

    def _get(self, endpoint: str) -> dict[str, Any]:
        return self._fetch(f"/slurm/{self.negotiate()}/{endpoint}")

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
