"""The marker in a job's comment that hands the job to slurmopt: pure, no I/O.

``slurmopt submit`` writes the tag into the job's comment, the free-text
field every Slurm release keeps and ``sbatch`` sets.  The owner can edit
that field at any time, so it grants nothing: the job-submit plugin copies
the tag at submission into the job's *admin comment*, which only
administrators, SlurmUser and the plugin can write, and slurmopt acts only
on the tag it finds there (``held`` and ``hb=SEQ`` are added by the plugin;
slurmopt's own status text follows the separator).  Both fields share one
format, keeping the user's own text after the tag::

    slurmopt:managed[,preemptible][,elastic=MIN:MAX][,template=NAME][,domain[=SEGMENT]]
             [,ckpt=STEP@UNIX][ | USER COMMENT]

``ckpt=STEP@UNIX`` is written by the running job itself (``scontrol update
JobId=$SLURM_JOB_ID Comment=...``) to acknowledge a finished checkpoint;
see ``docs/preemption.md``.

Readers (the daemon, the Lua job-submit plugin) must ignore fields they do
not know, so fields can be added without breaking older readers.  See
``docs/submit.md``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

PREFIX = "slurmopt:"
SEPARATOR = " | "
MANAGED = "managed"

_FIELD = re.compile(r"[a-z][a-z0-9_-]*(=[^,\s|]+)?")
_TEMPLATE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ELASTIC = re.compile(r"(\d+):(\d+)")
_CHECKPOINT = re.compile(r"(\d+)@(\d+)")
_SEGMENT = re.compile(r"[1-9]\d{0,5}")
#: Tag field: the job's nodes in one NVLink domain (``domain``), or in groups of SEGMENT
#: nodes each inside one (``domain=SEGMENT``).
DOMAIN_FIELD = "domain"
CHECKPOINT_FIELD = "ckpt"
#: Admin-comment field: the job-submit plugin held this job for slurmopt at submission.
HELD_FIELD = "held"
#: Admin-comment field: the heartbeat sequence the plugin read when it tagged the job.
HEARTBEAT_FIELD = "hb"
_SEQUENCE = re.compile(r"\d{1,19}")


class TagError(ValueError):
    """A comment that claims to be slurmopt's (``slurmopt:``) but does not parse."""


@dataclass(frozen=True, slots=True)
class JobTag:
    """What slurmopt was asked to do with a job, as carried in its comment."""

    preemptible: bool = False
    elastic: tuple[int, int] | None = None
    template: str | None = None
    #: None: no domain asked; 0: every node in one NVLink domain; S: groups of S nodes, each
    #: inside one domain.  A restriction on the job's own placement, so users may ask it.
    domain: int | None = None

    def fields(self) -> list[str]:
        """The comma-separated fields, in their fixed order."""
        out = [MANAGED]
        if self.preemptible:
            out.append("preemptible")
        if self.elastic is not None:
            out.append(f"elastic={self.elastic[0]}:{self.elastic[1]}")
        if self.template is not None:
            out.append(f"template={self.template}")
        if self.domain is not None:
            out.append(DOMAIN_FIELD + (f"={self.domain}" if self.domain else ""))
        return out


def parse_elastic(text: str) -> tuple[int, int]:
    """``"MIN:MAX"`` as two node counts with ``1 <= MIN <= MAX``; ValueError says what is wrong."""
    match = _ELASTIC.fullmatch(text)
    if not match:
        raise ValueError(f"--elastic needs MIN:MAX (two whole numbers), got {text!r}")
    low, high = int(match[1]), int(match[2])
    if low < 1:
        raise ValueError(f"--elastic MIN must be at least 1, got {text!r}")
    if low > high:
        raise ValueError(f"--elastic MIN must not exceed MAX, got {text!r}")
    return low, high


def parse_segment(text: str | None) -> int:
    """``--nvlink-domain[=SEGMENT]``'s value: 0 for none given, else SEGMENT nodes (1 or more)."""
    if text is None:
        return 0
    if not _SEGMENT.fullmatch(text):
        raise ValueError(f"--nvlink-domain takes a segment size of 1 or more nodes, got {text!r}")
    return int(text)


def check_template_name(name: str) -> str:
    """A template name that fits in the tag (no commas, spaces or pipes)."""
    if not _TEMPLATE_NAME.fullmatch(name):
        raise ValueError(f"bad template name {name!r} (letters, digits, '_', '.', '-')")
    return name


def format_comment(tag: JobTag, user_comment: str | None = None) -> str:
    """The job comment: the tag, then the user's own comment (if any) after ``" | "``.

    A user comment that is itself a slurmopt comment (a job resubmitted with
    the comment copied from ``scontrol show job``) loses its old tag, so a
    job never carries two.
    """
    text = f"{PREFIX}{','.join(tag.fields())}"
    if user_comment:
        try:
            _, user_comment = parse_comment(user_comment)
        except TagError:
            pass
    if user_comment:
        text += SEPARATOR + user_comment
    return text


