"""The checkpoint acknowledgement field in the slurmopt tag."""

from __future__ import annotations

import pytest

from slurmopt.tag import TagError, checkpoint_of, parse_comment, with_checkpoint


def test_with_checkpoint_adds_and_replaces_the_field() -> None:
    once = with_checkpoint("slurmopt:managed,elastic=1:2", 5, 100.9)
    assert once == "slurmopt:managed,elastic=1:2,ckpt=5@100"
    twice = with_checkpoint(once + " | note", 9, 200.0)
    assert twice == "slurmopt:managed,elastic=1:2,ckpt=9@200 | note"
    tag, user = parse_comment(twice)  # older readers ignore the field
    assert tag is not None and tag.elastic == (1, 2) and user == "note"


def test_checkpoint_of_reads_only_well_formed_acks() -> None:
    assert checkpoint_of("slurmopt:managed,ckpt=3@17") == (3, 17.0)
    assert checkpoint_of("slurmopt:managed") is None
    assert checkpoint_of("slurmopt:managed,ckpt=x@1") is None
    assert checkpoint_of("ckpt=3@17") is None
    assert checkpoint_of("slurmopt:bogus,ckpt=3@17") is None
    assert checkpoint_of(None) is None


def test_with_checkpoint_refuses_untagged_or_bad_input() -> None:
    with pytest.raises(TagError):
        with_checkpoint("plain comment", 1, 1.0)
    with pytest.raises(ValueError):
        with_checkpoint("slurmopt:managed", -1, 1.0)
