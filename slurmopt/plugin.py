"""The Slurm job-submit plugin's installation, as pure text transformations.

``slurm_plugins/job_submit.lua`` runs inside slurmctld, where it cannot read
slurmopt's configuration, so the two settings it needs (the heartbeat path
and its maximum age) are baked into the script at install time by replacing
two placeholders.  Everything that may change while the daemon runs (whether
it enforces, which partitions it manages) travels in the heartbeat instead,
so a configuration change needs no reinstall.  This module renders the
script, reads those settings back from an installed one, and computes the
``JobSubmitPlugins`` change to ``slurm.conf``; the CLI does the I/O.  See
``docs/plugin.md``.

``python3 -m slurmopt.plugin --heartbeat PATH --max-age S`` prints the
rendered script (the sandbox uses it).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmopt import __version__
from slurmopt.config import slurm_conf_dir
from slurmopt.errors import UsageError

SCRIPT_NAME = "job_submit.lua"
#: A line every rendered script carries: tells our script from a site's own.
MARKER = "slurmopt job-submit plugin"
HEARTBEAT_PLACEHOLDER = "@SLURMOPT_HEARTBEAT_PATH@"
MAX_AGE_PLACEHOLDER = "@SLURMOPT_MAX_AGE_S@"
#: Replaced by the slurmopt version that rendered the script, so ``status`` can tell a stale one.
VERSION_PLACEHOLDER = "@SLURMOPT_VERSION@"
#: The comment field the plugin adds to a job it held itself.

_HEARTBEAT_LINE = re.compile(r'^local HEARTBEAT_PATH = "((?:[^"\\]|\\.)*)"$', re.MULTILINE)
_MAX_AGE_LINE = re.compile(r'^local MAX_AGE_S = (?:math.min\()?tonumber\("([^"]*)"\)', re.MULTILINE)
_VERSION_LINE = re.compile(r'^local SLURMOPT_VERSION = "((?:[^"\\]|\\.)*)"', re.MULTILINE)
_CONF_KEY = re.compile(r"^\s*JobSubmitPlugins\s*=\s*(?P<value>[^#]*?)\s*(?P<comment>#.*)?$", re.I)


def source_path() -> Path:
    """The unrendered script, shipped inside the package (``slurm_plugins/`` links to it)."""
    return Path(__file__).resolve().parent / "data" / SCRIPT_NAME


def read_source() -> str:
    """The unrendered script's text; UsageError when this installation lacks it."""
    path = source_path()
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the plugin source: {exc.strerror or exc}") from None


def lua_string(text: str) -> str:
    """``text`` escaped for the inside of a double-quoted Lua string."""
    if any(c in text for c in "\n\r\0"):
        raise UsageError(f"a path baked into the plugin must be one line, got {text!r}")
    return text.replace("\\", "\\\\").replace('"', '\\"')


def format_seconds(seconds: float) -> str:
    """``10.0`` as ``10``, ``2.5`` as ``2.5``: what the script's ``tonumber`` reads back."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"--max-age must be a positive number of seconds, got {seconds!r}")
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def render_plugin(
    source: str, heartbeat_path: str, max_age_s: float, version: str = __version__
) -> str:
    """The script with the heartbeat path, maximum age and slurmopt version baked in.

    Each placeholder must occur exactly once (in its own ``local`` line), so
    a changed script cannot silently come out half-rendered.
    """
    if not os.path.isabs(heartbeat_path):
        raise UsageError(f"the heartbeat path must be absolute, got {heartbeat_path!r}")
    for placeholder in (HEARTBEAT_PLACEHOLDER, MAX_AGE_PLACEHOLDER, VERSION_PLACEHOLDER):
        if source.count(placeholder) != 1:
            raise UsageError(f"plugin source must contain {placeholder} exactly once")
    return (
        source.replace(HEARTBEAT_PLACEHOLDER, lua_string(heartbeat_path))
        .replace(MAX_AGE_PLACEHOLDER, format_seconds(max_age_s))
        .replace(VERSION_PLACEHOLDER, lua_string(version))
    )


@dataclass(frozen=True, slots=True)
class BakedSettings:
    """What an installed script was rendered with; ``rendered`` is False for the raw source.

    ``version`` is the slurmopt that rendered it (None: rendered before versions were stamped).
    """

    heartbeat_path: str
    max_age_s: float | None
    rendered: bool
    version: str | None = None


def _lua_unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def baked_settings(script: str) -> BakedSettings | None:
    """The settings baked into ``script``, or None when it is not slurmopt's plugin."""
    if MARKER not in script:
        return None
    path_match = _HEARTBEAT_LINE.search(script)
    age_match = _MAX_AGE_LINE.search(script)
    if path_match is None or age_match is None:
        return None
    path = _lua_unescape(path_match.group(1))
    try:
        max_age: float | None = float(age_match.group(1))
    except ValueError:
        max_age = None
    rendered = path != HEARTBEAT_PLACEHOLDER and max_age is not None
    version_match = _VERSION_LINE.search(script)
    version = _lua_unescape(version_match.group(1)) if version_match else None
    if version == VERSION_PLACEHOLDER:
        version = None
    return BakedSettings(path, max_age, rendered, version)


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    """What is installed as ``job_submit.lua``, and whether it is what ``install`` writes now.

    ``state``: ``missing``, ``foreign`` (not slurmopt's), ``unrendered`` or
    ``installed``.  ``stale`` says why an installed script differs from a
    fresh rendering with its own settings (None: it is current), so an
    upgrade whose plugin was not reinstalled is seen, not guessed.
    """

    state: str
    baked: BakedSettings | None
    stale: str | None

    @property
    def version(self) -> str | None:
        """The slurmopt version that rendered the installed script, when known."""
        return self.baked.version if self.baked else None