def parse_comment(comment: str | None) -> tuple[JobTag | None, str | None]:
    """Split a job comment into slurmopt's tag (None if untagged) and the user's comment.

    Raises :class:`TagError` when the comment starts with ``slurmopt:`` but
    its tag is malformed; readers treat such a job as not managed.
    """
    if not comment or not comment.startswith(PREFIX):
        return None, comment or None
    body, sep, user = comment[len(PREFIX) :].partition(SEPARATOR)
    fields = body.split(",")
    if fields[0] != MANAGED:
        raise TagError(f"slurmopt tag must start with {PREFIX}{MANAGED}: {comment!r}")
    preemptible = False
    elastic: tuple[int, int] | None = None
    template: str | None = None
    domain: int | None = None
    for field in fields[1:]:
        if not _FIELD.fullmatch(field):
            raise TagError(f"bad field {field!r} in slurmopt tag {comment!r}")
        key, _, value = field.partition("=")
        try:
            if key == "preemptible":
                preemptible = True
            elif key == "elastic":
                elastic = parse_elastic(value)
            elif key == "template":
                template = check_template_name(value)
            elif key == DOMAIN_FIELD:
                domain = parse_segment(value if value else None)
        except ValueError as exc:
            raise TagError(f"bad field {field!r} in slurmopt tag: {exc}") from None
    tag = JobTag(preemptible=preemptible, elastic=elastic, template=template, domain=domain)
    return tag, (user if sep and user else None)


@functools.lru_cache(maxsize=4096)
def _well_formed_tag(comment: str) -> JobTag | None:
    """The comment's tag; None when untagged or malformed (cached: asked every job, every pass)."""
    try:
        tag, _ = parse_comment(comment)
    except TagError:
        return None
    return tag


def is_preemptible_comment(comment: str) -> bool:
    """A well-formed slurmopt tag with ``preemptible``."""
    if "preemptible" not in comment:
        return False
    tag = _well_formed_tag(comment)
    return tag is not None and tag.preemptible


def elastic_range(comment: str) -> tuple[int, int] | None:
    """``(MIN, MAX)`` nodes of a well-formed tag with ``elastic=MIN:MAX``, else None."""
    if "elastic=" not in comment:
        return None
    tag = _well_formed_tag(comment)
    return None if tag is None else tag.elastic


def domain_ask(comment: str) -> int | None:
    """A well-formed tag's ``domain[=SEGMENT]``: 0 for the whole job, SEGMENT, else None."""
    if DOMAIN_FIELD not in comment:
        return None
    tag = _well_formed_tag(comment)
    return None if tag is None else tag.domain


def with_checkpoint(comment: str, step: int, at: float) -> str:
    """``comment`` with its ``ckpt=STEP@UNIX`` field set (replacing an older one).

    The job calls this to acknowledge a checkpoint; every other field and
    the user's comment stay as they were.  Raises :class:`TagError` when the
    comment carries no slurmopt tag (an untagged job has nobody to tell).
    """
    if step < 0:
        raise ValueError(f"checkpoint step must be 0 or more, got {step}")
    if not comment.startswith(PREFIX):
        raise TagError(f"not a slurmopt comment: {comment!r}")
    parse_comment(comment)  # refuse to rewrite a malformed tag
    body, sep, user = comment[len(PREFIX) :].partition(SEPARATOR)
    kept = [f for f in body.split(",") if f.partition("=")[0] != CHECKPOINT_FIELD]
    kept.append(f"{CHECKPOINT_FIELD}={step}@{int(at)}")
    return PREFIX + ",".join(kept) + (SEPARATOR + user if sep else "")


def _tag_fields(comment: str | None) -> list[str] | None:
    """The fields of a well-formed tag (``managed`` first), else None."""
    if not comment or not comment.startswith(PREFIX) or _well_formed_tag(comment) is None:
        return None
    return comment[len(PREFIX) :].partition(SEPARATOR)[0].split(",")


def has_field(comment: str | None, name: str) -> bool:
    """The comment's well-formed tag carries the bare field ``name`` (e.g. ``held``)."""
    return name in (_tag_fields(comment) or ())


def held_mark(admin_comment: str | None) -> bool:
    """The job-submit plugin put its hold on (``held`` in the *admin* comment's tag).

    The plugin writes the mark only into the admin comment and never copies
    one from the owner's comment, so a user's own ``--hold`` never carries it.
    """
    return has_field(admin_comment, HELD_FIELD)


def heartbeat_stamp(comment: str | None) -> int | None:
    """The ``hb=SEQ`` the job-submit plugin stamped into a job's admin comment, or None."""
    for field in _tag_fields(comment) or ():
        key, _, value = field.partition("=")
        if key == HEARTBEAT_FIELD and _SEQUENCE.fullmatch(value):
            return int(value)
    return None


def with_status(admin_comment: str, status: str) -> str:
    """The admin comment with its text after the tag replaced by ``status``.

    The tag (what the plugin copied at submission: managed, preemptible,
    elastic, held, hb) is what slurmopt trusts, so it is kept verbatim; an
    admin comment without a well-formed tag is replaced by ``status`` alone.
    """
    if _tag_fields(admin_comment) is None:
        return status
    body = admin_comment.partition(SEPARATOR)[0]
    return body + (SEPARATOR + status if status else "")


def checkpoint_of(comment: str | None) -> tuple[int, float] | None:
    """The acknowledged checkpoint ``(step, unix seconds)`` in a comment, or None.

    A malformed tag or ``ckpt`` field reads as no acknowledgement: the
    daemon then waits (and gives up at the grace time) rather than requeue
    a job on a checkpoint it cannot trust.
    """
    if not comment or not comment.startswith(PREFIX):
        return None
    try:
        parse_comment(comment)
    except TagError:
        return None
    body = comment[len(PREFIX) :].partition(SEPARATOR)[0]
    for field in body.split(","):
        key, _, value = field.partition("=")
        if key == CHECKPOINT_FIELD:
            match = _CHECKPOINT.fullmatch(value)
            return (int(match[1]), float(match[2])) if match else None
    return None
