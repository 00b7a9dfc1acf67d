"""Run one reader on one input in a forked child under a memory limit and a timeout.

A driver process imports slurmopt once and forks a child per input, so each
input costs milliseconds, not an interpreter start.  The child sets
``RLIMIT_AS`` (:data:`MEMORY_LIMIT`) and runs ``slurmopt.cli.main`` (or, for
sbatch scripts, the submit builder, since the command would run sbatch);
the driver kills it after :data:`TIMEOUT_S`.  What comes back is the exit
code, stdout and stderr, or ``"timeout"``: a hang is a result, not a stuck
test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Address space a reader may use, on top of nothing: a blow-up fails with MemoryError.
MEMORY_LIMIT = 1 << 30
#: Seconds one input may take.
TIMEOUT_S = 20.0
ROOT = Path(__file__).resolve().parents[2]

_DRIVER = r"""
import io, json, os, resource, signal, sys, time, traceback
for key in [k for k in os.environ if k.startswith("SLURMOPT_")]:
    del os.environ[key]
from slurmopt.cli import main
from slurmopt.errors import SlurmoptError, one_line
from slurmopt.submit import build_submission
import slurmopt.cli.simulate, slurmopt.cli.topology, slurmopt.cli.config, slurmopt.cli.explain
import slurmopt.fabric.loaders, slurmopt.sim.traces, slurmopt.store, sqlalchemy.dialects.sqlite
limit, timeout = int(sys.argv[1]), float(sys.argv[2])

def child(req):
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1); os.dup2(err, 2)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), line_buffering=True)
    code = 0
    try:
        if req["kind"] == "submit":
            try:
                build_submission(["job.sh"], req["script"], "job.sh")
            except SlurmoptError as exc:
                print(f"slurmopt: {one_line(str(exc))}", file=sys.stderr)
                code = exc.exit_code
        else:
            main(req["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(code)

for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(req)
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.002)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print(json.dumps({"rc": "timeout"}), flush=True)
        continue
    rc = os.waitstatus_to_exitcode(status)
    print(json.dumps({"rc": rc}), flush=True)
"""


def _text(path: Path) -> str:
    """A child's captured output, or nothing when it wrote none."""
    return path.read_text(errors="replace") if path.exists() else ""


@dataclass(frozen=True)
class Outcome:
    """What a reader did with one input."""

    rc: int | str
    stdout: str
    stderr: str


class Driver:
    """The fork server; one per test session."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="slurmopt-fuzz-"))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER, str(MEMORY_LIMIT), str(TIMEOUT_S)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=self.tmp,
        )

    def file(self, name: str, data: str | bytes) -> Path:
        """Write an input file in the driver's directory."""
        path = self.tmp / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8", errors="surrogatepass")
        return path

    def _ask(self, request: dict[str, object]) -> Outcome:
        out, err = self.tmp / "stdout", self.tmp / "stderr"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({**request, "out": str(out), "err": str(err)}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        return Outcome(answer["rc"], _text(out), _text(err))

    def cli(self, *argv: str) -> Outcome:
        """``slurmopt ARGV`` in a child (NULs dropped: no real command line can hold one)."""
        return self._ask({"kind": "cli", "argv": [a.replace("\0", "") for a in argv]})

    def submit(self, script: str) -> Outcome:
        """``slurmopt submit job.sh`` up to the sbatch call, for a script with this text."""
        return self._ask({"kind": "submit", "script": script})

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def strict_json(text: str) -> object:
    """``json.loads`` that refuses NaN and infinities, as strict parsers do."""

    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def assert_clean(outcome: Outcome, codes: set[int], json_out: bool = False) -> None:
    """A valid result (exit 0) or one ``slurmopt:`` line with a documented code; never worse."""
    assert outcome.rc != "timeout", "hung"
    assert "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
    if outcome.rc == 0:
        if json_out:
            strict_json(outcome.stdout)
        return
    assert outcome.rc in codes, (outcome.rc, outcome.stderr[-2000:])
    lines = outcome.stderr.splitlines()
    assert lines, "failed without a message"
    assert all(line.startswith("slurmopt: ") for line in lines), outcome.stderr[-2000:]
    assert not lines[-1].startswith("slurmopt: warning:"), outcome.stderr[-2000:]