def installed_plugin(
    script: str | None, source: str, version: str = __version__
) -> InstalledPlugin:
    """Judge an installed script (None: no file) against ``source`` rendered by ``version``."""
    if script is None:
        return InstalledPlugin("missing", None, None)
    baked = baked_settings(script)
    if baked is None:
        return InstalledPlugin("foreign", None, None)
    if not baked.rendered or baked.max_age_s is None:
        return InstalledPlugin("unrendered", baked, None)
    stale = None
    if baked.version != version:
        by = f"slurmopt {baked.version}" if baked.version else "a slurmopt that stamped no version"
        stale = f"rendered by {by}; this is slurmopt {version}"
    elif script != render_plugin(source, baked.heartbeat_path, baked.max_age_s, version):
        stale = "its text differs from what `slurmopt plugin install` writes now"
    return InstalledPlugin("installed", baked, stale)


def default_dest(env: Mapping[str, str] | None = None) -> Path:
    """Where slurmctld looks for ``job_submit.lua``: beside ``$SLURM_CONF``, else ``/etc/slurm``."""
    return slurm_conf_dir(env)


def slurm_conf_path(dest: Path, env: Mapping[str, str] | None = None) -> Path:
    """The slurm.conf that belongs to ``dest``: ``$SLURM_CONF`` when it lives there."""
    env = os.environ if env is None else env
    conf = env.get("SLURM_CONF")
    if conf and Path(conf).parent.resolve() == dest.resolve():
        return Path(conf)
    return dest / "slurm.conf"


def merge_plugins(value: str) -> str:
    """A ``JobSubmitPlugins`` value with ``lua`` added, keeping the others in order."""
    plugins = [p.strip() for p in value.split(",") if p.strip()]
    if any(_is_lua(p) for p in plugins):
        return ",".join(plugins)
    return ",".join([*plugins, "lua"])


def _is_lua(plugin: str) -> bool:
    return plugin.rsplit("/", 1)[-1].strip().lower() == "lua"


def loads_lua(live_config: Mapping[str, str]) -> bool:
    """Whether a running slurmctld's configuration (``scontrol show config``) loads the plugin."""
    for key, value in live_config.items():
        if key.strip().lower() == "jobsubmitplugins":
            return any(_is_lua(p) for p in value.split(","))
    return False


@dataclass(frozen=True, slots=True)
class ConfChange:
    """The ``JobSubmitPlugins`` change one slurm.conf needs.

    ``before`` is the line as found (None when there is none), ``after`` the
    line to have; ``text`` is the whole file with the change applied, equal
    to the input when ``needed`` is False.
    """

    before: str | None
    after: str
    needed: bool
    text: str


def conf_change(conf_text: str) -> ConfChange:
    """What to change in ``conf_text`` so slurmctld loads the Lua plugin.

    Keys in slurm.conf are case-insensitive; the last ``JobSubmitPlugins``
    line is the one that counts, so that one is merged.  Without one, a line
    is appended.  ``Include``d files are not followed.
    """
    lines = conf_text.splitlines(keepends=True)
    last = None
    for index, line in enumerate(lines):
        if _CONF_KEY.match(line.rstrip("\r\n")):
            last = index
    if last is None:
        after = "JobSubmitPlugins=lua"
        text = conf_text
        if text and not text.endswith("\n"):
            text += "\n"
        return ConfChange(None, after, True, text + after + "\n")
    before = lines[last].rstrip("\r\n")
    match = _CONF_KEY.match(before)
    assert match is not None
    merged = merge_plugins(match.group("value"))
    if any(_is_lua(p) for p in match.group("value").split(",")):
        return ConfChange(before, before, False, conf_text)
    after = f"JobSubmitPlugins={merged}"
    if match.group("comment"):
        after += f" {match.group('comment')}"
    ending = lines[last][len(before) :]
    lines[last] = after + (ending or "\n")
    return ConfChange(before, after, True, "".join(lines))


def conf_enables_plugin(conf_text: str) -> bool:
    """Whether ``conf_text`` already loads the Lua job-submit plugin."""
    return not conf_change(conf_text).needed


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rendered script: ``python3 -m slurmopt.plugin --heartbeat PATH --max-age S``."""
    parser = argparse.ArgumentParser(prog="python3 -m slurmopt.plugin", description=main.__doc__)
    parser.add_argument("--heartbeat", required=True, help="absolute heartbeat file path")
    parser.add_argument("--max-age", type=float, required=True, help="seconds until stale")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(render_plugin(read_source(), args.heartbeat, args.max_age))
    except UsageError as exc:
        print(f"slurmopt: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


__all__ = [
    "BakedSettings",
    "ConfChange",
    "MARKER",
    "VERSION_PLACEHOLDER",
    "InstalledPlugin",
    "SCRIPT_NAME",
    "baked_settings",
    "conf_change",
    "conf_enables_plugin",
    "default_dest",
    "installed_plugin",
    "merge_plugins",
    "loads_lua",
    "read_source",
    "render_plugin",
    "slurm_conf_path",
    "source_path",
]

if __name__ == "__main__":
    sys.exit(main())
