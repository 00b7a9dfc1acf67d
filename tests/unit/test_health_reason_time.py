"""Slurm's reason time, which orders the node agent's drains, parsed from every release's JSON.

The captures drained gpu008 (idle) and gpu003 (busy) by hand, so both carry
the time slurmctld stamped; nodes never given a reason carry 0, read as None.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmopt.errors import SlurmResponseError
from slurmopt.model import Node
from slurmopt.slurm.parse import parse_node_records

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm-json"


def nodes(path: str) -> dict[str, Node]:
    doc = json.loads((CAPTURES / path).read_text())
    return {node.name: node for node, _ in parse_node_records(doc, path)}


@pytest.mark.parametrize(
    ("path", "stamp"),
    [
        ("22.05/sinfo.json", 1796216901),  # per node, plain numbers (v0.0.38)
        ("24.11/scontrol_show_nodes.json", 1796216989),  # per node, {set, number} (v0.0.42)
        ("24.11/sinfo.json", 1796216989),  # grouped records: reason.time
        ("24.11/alt_data_parser/scontrol_show_nodes.v0.0.40.json", 1796216989),
        ("26.05/scontrol_show_nodes.json", 1796217007),  # v0.0.45
        ("26.05/sinfo.json", 1796217007),
    ],
)
def test_reason_time_of_every_release(path: str, stamp: int) -> None:
    parsed = nodes(path)
    assert parsed["gpu008"].reason == "maint: bad gpu"
    assert parsed["gpu008"].reason_time == float(stamp)
    assert parsed["gpu003"].reason_time == float(stamp)
    assert parsed["gpu001"].reason == "" and parsed["gpu001"].reason_time is None


def test_a_malformed_reason_time_fails_the_document() -> None:
    doc = json.loads((CAPTURES / "22.05/sinfo.json").read_text())
    doc["nodes"][0]["reason_changed_at"] = "yesterday"
    with pytest.raises(SlurmResponseError, match="reason_changed_at"):
        parse_node_records(doc, "sinfo --json")
    grouped = json.loads((CAPTURES / "26.05/sinfo.json").read_text())
    grouped["sinfo"][0]["reason"]["time"] = [1]
    with pytest.raises(SlurmResponseError, match="reason field 'time'"):
        parse_node_records(grouped, "sinfo --json")
