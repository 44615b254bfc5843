"""A program's `--help`: its docstring, then its own flags grouped by what they configure.

Each `define_*` function of `jaxblend.cli` defines its flags inside `with group(TITLE):`, which
marks every flag defined in the block with that group (the flag object carries it: one definition
per flag, nothing listed twice). `program_help` prints the groups in the fixed order of `ORDER`,
each flag in definition order under its group, with its default and, in a program that accepts
Megatron-LM's spellings, the dashed one beside the absl one; absl's own flags (`--flagfile`,
`--logtostderr`, ...) are left to `--helpfull`.
"""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Collection, Iterable, Iterator

from absl import flags

# Group titles, in the order `--help` shows them. A program shows the groups it has.
INPUT = "input"
OUTPUT = "output"
TOKENIZER = "tokenizer"
WORKERS = "workers"
COMMANDS = "commands"
DATA = "data"
STORAGE = "storage"
SCHEMA = "sequence and schema"
STEPS = "batches and steps"
MODEL = "model"
OPTIMIZER = "optimizer"
RUN = "run"
PROCESSES = "processes and devices"
DOCUMENTS = "documents and sentences"
MEGATRON = "accepted for Megatron-LM command lines"
CLEANING = "cleaning (docs/cleaning.md)"
OTHER = "other"

ORDER = (
    INPUT, COMMANDS, OUTPUT, TOKENIZER, WORKERS, DATA, STORAGE, SCHEMA, STEPS, MODEL, OPTIMIZER,
    RUN, PROCESSES, DOCUMENTS, MEGATRON, CLEANING, OTHER,
)

_ATTRIBUTE = "jaxblend_help_group"
# absl's help flags -> what they ask for.
_HELP_FLAGS = {"help": "help", "helpshort": "help", "?": "help", "h": "help", "helpfull": "helpfull"}


@contextlib.contextmanager
def group(title: str, fl: flags.FlagValues | None = None) -> Iterator[None]:
    """Marks the flags defined in the block as belonging to the help group `title` (a flag
    defined in an inner block keeps the inner block's group).

    Args:
      title: one of the titles of `ORDER`.
      fl: the flags (absl's `FLAGS` when None).
    """
    if title not in ORDER:
        raise ValueError(f"unknown help group {title!r}; the groups are {ORDER}")
    fl = flags.FLAGS if fl is None else fl
    before = set(fl)
    try:
        yield
    finally:
        for name in set(fl) - before:
            if not hasattr(fl[name], _ATTRIBUTE):
                setattr(fl[name], _ATTRIBUTE, title)


def group_of(flag: flags.Flag) -> str:
    """The help group of `flag` (`OTHER` when it was defined outside a `group` block)."""
    return getattr(flag, _ATTRIBUTE, OTHER)


def help_requested(argv: Iterable[str]) -> str | None:
    """"help" or "helpfull" when the command line asks for help (before a bare `--`), else None."""
    for arg in argv:
        if arg == "--":
            return None
        if arg.startswith("-") and (wanted := _HELP_FLAGS.get(arg.lstrip("-").partition("=")[0])):
            return wanted
    return None


def _default(flag: flags.Flag) -> str | None:
    """The default as `--help` shows it (None: no default value)."""
    if flag.default is None:
        return None
    if flag.boolean:
        return "true" if flag.default else "false"
    if isinstance(flag.default, list | tuple):
        return ",".join(str(v) for v in flag.default) if flag.default else "none"
    text = str(flag.default)
    return text if text else "''"


def _megatron_spelling(flag: flags.Flag, nargs: Collection[str]) -> str | None:
    """The dashed spelling of `flag` that `megatron_argv.normalize_argv` accepts, if it differs."""
    dashed = flag.name.replace("_", "-")
    if flag.name in nargs:
        return f"--{dashed} V [V ...]"
    if dashed == flag.name:
        return None
    return f"--[no-]{dashed}" if flag.boolean else f"--{dashed}"


def _own_help(flag: flags.Flag) -> str:
    """The flag's help text without what absl adds to it (an enum's values, a multi flag's
    "repeat this option" note), which `_flag_entry` shows its own way."""
    text = " ".join(flag.help.split())
    enum_values = getattr(flag.parser, "enum_values", None)
    if enum_values:
        text = text.removeprefix(f"<{'|'.join(enum_values)}>: ")
    if isinstance(flag, flags.MultiFlag):
        text = text.removesuffix(";  repeat this option to specify a list of values")
        text = text.removesuffix("; repeat this option to specify a list of values")
    return text


def _flag_entry(flag: flags.Flag, megatron_nargs: Collection[str] | None) -> str:
    name = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"
    enum_values = getattr(flag.parser, "enum_values", None)
    if enum_values:
        name += f"=<{'|'.join(enum_values)}>"
    if megatron_nargs is not None:
        dashed = _megatron_spelling(flag, megatron_nargs)
        if dashed:
            name += f" ({dashed})"
    text = f"{name}: {_own_help(flag)}"
    notes = []
    default = _default(flag)
    if default is not None:
        notes.append(f"default: {default}")
    if isinstance(flag, flags.MultiFlag):
        notes.append("repeatable")
    if notes:
        text += f" ({'; '.join(notes)})"
    return _wrap(text, "  ", "      ")


def _wrap(text: str, first: str = "", rest: str = "") -> str:
    """`text` wrapped to the terminal's width (absl's help width), never inside a word: a flag
    name such as --rampup-batch-size stays whole."""
    return textwrap.fill(
        text, width=flags.get_help_width(), initial_indent=first, subsequent_indent=rest,
        break_on_hyphens=False, break_long_words=False,
    )


def program_help(
    doc: str | None,
    fl: flags.FlagValues,
    names: Collection[str],
    megatron_nargs: Collection[str] | None = None,
    dashed: bool = False,
) -> str:
    """What `--help` prints: `doc` (the program's module docstring), then its flags' help.

    Args:
      doc: the program's module docstring.
      names: the program's own flags (of `fl`).
      megatron_nargs: the program accepts Megatron-LM's spellings (these flags as lists).
      dashed: show each flag's dashed spelling beside it (else one sentence says they work).
    """
    grouped: dict[str, list[flags.Flag]] = {}
    for name in fl:  # definition order; a flag's short name is skipped
        if name in names and name == fl[name].name:
            grouped.setdefault(group_of(fl[name]), []).append(fl[name])
    parts = [doc.strip("\n")] if doc and doc.strip() else []
    spelling = ""
    if megatron_nargs is not None and not dashed:
        spelling = (
            " Megatron-LM's spellings work too: dashes (--seq-length 2048) and lists separated by "
            "spaces (--data-path 30 /d/a 70 /d/b)."
        )
    intro = (
        f"Flags, by what they configure.{spelling} --flagfile=FILE reads flags from FILE (one a "
        "line); --helpfull lists every flag, absl's included."
    )
    parts.append(_wrap(intro))
    nargs = megatron_nargs if dashed else None
    parts += [
        f"{title}:\n" + "\n".join(_flag_entry(f, nargs) for f in grouped[title])
        for title in ORDER if title in grouped
    ]
    return "\n\n".join(parts) + "\n"
