"""The one JSON emitter prints strict JSON: a NaN or infinity fails as one line."""

from __future__ import annotations

import json
import math

import pytest

from slurmopt.cli.common import emit_json
from slurmopt.errors import SlurmoptError


def test_plain_values_print_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    emit_json({"a": 1.5, "b": None, "c": [1, "x"]})
    assert json.loads(capsys.readouterr().out) == {"a": 1.5, "b": None, "c": [1, "x"]}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_fail_instead_of_printing_invalid_json(
    bad: float, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SlurmoptError, match="cannot print JSON: Out of range float"):
        emit_json({"value": bad})
    assert capsys.readouterr().out == ""
