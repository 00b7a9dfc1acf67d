"""sbatch's argument grammar, without sbatch's semantics: pure, no I/O.

``slurmopt submit`` must hand sbatch exactly what the user wrote, minus its
own options, so it only needs to know *where* each option and its value
are, never what they mean.  That takes two things sbatch itself does:

* splitting a command line with ``getopt_long`` as sbatch calls it: options
  stop at the first operand (the script), long names may be abbreviated to
  a unique prefix, short options may be clustered (``-HN2``), and an option
  that takes a value swallows the next word whatever it looks like;
* reading ``#SBATCH`` lines from the top of a script: only lines that start
  with ``#SBATCH`` in column one, only until the first line that is neither
  blank nor a comment, several options per line, quotes and backslashes
  as sbatch's own tokenizer treats them, and an unquoted ``#`` ending the
  line.

The option table records, for each sbatch 22.05 option, only whether it
takes a value; it was read off the real ``sbatch`` (getopt's own "requires
an argument" / "doesn't allow an argument" answers), not from the manual,
which is incomplete.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum


class Arity(Enum):
    """Whether an option takes a value, as ``struct option.has_arg`` says."""

    NONE = "none"
    REQUIRED = "required"
    OPTIONAL = "optional"  # only ever attached: ``--exclusive=user``, ``-kfoo``


_NONE = (
    "contiguous", "help", "hold", "ignore-pbs", "no-requeue", "overcommit", "oversubscribe",
    "parsable", "quiet", "reboot", "requeue", "spread-job", "test-only", "usage",
    "use-min-nodes", "verbose", "version", "wait",
)  # fmt: skip
_OPTIONAL = ("exclusive", "get-user-env", "nice", "no-kill", "propagate")
_REQUIRED = (
    "account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir",
    "cluster-constraint", "clusters", "comment", "constraint", "container", "core-spec",
    "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot",
    "dependency", "distribution", "error", "exclude", "export", "export-file", "extra-node-info",
    "gid", "gpu-bind", "gpu-freq", "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task",
    "gres", "gres-flags", "hint", "input", "job-name", "kill-on-invalid-dep", "licenses",
    "mail-type", "mail-user", "mcs-label", "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu",
    "mincpus", "network", "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core",
    "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "open-mode", "output", "partition",
    "power", "prefer", "priority", "profile", "qos", "reservation", "signal", "sockets-per-node",
    "switches", "thread-spec", "threads-per-core", "time", "time-min", "tmp", "uid",
    "wait-all-nodes", "wckey", "wrap",
)  # fmt: skip

#: sbatch 22.05's long options and whether each takes a value.
SBATCH_LONG_OPTIONS: dict[str, Arity] = {
    **{n: Arity.NONE for n in _NONE},
    **{n: Arity.OPTIONAL for n in _OPTIONAL},
    **{n: Arity.REQUIRED for n in _REQUIRED},
}

#: sbatch's short options, by the long option each stands for.
SBATCH_SHORT_OPTIONS: dict[str, str] = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info", "c": "cpus-per-task",
    "C": "constraint", "d": "dependency", "D": "chdir", "e": "error", "F": "nodefile",
    "G": "gpus", "h": "help", "H": "hold", "i": "input", "J": "job-name", "k": "no-kill",
    "L": "licenses", "m": "distribution", "M": "clusters", "n": "ntasks", "N": "nodes",
    "o": "output", "O": "overcommit", "p": "partition", "q": "qos", "Q": "quiet",
    "s": "oversubscribe", "S": "core-spec", "t": "time", "v": "verbose", "V": "version",
    "w": "nodelist", "W": "wait", "x": "exclude",
}  # fmt: skip

#: What separates the option groups of a heterogeneous job: ``sbatch -N1 : -N2 job.sh``.
HETJOB_SEPARATOR = ":"


@dataclass(frozen=True, slots=True)
class Option:
    """One option as written, with the long name it resolves to.

    ``tokens`` are the exact words it occupied, so it can be passed on
    verbatim (for a cluster such as ``-HN2``, all on its first option);
    ``name`` is the full long name (``partition`` for ``-p`` or ``--part``),
    or the spelling as written when sbatch has no such option (sbatch will
    reject it with its own message).  ``component`` counts the
    heterogeneous-job groups before it.
    """

    name: str
    value: str | None
    tokens: tuple[str, ...]
    known: bool = True
    component: int = 0


@dataclass(frozen=True, slots=True)
class ParsedArgs:
    """A command line split as sbatch splits it: options, then the script and its arguments.

    ``rest`` is everything from the first operand on (including a leading
    ``--``), verbatim; ``script`` and ``script_args`` are read from it.
    """

    options: tuple[Option, ...]
    rest: tuple[str, ...]

    @property
    def script(self) -> str | None:
        words = self.rest[1:] if self.rest[:1] == ("--",) else self.rest
        return words[0] if words else None

    @property
    def script_args(self) -> tuple[str, ...]:
        words = self.rest[1:] if self.rest[:1] == ("--",) else self.rest
        return tuple(words[1:])


def resolve_long(name: str, table: dict[str, Arity]) -> str | None:
    """The long option ``name`` means, as getopt_long resolves it: exact, else a unique prefix."""
    if name in table:
        return name
    matches = [full for full in table if full.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def split_args(
    argv: Sequence[str],
    extra_long: dict[str, Arity] | None = None,
    exact_only: Iterable[str] = (),
) -> ParsedArgs:
    """Split ``argv`` into options and the script with its arguments, as sbatch does.

    ``extra_long`` adds options sbatch does not have (slurmopt's own);
    names in ``exact_only`` are recognised only when spelled in full, so
    that an abbreviation keeps meaning what it means to sbatch.
    """
    table = dict(SBATCH_LONG_OPTIONS)
    exact = set(exact_only)
    table.update(extra_long or {})
    abbreviable = {n: a for n, a in table.items() if n not in exact}
    options: list[Option] = []
    component = 0
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--" or word == "-" or not word.startswith("-"):
            if word == HETJOB_SEPARATOR:
                options.append(Option(HETJOB_SEPARATOR, None, (word,), True, component))
                component += 1
                i += 1
                continue
            return ParsedArgs(tuple(options), tuple(argv[i:]))
        if word.startswith("--"):
            spelled, eq, attached = word[2:].partition("=")
            name = spelled if spelled in exact else resolve_long(spelled, abbreviable)
            if name is None:
                options.append(Option(spelled, attached if eq else None, (word,), False, component))
                i += 1
                continue
            arity = table[name]
            if eq:
                options.append(Option(name, attached, (word,), True, component))
                i += 1
            elif arity is Arity.REQUIRED and i + 1 < len(argv):
                options.append(Option(name, argv[i + 1], (word, argv[i + 1]), True, component))
                i += 2
            else:
                options.append(Option(name, None, (word,), True, component))
                i += 1
            continue
        i = _split_short(argv, i, component, options)
    return ParsedArgs(tuple(options), ())


def _split_short(argv: Sequence[str], i: int, component: int, out: list[Option]) -> int:
    """Split one ``-abc`` cluster; returns the index of the next word.

    The cluster's words go, verbatim, with its first option (the others get
    none), so that passing the options on rebuilds ``-HN2`` and not ``-H -N2``.
    """
    word = argv[i]
    parts: list[tuple[str, str | None, bool]] = []  # (name, value, known)
    consumed = i + 1
    j = 1
    while j < len(word):
        letter = word[j]
        long_name = SBATCH_SHORT_OPTIONS.get(letter)
        if long_name is None:
            parts.append((f"-{letter}", None, False))
            j += 1
            continue
        arity = SBATCH_LONG_OPTIONS[long_name]
        attached = word[j + 1 :]
        if arity is Arity.NONE:
            parts.append((long_name, None, True))
            j += 1
            continue
        if attached:
            parts.append((long_name, attached, True))
        elif arity is Arity.REQUIRED and i + 1 < len(argv):
            parts.append((long_name, argv[i + 1], True))
            consumed = i + 2
        else:
            parts.append((long_name, None, True))
        break
    tokens = tuple(argv[i:consumed])
    for k, (name, value, known) in enumerate(parts):
        out.append(Option(name, value, tokens if k == 0 else (), known, component))
    return consumed


def join_tokens(options: Iterable[Option]) -> list[str]:
    """The words the options occupied, in order: what sbatch is given back."""
    return [token for opt in options for token in opt.tokens]


# ---------------------------------------------------------------- script directives


#: What C's isspace() accepts; str.isspace() accepts more.
_C_SPACE = frozenset(" \t\n\v\f\r")


class DirectiveError(ValueError):
    """A directive line sbatch would reject while reading it (an unmatched quote)."""

    def __init__(self, lineno: int, message: str) -> None:
        self.lineno = lineno
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class Directive:
    """The words of one directive line, and its line number (1-based)."""

    lineno: int
    words: tuple[str, ...]


def split_directive(text: str, lineno: int = 0) -> list[str]:
    """Split what follows ``#SBATCH`` into words, as sbatch's ``_get_argument`` does.

    Whitespace separates words; single and double quotes group (and are
    removed); a backslash keeps the next character; an unquoted ``#`` ends
    the line, so ``#SBATCH -N 2 # two nodes`` is just ``-N 2``.  Like
    sbatch, a word that comes out empty (``""``) ends the line too.
    """
    words: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _C_SPACE:
            i += 1
        if i >= n:
            return words
        chars: list[str] = []
        quote = ""
        escaped = False
        while i < n and (quote or text[i] not in _C_SPACE):
            c = text[i]
            i += 1
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
                continue
            elif quote:
                if c == quote:
                    quote = ""
                    continue
            elif c in "\"'":
                quote = c
                continue
            elif c == "#":
                i -= 1
                break
            chars.append(c)
        if quote:
            raise DirectiveError(lineno, f"unmatched {quote} in {text.strip()!r}")
        if not chars:
            return words
        words.append("".join(chars))


def _is_command(line: str) -> bool:
    """True for a line that ends the directive block: not blank, not a comment."""
    stripped = line.lstrip("".join(_C_SPACE))
    return bool(stripped) and not stripped.startswith("#")


def script_directives(script: str, prefix: str = "#SBATCH") -> list[Directive]:
    """Directive lines with ``prefix`` at the head of a script, as sbatch reads them.

    Stops at the first command line; a ``hetjob`` separator line ends the
    first job component, and only that component's lines are returned
    (slurmopt tags the job as a whole, through its first component).
    """
    found: list[Directive] = []
    for lineno, line in enumerate(script.split("\n"), start=1):
        if line.startswith(prefix):
            body = line[len(prefix) :]
            if prefix == "#SBATCH" and ("hetjob" in body.lower() or "packjob" in body.lower()):
                break
            words = split_directive(body, lineno)
            if words:
                found.append(Directive(lineno, tuple(words)))
        elif _is_command(line):
            break
    return found
