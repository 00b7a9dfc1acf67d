"""Leaf choice, constraint parsing and the FGD rise used by the planner."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest

from slurmopt.policy.fragmentation import JobShape, shape_unusable_gpus
from slurmopt.policy.placement import choose_leaves, fgd_increase, parse_constraint

# Free whole nodes per leaf, from the planner's worked example.
EXAMPLE = {"leafA": 3, "leafB": 5, "leafC": 2, "leafD": 6}
ONE_GROUP = dict.fromkeys(EXAMPLE, "spine")


def test_five_nodes_take_the_leaf_with_exactly_five() -> None:
    choice = choose_leaves(EXAMPLE, 5, ONE_GROUP, single_leaf=True)
    assert choice is not None
    assert choice.take == (("leafB", 5),)
    assert choice.left_over == 0


def test_seven_nodes_span_the_pair_that_fits_exactly() -> None:
    choice = choose_leaves(EXAMPLE, 7, ONE_GROUP, single_leaf=False)
    assert choice is not None
    assert choice.take == (("leafB", 5), ("leafC", 2))
    assert choice.left_over == 0


def test_seven_nodes_refused_when_one_leaf_is_required() -> None:
    assert choose_leaves(EXAMPLE, 7, ONE_GROUP, single_leaf=True) is None


def test_twelve_nodes_take_the_largest_leaf_whole_then_the_best_pair() -> None:
    # Three leaves are needed (6+5 < 12).  leafD is taken; 6 more from 5+2 (one spare)
    # beats 5+3 (two spare).  The spare node stays on the largest chosen leaf.
    choice = choose_leaves(EXAMPLE, 12, ONE_GROUP, single_leaf=False)
    assert choice is not None
    assert dict(choice.take) == {"leafB": 5, "leafC": 2, "leafD": 5}
    assert choice.left_over == 1


def test_broken_domains_decide_only_between_equal_fits() -> None:
    def breaks_on_b(take: Sequence[tuple[str, int]]) -> int:
        return sum(1 for leaf, _ in take if leaf == "leafB")

    # Five nodes: leafB fits exactly and wins although it breaks a domain.
    choice = choose_leaves(EXAMPLE, 5, ONE_GROUP, single_leaf=True, breaks=breaks_on_b)
    assert choice is not None and choice.take == (("leafB", 5),)
    # Two equal leaves: the one that breaks nothing wins over the first by name.
    equal = {"leafA": 4, "leafB": 4, "leafC": 4}
    groups = dict.fromkeys(equal, "spine")

    def breaks_on_a(take: Sequence[tuple[str, int]]) -> int:
        return sum(1 for leaf, _ in take if leaf == "leafA")

    by_name = choose_leaves(equal, 3, groups, single_leaf=True)
    assert by_name is not None and by_name.take == (("leafA", 3),)
    one = choose_leaves(equal, 3, groups, single_leaf=True, breaks=breaks_on_a)
    assert one is not None and one.take == (("leafB", 3),)
    two = choose_leaves(equal, 6, groups, single_leaf=False, breaks=breaks_on_a)
    assert two is not None and two.leaves == ("leafB", "leafC")


def test_equal_fit_keeps_the_bigger_leaf_free() -> None:
    # 6+2 and 5+3 both fit 8 exactly; 5+3 leaves the 6-node leaf whole.
    choice = choose_leaves(EXAMPLE, 8, ONE_GROUP, single_leaf=False)
    assert choice is not None
    assert choice.leaves == ("leafA", "leafB")


def test_more_than_free_is_none() -> None:
    assert choose_leaves(EXAMPLE, 17, ONE_GROUP, single_leaf=False) is None


def test_leaves_of_one_group_beat_a_tighter_cross_group_pair() -> None:
    free = {"a1": 4, "a2": 3, "b1": 2}
    groups = {"a1": "podA", "a2": "podA", "b1": "podB"}
    choice = choose_leaves(free, 6, groups, single_leaf=False)
    assert choice is not None
    assert choice.leaves == ("a1", "a2")
    assert choice.left_over == 1


def test_constraint_forms() -> None:
    both = parse_constraint("a100&ib")
    either = parse_constraint("a100|h100")
    assert both.matches(frozenset({"a100", "ib", "x"}))
    assert not both.matches(frozenset({"a100"}))
    assert either.matches(frozenset({"h100"}))
    assert not either.matches(frozenset({"v100"}))
    assert parse_constraint("").matches(frozenset())
    for bad in ("a&b|c", "[a|b]", "a*2", "(a)"):
        with pytest.raises(ValueError):
            parse_constraint(bad)


def test_fgd_rise_matches_the_fragmentation_definition() -> None:
    rng = random.Random(7)
    shapes = [JobShape(1, 1, 2.0), JobShape(1, 4, 1.0), JobShape(2, 8, 0.5), JobShape(1, 3, 1.0)]
    for _ in range(200):
        hist = Counter({f: rng.randint(1, 3) for f in rng.sample(range(1, 9), rng.randint(1, 5))})
        gpus = rng.randint(1, 8)
        rise = fgd_increase(hist, shapes, gpus)
        assert set(rise) == {f for f in hist if f >= gpus}
        for f, value in rise.items():
            after = Counter(hist)
            after[f] -= 1
            if after[f] == 0:
                del after[f]
            if f - gpus > 0:
                after[f - gpus] += 1
            expected = sum(
                s.weight * (shape_unusable_gpus(after, s) - shape_unusable_gpus(hist, s))
                for s in shapes
            )
            assert value == pytest.approx(expected)
