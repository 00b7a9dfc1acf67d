"""The read-only PostgreSQL role of docs/store.md, as written: reads work, writes are refused."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from slurmopt.cli.wiring import open_store_for_reading
from slurmopt.daemon.loop import LEASE_NAME
from slurmopt.store import Store
from tests.unit.test_plugin import _main
from tests.unit.test_status_cli import _cycle

pytestmark = pytest.mark.postgres

DOC = Path(__file__).resolve().parents[2] / "docs" / "store.md"


def _snippet() -> str:
    """The ```sql block of docs/store.md that makes the read-only role."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/store.md should hold one sql block: the read-only role"
    return str(blocks[0])


def test_the_documented_read_only_role_reads_everything_and_writes_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    # A daemon's cycle fills the store: its status, the lease, a plan, a managed job.
    store = Store.open(pg_url)
    _cycle(tmp_path, store, enforce=True)

    url = make_url(pg_url)
    schema = str(url.query["options"]).split("search_path=", 1)[1]  # this test's own schema
    role, password = f"ro_{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    sql = (
        _snippet()
        .replace("slurmopt_ro", role)
        .replace("'change-me'", f"'{password}'")
        .replace("DATABASE slurmopt", f"DATABASE {url.database}")
        .replace("FOR ROLE slurmopt", f"FOR ROLE {url.username}")
        .replace("SCHEMA public", f'SCHEMA "{schema}"')
    )
    with store.engine.begin() as conn:
        for statement in filter(str.strip, sql.split(";")):
            conn.execute(sa.text(statement))
    ro_url = url.set(username=role, password=password).render_as_string(hide_password=False)
    try:
        result = CliRunner().invoke(_main, ["status", "--json", "--db", ro_url])
        report = json.loads(result.stdout)
        assert report["store"] is not None, report
        assert report["lease"]["holder"] == "ctl:42", report
        assert report["daemon"]["holder"] == "ctl:42", report
        reader = open_store_for_reading(ro_url)
        try:
            # What `slurmopt explain` reads.
            assert reader.latest_plan() is not None
            assert reader.latest_decisions_for(9) is not None
            record = reader.managed_job(7)
            assert record is not None and record.state.value == "pinned"
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
                reader.beat("daemon", "intruder", time.time())
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
                reader.acquire_token(LEASE_NAME, "intruder", 10, time.time() + 3600)
        finally:
            reader.close()
    finally:
        with store.engine.begin() as conn:
            for undo in (
                f'ALTER DEFAULT PRIVILEGES FOR ROLE {url.username} IN SCHEMA "{schema}" '
                f'REVOKE SELECT ON TABLES FROM "{role}"',
                f'REVOKE ALL ON ALL TABLES IN SCHEMA "{schema}" FROM "{role}"',
                f'REVOKE ALL ON SCHEMA "{schema}" FROM "{role}"',
                f'REVOKE ALL ON DATABASE {url.database} FROM "{role}"',
                f'DROP ROLE "{role}"',
            ):
                conn.execute(sa.text(undo))
        store.close()
