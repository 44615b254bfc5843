"""Megatron-LM command lines for absl CLIs: dashed flag names and space-separated lists.

Megatron-LM's tools use argparse: ``--output-prefix out --json-keys text title``. absl wants
``--output_prefix=out --json_keys=text,title``. :func:`normalize_argv` rewrites the first form into
the second for the flags a program defines, so a Megatron command line runs verbatim; anything it
does not recognize is left alone for absl to report.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def normalize_argv(
    argv: Sequence[str], defined: Collection[str], nargs: Collection[str] = ()
) -> list[str]:
    """Rewrites Megatron spellings into absl ones.

    Args:
      argv: The command line, program name first.
      defined: Names of the flags the program defines (underscore spelling).
      nargs: Flags that take several space-separated values in Megatron (argparse ``nargs``); their
        values are joined with commas (absl list flags).

    Returns:
      The rewritten command line. ``--a-b`` becomes ``--a_b`` (and ``--no-a-b`` ``--noa_b``) when
      ``a_b`` is defined; ``--x v1 v2`` becomes ``--x=v1,v2`` for ``x`` in ``nargs``. Everything
      after a bare ``--`` is left as it is.
    """
    out = list(argv[:1])
    rest = list(argv[1:])
    i = 0
    while i < len(rest):
        arg = rest[i]
        i += 1
        if arg == "--":
            out.extend(rest[i - 1 :])
            break
        if not arg.startswith("-") or arg.startswith("---"):
            out.append(arg)
            continue
        dashes = "--" if arg.startswith("--") else "-"
        name, eq, value = arg[len(dashes) :].partition("=")
        canonical = name.replace("-", "_")
        if canonical not in defined and canonical.startswith("no_") and canonical[3:] in defined:
            canonical = "no" + canonical[3:]
        elif canonical not in defined:
            out.append(arg)
            continue
        if canonical in nargs and not eq:
            values = []
            while i < len(rest) and not rest[i].startswith("--"):
                values.append(rest[i])
                i += 1
            out.append(f"--{canonical}={','.join(values)}")
            continue
        out.append(f"--{canonical}{eq}{value}")
    return out

