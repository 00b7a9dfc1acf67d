"""The job-submit plugin's decisions, run in a real Lua interpreter against fake Slurm objects.

The fakes stand in for what slurmctld's job_submit/lua hands the script: a
``slurm`` table with ``SUCCESS`` and the log functions, a job descriptor
table, and a partition list keyed by name with ``flag_default``.  The
integration tests run the same script inside the sandbox's slurmctld.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from slurmopt.daemon.heartbeat import write_heartbeat
from slurmopt.plugin import read_source, render_plugin

LUA = next((shutil.which(n) for n in ("lua5.1", "lua5.3", "lua") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(LUA is None, reason="no Lua interpreter (apt-get install lua5.1)")

NO_VAL = 4294967294
MAX_AGE = 10

DRIVER = r"""
local logs = {}
slurm = {
    SUCCESS = 0, ERROR = -1,
    log_info = function(...) logs[#logs + 1] = "info: " .. string.format(...) end,
    log_error = function(...) logs[#logs + 1] = "error: " .. string.format(...) end,
}
dofile(SCRIPT)
local fields = JOB
local job = setmetatable({}, {
    __index = function(_, k)
        if k == EXPLODE_ON_READ then error("boom reading " .. k) end
        return fields[k]
    end,
    __newindex = function(_, k, v)
        if k == EXPLODE_ON_WRITE then error("boom writing " .. k) end
        fields[k] = v
    end,
})
local rc = slurm_job_submit(job, PARTS, 1000)
print(rc)
print(fields.priority)
print(fields.comment == nil and "<nil>" or fields.comment)
print(fields.admin_comment == nil and "<nil>" or fields.admin_comment)
for _, line in ipairs(logs) do print(line) end
"""


def _lua_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string of ASCII text is a valid Lua string
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"[{json.dumps(k)}] = {_lua_value(v)}" for k, v in value.items()) + "}"
        )
    raise TypeError(value)


class FakeController:
    """Runs the rendered plugin once per job, as slurmctld's job_submit/lua would."""

    def __init__(self, tmp_path: Path) -> None:
        self.heartbeat = tmp_path / "heartbeat"
        self.script = tmp_path / "job_submit.lua"
        self.script.write_text(render_plugin(read_source(), str(self.heartbeat), MAX_AGE))
        self.driver = tmp_path / "driver.lua"
        self.driver.write_text(DRIVER)

    def submit(
        self,
        explode_on_read: str = "",
        explode_on_write: str = "",
        parts: dict[str, Any] | None = None,
        **job: Any,
    ) -> tuple[int, int, str | None, str | None, list[str]]:
        """``(rc, priority, comment, admin_comment, log lines)`` after the plugin ran."""
        fields = {"priority": NO_VAL, "het_job_offset": NO_VAL, **job}
        if parts is None:
            parts = {"gpu": {"flag_default": 1}, "cpu": {"flag_default": 0}}
        prelude = (
            f"SCRIPT = {json.dumps(str(self.script))}\n"
            f"JOB = {_lua_value(fields)}\n"
            f"PARTS = {_lua_value(parts)}\n"
            f"EXPLODE_ON_READ = {json.dumps(explode_on_read)}\n"
            f"EXPLODE_ON_WRITE = {json.dumps(explode_on_write)}\n"
        )
        assert LUA is not None
        proc = subprocess.run(
            [LUA, "-e", prelude, str(self.driver)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        rc, priority, comment, admin, *logs = proc.stdout.splitlines()
        return (
            int(rc),
            int(float(priority)),
            None if comment == "<nil>" else comment,
            None if admin == "<nil>" else admin,
            logs,
        )

    def beat(
        self,
        enforce: bool = True,
        partitions: tuple[str, ...] = ("gpu",),
        age: float = 0,
        seq: int = 7,
    ) -> None:
        write_heartbeat(
            self.heartbeat,
            enforce,
            now=time.time() - age,
            managed_partitions=partitions,
            seq=seq,
        )


@pytest.fixture
def ctld(tmp_path: Path) -> FakeController:
    return FakeController(tmp_path)


GPU_JOB: dict[str, Any] = {"partition": "gpu", "tres_per_node": "gres:gpu:1"}


def test_managed_partition_gpu_job_is_held_and_tagged_in_the_admin_comment(
    ctld: FakeController,
) -> None:
    ctld.beat(seq=41)
    rc, priority, comment, admin, logs = ctld.submit(**GPU_JOB, comment="my run")
    assert (rc, priority, comment) == (0, 0, "my run")  # the owner's comment is untouched
    assert admin == "slurmopt:managed,held,hb=41"
    assert len(logs) == 1 and logs[0].startswith("info: slurmopt: held job")


def test_default_partition_counts_when_none_is_given(ctld: FakeController) -> None:
    ctld.beat()
    assert ctld.submit(tres_per_job="gres:gpu:2")[1:4] == (0, None, "slurmopt:managed,held,hb=7")
    ctld.beat(partitions=("cpu",))
    assert ctld.submit(tres_per_job="gres:gpu:2")[1:4] == (NO_VAL, None, None)


def test_any_listed_partition_counts_and_star_means_all(ctld: FakeController) -> None:
    ctld.beat(partitions=("gpu",))
    assert ctld.submit(partition="cpu,gpu", tres_per_node="gres:gpu:1")[1] == 0
    ctld.beat(partitions=("*",))
    assert ctld.submit(partition="other", tres_per_node="gres:gpu:1")[1] == 0


def test_unmanaged_partition_untagged_job_passes(ctld: FakeController) -> None:
    ctld.beat(partitions=("a100",))
    assert ctld.submit(**GPU_JOB, comment="x")[:4] == (0, NO_VAL, "x", None)
    ctld.beat(partitions=())
    assert ctld.submit(**GPU_JOB)[:4] == (0, NO_VAL, None, None)


def test_tagged_job_is_held_whatever_its_partition(ctld: FakeController) -> None:
    ctld.beat(partitions=())
    rc, priority, comment, admin, _ = ctld.submit(
        partition="cpu",
        tres_per_task="gres:gpu:1",
        min_nodes=4,
        max_nodes=4,
        comment="slurmopt:managed,preemptible,elastic=2:4 | keep | this",
    )
    assert priority == 0
    assert comment == "slurmopt:managed,preemptible,elastic=2:4 | keep | this"
    assert admin == "slurmopt:managed,preemptible,elastic=2:4,held,hb=7"


@pytest.mark.parametrize(
    ("nodes", "tag", "copied"),
    [
        ({"min_nodes": 1, "max_nodes": 1}, "elastic=1:8", "elastic=1:1"),
        ({"min_nodes": 2, "max_nodes": NO_VAL}, "elastic=1:8", "elastic=1:2"),
        ({}, "elastic=1:8", "elastic=1:1"),
        ({"min_nodes": 2, "max_nodes": 2}, "elastic=4:8", None),
        ({"min_nodes": 8, "max_nodes": 8}, "elastic=2:4", "elastic=2:4"),
    ],
)
def test_elastic_range_never_exceeds_the_submitted_node_count(
    ctld: FakeController, nodes: dict[str, Any], tag: str, copied: str | None
) -> None:
    ctld.beat()
    admin = ctld.submit(**GPU_JOB, **nodes, comment=f"slurmopt:managed,{tag}")[3]
    assert admin == "slurmopt:managed" + (f",{copied}" if copied else "") + ",held,hb=7"


def test_tag_is_copied_without_a_hold_when_not_enforcing(ctld: FakeController) -> None:
    ctld.beat(enforce=False)
    rc, priority, comment, admin, _ = ctld.submit(
        **GPU_JOB, comment="slurmopt:managed,preemptible,held,hb=9,ckpt=3@5,color=red"
    )
    assert (rc, priority) == (0, NO_VAL)
    assert admin == "slurmopt:managed,preemptible"  # no hold, forged and unknown fields dropped


def test_an_admins_own_admin_comment_is_kept_after_the_tag(ctld: FakeController) -> None:
    ctld.beat()
    admin = ctld.submit(**GPU_JOB, admin_comment="ticket 42")[3]
    assert admin == "slurmopt:managed,held,hb=7 | ticket 42"


@pytest.mark.parametrize(
    "gpu_fields",
    [
        {"tres_per_node": "gres:gpu:a100:2"},
        {"tres_per_node": "gres:shard:1,gres:gpu"},
        {"tres_per_job": "gres/gpu=4"},
        {"tres_per_task": "gpu:1"},
        {"tres_per_socket": "gres:gpu:1"},
    ],
)
def test_gpu_requests_in_any_form_are_held(
    ctld: FakeController, gpu_fields: dict[str, Any]
) -> None:
    ctld.beat()
    assert ctld.submit(partition="gpu", **gpu_fields)[1] == 0


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"tres_per_node": "gres:shard:2"},
        {"tres_per_node": "gres:gpu:0"},
        {"tres_per_node": "gres:gpudirect:1"},
        {"tres_per_job": "license:matlab:1"},
    ],
)
def test_jobs_without_gpus_pass(ctld: FakeController, fields: dict[str, Any]) -> None:
    ctld.beat()
    assert ctld.submit(partition="gpu", comment="slurmopt:managed", **fields)[1:4] == (
        NO_VAL,
        "slurmopt:managed",
        None,
    )


def test_heterogeneous_job_components_pass(ctld: FakeController) -> None:
    ctld.beat()
    for offset in (0, 1):
        assert ctld.submit(**GPU_JOB, het_job_offset=offset)[1:4] == (NO_VAL, None, None)


def test_user_hold_stays_a_user_hold_and_a_forged_marker_is_dropped(
    ctld: FakeController,
) -> None:
    ctld.beat()
    rc, priority, comment, admin, logs = ctld.submit(
        **GPU_JOB, priority=0, comment="slurmopt:managed,held"
    )
    assert (rc, priority, comment) == (0, 0, "slurmopt:managed,held")
    assert admin == "slurmopt:managed,hb=7"
    assert logs == []


def test_copied_marker_is_not_doubled(ctld: FakeController) -> None:
    ctld.beat()
    admin = ctld.submit(**GPU_JOB, comment="slurmopt:managed,held,preemptible | u")[3]
    assert admin == "slurmopt:managed,preemptible,held,hb=7"


def test_malformed_tag_grants_nothing(ctld: FakeController) -> None:
    ctld.beat(partitions=())
    assert ctld.submit(**GPU_JOB, comment="slurmopt:bogus")[1:4] == (
        NO_VAL,
        "slurmopt:bogus",
        None,
    )


@pytest.mark.parametrize(
    "heartbeat",
    [
        None,
        "",
        "garbage\n",
        "version=1\ntime=notanumber\nenforce=1\n",
        "version=2\ntime={now}\nenforce=1\npartitions=gpu\n",
        "version=1\ntime={now}\nenforce=yes\npartitions=gpu\n",
        "version=1\ntime={now}\nenforce=1\npid=x\npartitions=gpu\n",
        "version=1\ntime={now}\nenforce=1\nseq=1e3\npartitions=gpu\n",
        "version=1\ntime={now}\nenforce=1\npartitions=gpu\nholder=\xe9\n",
        "x" * 5000,
    ],
)
def test_bad_heartbeat_fails_open(ctld: FakeController, heartbeat: str | None) -> None:
    if heartbeat is not None:
        ctld.heartbeat.write_bytes(
            heartbeat.replace("{now}", str(int(time.time()))).encode("latin-1")
        )
    assert ctld.submit(**GPU_JOB)[:4] == (0, NO_VAL, None, None)


def test_stale_or_future_or_observing_heartbeat_fails_open(ctld: FakeController) -> None:
    for age in (MAX_AGE + 5, -(MAX_AGE + 5)):
        ctld.beat(age=age)
        assert ctld.submit(**GPU_JOB)[1] == NO_VAL
    ctld.beat(enforce=False)
    assert ctld.submit(**GPU_JOB)[1] == NO_VAL
    ctld.beat(age=MAX_AGE - 3)
    assert ctld.submit(**GPU_JOB)[1] == 0


def test_heartbeat_with_comments_and_unknown_keys_is_read(ctld: FakeController) -> None:
    ctld.heartbeat.write_text(
        f"# by hand\n\nversion=1\ntime={int(time.time())}\nenforce=1\nfuture=x\n"
        "partitions= gpu , ,a100\n"
    )
    assert ctld.submit(**GPU_JOB)[1] == 0


def test_lua_error_while_reading_the_job_passes_it_through(ctld: FakeController) -> None:
    ctld.beat()
    rc, priority, comment, admin, logs = ctld.submit(**GPU_JOB, explode_on_read="tres_per_node")
    assert (rc, priority, comment, admin) == (0, NO_VAL, None, None)
    assert logs and logs[0].startswith("error: slurmopt: job_submit.lua error, job passed through")


def test_failed_hold_restores_the_admin_comment(ctld: FakeController) -> None:
    ctld.beat()
    rc, priority, comment, admin, _ = ctld.submit(
        **GPU_JOB, comment="mine", admin_comment="theirs", explode_on_write="priority"
    )
    assert (rc, priority, comment, admin) == (0, NO_VAL, "mine", "theirs")


def test_modify_passes_everything(ctld: FakeController) -> None:
    assert LUA is not None
    proc = subprocess.run(
        [
            LUA,
            "-e",
            f"slurm = {{SUCCESS = 0}}; dofile({json.dumps(str(ctld.script))}); "
            "print(slurm_job_modify({}, {}, {}, 0))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.stdout.strip() == "0", proc.stderr


@pytest.mark.parametrize(
    ("field", "copied"),
    [("domain", ",domain"), ("domain=2", ",domain=2"), ("domain=0", ""), ("domain=x", "")],
)
def test_domain_ask_is_copied_only_when_well_formed(
    ctld: FakeController, field: str, copied: str
) -> None:
    ctld.beat(partitions=())
    _, _, _, admin, _ = ctld.submit(
        tres_per_task="gres:gpu:1", min_nodes=4, max_nodes=4, comment=f"slurmopt:managed,{field}"
    )
    assert admin == f"slurmopt:managed{copied},held,hb=7"
