"""``slurmopt submit``: turn an sbatch command line into a tagged one, without I/O.

The builder takes the words given to ``slurmopt submit`` and the text of
the job script, and returns the exact argument list for the real
``sbatch``: the user's own options and script untouched and in order,
slurmopt's options (``--template``, ``--preemptible``, ``--elastic``)
taken out, and the job comment replaced by one that carries the slurmopt
tag in front of the user's comment.  Keeping this pure is what lets the
unit tests pin the argument list against golden files; running sbatch is
the command's job (:mod:`slurmopt.cli.submit`).

``--preemptible`` and ``--elastic`` can also sit in the script, on ``#SOPT``
lines read by the same rules as ``#SBATCH`` lines: sbatch ignores those,
where it would reject ``#SBATCH --elastic`` (and ``#SLURMOPT``: sbatch
refuses every line that starts with ``#SLURM`` as a misspelt ``#SBATCH``).
``--template`` cannot: a template replaces the batch script, so naming one
inside a batch script would throw away that script's ``#SBATCH`` lines.
An unmatched quote on either kind of line is an error naming the line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from slurmopt.errors import UsageError
from slurmopt.submit.directives import (
    DirectiveError,
    Option,
    ParsedArgs,
    UnknownOption,
    join_tokens,
    script_directives,
    split_args,
)
from slurmopt.submit.options import NO_OPTIONS, Arity, OptionTable, newest_table, table_for
from slurmopt.tag import (
    JobTag,
    check_template_name,
    format_comment,
    parse_elastic,
    parse_segment,
)
from slurmopt.templates import DEFAULT_SIGNAL, SHIPPED, TemplateValues, available, render

#: slurmopt's own options: recognised only when spelled in full, never sent to sbatch.
OWN_OPTIONS: dict[str, Arity] = {
    "template": Arity.REQUIRED,
    "preemptible": Arity.NONE,
    "elastic": Arity.REQUIRED,
    "nvlink-domain": Arity.OPTIONAL,
}

#: The script prefix for slurmopt's own options (sbatch treats these lines as comments).
OWN_PREFIX = "#SOPT"

#: Job templates slurmopt ships (a site adds more in ``$SLURMOPT_TEMPLATE_DIR``).
TEMPLATES: frozenset[str] = frozenset(SHIPPED)

#: Options after which sbatch only prints something and submits nothing.
_INFO_ONLY = frozenset({"usage", "version"})


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """The job as sbatch will see it, as far as slurmopt cares: directives, then command line.

    Values are sbatch's strings, unparsed (``nodes="2-4"``); ``None`` means
    not given.  ``SBATCH_*`` environment variables are not folded in.
    """

    script: str | None = None
    script_args: tuple[str, ...] = ()
    wrap: str | None = None
    partition: str | None = None
    nodes: str | None = None
    gres: str | None = None
    gpus_per_node: str | None = None
    gpus: str | None = None
    gpus_per_task: str | None = None
    ntasks: str | None = None
    ntasks_per_node: str | None = None
    time: str | None = None
    job_name: str | None = None
    comment: str | None = None
    hold: bool = False
    parsable: bool = False
    tag: JobTag = field(default_factory=JobTag)


@dataclass(frozen=True, slots=True)
class Submission:
    """What to run: ``sbatch`` with ``args``; the script on stdin when ``reads_stdin``."""

    args: list[str]
    request: SubmitRequest
    reads_stdin: bool = False
    info_only: bool = False
    #: The rendered batch script (``--template``), to give sbatch on stdin.
    script_text: str | None = None

    @property
    def comment(self) -> str:
        return format_comment(self.request.tag, self.request.comment)


def parse_command_line(args: Sequence[str], table: OptionTable | None = None) -> ParsedArgs:
    """Split ``slurmopt submit``'s words as sbatch ``table.release`` would, with slurmopt's own.

    An option that release's sbatch lacks is a :class:`UsageError` naming
    it: guessing whether it takes a value would move the script.
    """
    sbatch = table or newest_table()
    try:
        return split_args(args, sbatch, extra_long=OWN_OPTIONS, exact_only=OWN_OPTIONS)
    except UnknownOption as exc:
        raise unknown_option_error(exc, sbatch) from None


def unknown_option_error(exc: UnknownOption, table: OptionTable, where: str = "") -> UsageError:
    """The one-line error for a word that is no option of this sbatch (``where``: a script line)."""
    if exc.matches:
        could = ", ".join(f"--{name}" for name in exc.matches)
        return UsageError(f"{where}ambiguous sbatch option {exc.word!r}: {could}")
    spelled = exc.word.removeprefix("--")
    own = [n for n in OWN_OPTIONS if exc.word.startswith("--") and n.startswith(spelled)]
    hint = f" (slurmopt's --{own[0]} is spelled in full)" if own else ""
    return UsageError(
        f"{where}unknown sbatch option {exc.word!r} for Slurm {table.release}{hint}"
    )


def wants_help(parsed: ParsedArgs) -> bool:
    """``-h``/``--help`` among the options (not among the script's arguments)."""
    return any(opt.name == "help" for opt in parsed.options)


def is_info_only(parsed: ParsedArgs) -> bool:
    """``--usage`` or ``--version``: sbatch prints and exits, so no script is read or tagged."""
    return any(opt.name in _INFO_ONLY for opt in parsed.options)


def reads_stdin(parsed: ParsedArgs) -> bool:
    """sbatch takes the script from stdin when there is neither a script nor ``--wrap``."""
    if parsed.script is not None or is_info_only(parsed):
        return False
    return not any(opt.name == "wrap" and opt.value is not None for opt in parsed.options)


def template_of(parsed: ParsedArgs) -> str | None:
    """The ``--template NAME`` given on the command line, if any (the last one wins)."""
    names = [o.value for o in parsed.options if o.name == "template" and o.value]
    return names[-1] if names else None


_GPU_COUNT = re.compile(r"(?:[A-Za-z0-9_.-]+:)?(\d+)")


def _gpu_count(text: str, option: str) -> int:
    """``N`` or ``TYPE:N`` (``--gpus-per-node=a100:4``) as a count; UsageError otherwise."""
    match = _GPU_COUNT.fullmatch(text.strip())
    if not match:
        raise UsageError(f"{option}={text}: expected a GPU count, optionally typed (a100:4)")
    return int(match[1])


def _gres_gpus(text: str) -> int | None:
    """GPUs per node in a ``--gres`` list (``gpu:4``, ``gpu:a100:4``, ``gpu``); None if none."""
    total = None
    for entry in text.split(","):
        parts = entry.strip().split(":")
        if parts[0].removeprefix("gres/") != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        if not count.isdigit():
            count = "1" if len(parts) == 2 else count  # gpu:a100 means one GPU of that type
        if not count.isdigit():
            raise UsageError(f"--gres={text}: cannot read the GPU count of {entry.strip()!r}")
        total = (total or 0) + int(count)
    return total


def gpus_per_node(request: SubmitRequest) -> int | None:
    """GPUs per node however sbatch was told: the templates' process count per node.

    Read from ``--gpus-per-node``, ``--gres=gpu[:type]:N``, ``--gpus/-G`` with
    ``-N`` (an even share of the total), or ``--gpus-per-task`` with
    ``--ntasks-per-node`` (or ``--ntasks`` over ``-N``).  Two spellings that
    give different counts are a UsageError naming both; None when no GPU is
    asked for.
    """
    nodes = _count(request.nodes, 1)
    found: list[tuple[str, int]] = []
    if request.gpus_per_node:
        found.append(
            ("--gpus-per-node", _gpu_count(request.gpus_per_node, "--gpus-per-node"))
        )
    if request.gres:
        gres = _gres_gpus(request.gres)
        if gres is not None:
            found.append(("--gres", gres))
    if request.gpus:
        total = _gpu_count(request.gpus, "--gpus")
        if total % nodes:
            raise UsageError(
                f"--gpus={request.gpus} over {nodes} nodes is no whole number per node: "
                "give --gpus-per-node"
            )
        found.append(("--gpus", total // nodes))
    if request.gpus_per_task:
        per_task = _gpu_count(request.gpus_per_task, "--gpus-per-task")
        if request.ntasks_per_node:
            tasks = _count(request.ntasks_per_node, 1)
        elif request.ntasks and _count(request.ntasks, 1) % nodes == 0:
            tasks = _count(request.ntasks, 1) // nodes
        else:
            tasks = 1
        found.append(("--gpus-per-task", per_task * tasks))
    counts = {count for _, count in found}
    if len(counts) > 1:
        said = ", ".join(f"{name} gives {count}" for name, count in found)
        raise UsageError(f"GPUs per node disagree: {said}")
    return found[0][1] if found else None


def _count(text: str | None, default: int) -> int:
    """The first number in an sbatch count (``"2"``, ``"1-4"``, ``"gpu:4"``), or ``default``."""
    if not text:
        return default
    digits = "".join(c if c.isdigit() else " " for c in text.rsplit(":", 1)[-1]).split()
    return int(digits[-1]) if digits else default


def _templated(
    parsed: ParsedArgs, request: SubmitRequest, kept: list[Option], signal: str
) -> Submission:
    """sbatch's options unchanged, the rendered template as the script on stdin.

    The command line's script and its arguments are the program the
    template runs (``nccl-allreduce-bench`` takes them as benchmark options).
    """
    tag = request.tag
    assert tag.template is not None
    if parsed.script is None and tag.template != "nccl-allreduce-bench":
        raise UsageError(f"--template {tag.template} needs a program to run")
    high = _count(request.nodes, 1)
    low, high = tag.elastic if tag.elastic is not None else (high, high)
    program_args = list(parsed.script_args)
    program = parsed.script or ""
    if tag.template == "nccl-allreduce-bench" and parsed.script is not None:
        program_args.insert(0, parsed.script)
    values = TemplateValues(
        program=program,
        program_args=program_args,
        min_nodes=low,
        max_nodes=high,
        nproc_per_node=gpus_per_node(request) or 1,
        signal=signal,
    )
    text = render(tag.template, values)
    args = [f"--comment={format_comment(tag, request.comment)}", *join_tokens(kept)]
    return Submission(args=args, request=request, reads_stdin=True, script_text=text)


def build_submission(
    args: Sequence[str],
    script_text: str | None = None,
    script_name: str = "-",
    signal: str = DEFAULT_SIGNAL,
    table: OptionTable | None = None,
) -> Submission:
    """The sbatch argument list for ``slurmopt submit ARGS``, given the script's text.

    ``script_text`` is None when there is no script to read (``--wrap``, or
    a script sbatch will fail to open with its own message).  ``signal`` is
    the site's preemption signal (``preempt_signal``), which a template
    traps: the one the daemon sends.  ``table`` is the options of the sbatch
    that will run (default: the newest release's).  Raises
    :class:`UsageError` for slurmopt's own bad options and for an option
    that sbatch lacks; sbatch's option values are never judged here, sbatch
    does that.
    """
    sbatch = table or newest_table()
    parsed = parse_command_line(args, sbatch)
    info_only = is_info_only(parsed)
    script_opts: list[Option] = []
    own_script_opts: list[Option] = []
    if script_text is not None and not info_only:
        script_opts, own_script_opts = _script_options(script_text, script_name, sbatch)

    first = [o for o in parsed.options if o.component == 0]
    own_cli = [o for o in parsed.options if o.name in OWN_OPTIONS]
    tag = _own_options(own_script_opts + own_cli, script_name)
    request = _merge(script_opts + first, tag, parsed)

    kept = [
        o
        for o in parsed.options
        if o.name not in OWN_OPTIONS
        and not (o.component == 0 and o.name == "comment" and o.value is not None)
    ]
    if request.tag.template is not None and not info_only:
        return _templated(parsed, request, kept, signal)
    sbatch_args = join_tokens(kept) + list(parsed.rest)
    if not info_only:
        sbatch_args.insert(0, f"--comment={format_comment(request.tag, request.comment)}")
    return Submission(
        args=sbatch_args,
        request=request,
        reads_stdin=reads_stdin(parsed),
        info_only=info_only,
    )


def _script_options(
    text: str, script_name: str, table: OptionTable
) -> tuple[list[Option], list[Option]]:
    """The script's sbatch options, and its slurmopt options (from ``#SOPT`` lines)."""
    try:
        sbatch_lines = script_directives(text, "#SBATCH")
        own_lines = script_directives(text, OWN_PREFIX)
    except DirectiveError as exc:  # skipping the line would drop the options on it unseen
        raise UsageError(f"{script_name}:{exc.lineno}: {exc}") from None
    sbatch_opts: list[Option] = []
    for line in sbatch_lines:
        where = f"{script_name}:{line.lineno}: "
        try:
            split = split_args(line.words, table, extra_long=OWN_OPTIONS, exact_only=OWN_OPTIONS)
        except UnknownOption as exc:
            raise unknown_option_error(exc, table, where) from None
        for opt in split.options:
            if opt.name in OWN_OPTIONS:
                shown = " ".join(opt.tokens)
                raise UsageError(
                    f"{script_name}:{line.lineno}: {shown} is a slurmopt option, which sbatch "
                    f"rejects on #SBATCH lines; write it as '{OWN_PREFIX} {shown}'"
                )
            sbatch_opts.append(opt)
    own_opts: list[Option] = []
    for line in own_lines:
        try:
            split = split_args(line.words, NO_OPTIONS, OWN_OPTIONS, exact_only=OWN_OPTIONS)
            stray = split.rest[0] if split.rest else None
        except UnknownOption as exc:
            stray = exc.word
        if stray is not None:
            word = _with_value(stray, line.words)
            raise UsageError(
                f"{script_name}:{line.lineno}: {word!r} is not a slurmopt option "
                f"({OWN_PREFIX} lines take only --preemptible, --elastic, --nvlink-domain)"
            )
        template = next((o for o in split.options if o.name == "template"), None)
        if template is not None:
            # The template renders the batch script: from inside one it would drop the
            # script's #SBATCH lines and run the script itself as the program.
            raise UsageError(
                f"{script_name}:{line.lineno}: {' '.join(template.tokens)} cannot be a "
                f"{OWN_PREFIX} line: a template replaces the batch script; give it on the "
                "command line with your program (slurmopt submit --template NAME ... train.py)"
            )
        own_opts.extend(split.options)
    return sbatch_opts, own_opts


def _with_value(word: str, words: Sequence[str]) -> str:
    """``word`` and the value after it on the line (``-N 2``): the error shows what was written."""
    if word not in words:
        return word
    after = words[list(words).index(word) + 1 :]
    if word.startswith("-") and "=" not in word and after and not after[0].startswith("-"):
        return f"{word} {after[0]}"
    return word


def _own_options(options: Sequence[Option], script_name: str) -> JobTag:
    """slurmopt's options, in order (script first, so the command line wins), as a tag."""
    preemptible = False
    elastic: tuple[int, int] | None = None
    template: str | None = None
    domain: int | None = None
    for opt in options:
        if opt.name == "preemptible":
            if opt.value is not None:
                raise UsageError(f"--preemptible takes no value, got {opt.tokens[0]!r}")
            preemptible = True
        elif opt.name == "nvlink-domain":
            try:
                domain = parse_segment(opt.value)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        elif opt.value is None:
            raise UsageError(f"--{opt.name} needs a value")
        elif opt.name == "elastic":
            try:
                elastic = parse_elastic(opt.value)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        elif opt.name == "template":
            try:
                template = check_template_name(opt.value)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    if template is not None and template not in available():
        raise UsageError(f"unknown template {template!r}")
    return JobTag(preemptible=preemptible, elastic=elastic, template=template, domain=domain)


_FIELDS = {
    "partition": "partition",
    "nodes": "nodes",
    "gres": "gres",
    "gpus-per-node": "gpus_per_node",
    "gpus": "gpus",
    "gpus-per-task": "gpus_per_task",
    "ntasks": "ntasks",
    "ntasks-per-node": "ntasks_per_node",
    "time": "time",
    "job-name": "job_name",
    "comment": "comment",
    "wrap": "wrap",
}


def _merge(options: Sequence[Option], tag: JobTag, parsed: ParsedArgs) -> SubmitRequest:
    """Fold options in order, last one winning, as sbatch applies them."""
    values: dict[str, str] = {}
    hold = parsable = False
    for opt in options:
        if opt.name in _FIELDS and opt.value is not None:
            values[_FIELDS[opt.name]] = opt.value
        elif opt.name == "hold":
            hold = True
        elif opt.name == "parsable":
            parsable = True
    return SubmitRequest(
        script=parsed.script,
        script_args=parsed.script_args,
        wrap=values.get("wrap"),
        partition=values.get("partition"),
        nodes=values.get("nodes"),
        gres=values.get("gres"),
        gpus_per_node=values.get("gpus_per_node"),
        gpus=values.get("gpus"),
        gpus_per_task=values.get("gpus_per_task"),
        ntasks=values.get("ntasks"),
        ntasks_per_node=values.get("ntasks_per_node"),
        time=values.get("time"),
        job_name=values.get("job_name"),
        comment=values.get("comment"),
        hold=hold,
        parsable=parsable,
        tag=tag,
    )


def has_submit_plugin(config: str) -> bool:
    """Whether ``scontrol show config`` output lists the Lua job-submit plugin slurmopt ships."""
    from slurmopt.plugin import loads_lua
    from slurmopt.slurm.parse import parse_config_text

    return loads_lua(parse_config_text(config))


#: Printed once on stderr when the cluster has no plugin to act on the tag.
NO_PLUGIN_WARNING = (
    "slurmopt: warning: no slurmopt job-submit plugin on this cluster; "
    "job is not managed and is submitted as sbatch would"
)


__all__ = [
    "NO_PLUGIN_WARNING",
    "OWN_OPTIONS",
    "OWN_PREFIX",
    "OptionTable",
    "TEMPLATES",
    "SubmitRequest",
    "Submission",
    "build_submission",
    "unknown_option_error",
    "has_submit_plugin",
    "is_info_only",
    "parse_command_line",
    "reads_stdin",
    "table_for",
    "template_of",
    "wants_help",
]
