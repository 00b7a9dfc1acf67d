"""Hostlist expansion: ClusterShell's syntax, a cap on the names, malformed ranges refused."""

from __future__ import annotations

import time

import pytest

from slurmopt.hostlist import MAX_NAMES, HostlistError, expand, fold


def test_ranges_steps_and_several_brackets_expand() -> None:
    assert expand("gpu[001-003]") == ["gpu001", "gpu002", "gpu003"]
    assert expand("n[1-4/2],m1") == ["m1", "n1", "n3"]
    assert len(expand("r[1-2]-n[01-04]")) == 8
    assert expand(None) == [] and expand("(null)") == []
    assert fold(["gpu001", "gpu002"]) == "gpu[001-002]"


@pytest.mark.parametrize("expr", ["n[0-99999999]", "n[1-1000]x[1-1001]", "a[0-999999],b[0-1]"])
def test_more_than_the_cap_is_refused_before_anything_is_built(expr: str) -> None:
    began = time.perf_counter()
    with pytest.raises(HostlistError, match=f"names more than {MAX_NAMES} hosts"):
        expand(expr)
    assert time.perf_counter() - began < 1.0


def test_a_lower_limit_is_kept() -> None:
    with pytest.raises(HostlistError, match="more than 3 hosts"):
        expand("n[1-4]", limit=3)


@pytest.mark.parametrize("expr", ["n[1-2-3]", "n[5-1]", "n[]", "n[a]", "n[1-2", "n[[1]]"])
def test_malformed_ranges_are_one_error(expr: str) -> None:
    with pytest.raises(HostlistError, match="bad hostlist"):
        expand(expr)
