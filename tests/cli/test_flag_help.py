"""`--help` of every program: exit 0, the program's docstring with examples that read cleanly,
then its own flags grouped by what they configure, each default saying where an omitted value
comes from; `preprocess --help` puts the common flags first and shows Megatron-LM's spellings.

The programs run in this process (`helpers_cli.run_tool`), as a user's command line runs them;
one `python -m` smoke test checks the exit code of a real process."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from absl import flags
from helpers_cli import run_tool

from jaxblend.cli import flag_help

PROGRAMS = (
    "jaxblend.train",
    "jaxblend.tools.preprocess",
    "jaxblend.tools.build_index",
    "jaxblend.tools.dump_samples",
    "jaxblend.tools.dump_batches",
    "jaxblend.tools.inspect",
    "jaxblend.tools.launch_local",
)


def _help(module: str, *args: str) -> str:
    out = run_tool(module, [*args, "--help"])
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stderr == "", out.stderr[-2000:]
    return out.stdout


def _sections(text: str) -> dict[str, list[str]]:
    """Group title -> the flag names listed under it, in order."""
    flag_part = text[text.index("Flags, by what they configure."):]
    sections: dict[str, list[str]] = {}
    current = None
    for line in flag_part.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = line[:-1]
            sections[current] = []
        elif line.startswith("  --") and current is not None:
            name = re.match(r"  --(?:\[no\])?([A-Za-z0-9_]+)", line).group(1)
            sections[current].append(name)
    return sections


def _entries(text: str) -> list[str]:
    """Each flag's entry (its lines joined)."""
    flag_part = text[text.index("Flags, by what they configure."):]
    entries = []
    for line in flag_part.splitlines():
        if line.startswith("  --"):
            entries.append(line.strip())
        elif line.startswith("      ") and entries:
            entries[-1] += " " + line.strip()
    return entries


@pytest.mark.parametrize("module", PROGRAMS)
def test_help_exits_0_with_the_docstring_then_the_groups(module):
    text = _help(module)
    import importlib

    doc = importlib.import_module(module).__doc__
    first = doc.strip().splitlines()[0]
    assert text.startswith(first), text[:300]  # the program's own docstring, also in-process
    sections = _sections(text)
    assert sections and flag_help.OTHER not in sections, sections.keys()
    order = [title for title in flag_help.ORDER if title in sections]
    assert list(sections) == order  # the fixed order of the groups
    assert all(sections.values())
    for absl_flag in ("logtostderr", "--flagfile:", "--undefok", "--only_check_args", "--verbosity"):
        assert absl_flag not in text, absl_flag  # absl's own flags are for --helpfull
    assert "--helpfull" in text and "--[no]verbose" in text


def test_train_help_groups_flags_by_what_they_configure():
    sections = _sections(_help("jaxblend.train"))
    assert list(sections) == [
        flag_help.DATA, flag_help.STORAGE, flag_help.SCHEMA, flag_help.STEPS, flag_help.MODEL,
        flag_help.OPTIMIZER, flag_help.RUN, flag_help.PROCESSES,
    ]
    expected = {
        flag_help.DATA: ["data_path", "split", "train_samples", "tokenizer_type"],
        flag_help.STORAGE: ["data_cache_path", "s3_endpoint", "storage_backend"],
        flag_help.SCHEMA: ["seq_length", "eod_id", "reset_position_ids"],
        flag_help.STEPS: ["global_batch_size", "train_iters", "eval_interval"],
        flag_help.MODEL: ["vocab_size", "hidden_size", "num_layers"],
        flag_help.OPTIMIZER: ["lr", "min_lr", "weight_decay", "clip_grad"],
        flag_help.RUN: ["workdir", "checkpoint_dir", "log_interval", "verbose"],
        flag_help.PROCESSES: ["mesh_shape", "worker_count", "coordinator_address"],
    }
    for title, names in expected.items():
        assert set(names) <= set(sections[title]), (title, sections[title])
    assert sections[flag_help.DATA][0] == "data_path"  # definition order, not alphabetical


@pytest.mark.parametrize("module", PROGRAMS)
def test_every_flag_says_its_default_or_where_an_omitted_value_comes_from(module):
    for entry in _entries(_help(module)):
        assert re.search(r"default|required", entry, re.IGNORECASE), entry


def test_train_samples_says_it_comes_from_the_steps():
    entries = [e for e in _entries(_help("jaxblend.train")) if e.startswith("--train_samples")]
    assert len(entries) == 1 and "default: the samples of --train_iters steps" in entries[0]


@pytest.mark.parametrize("module", PROGRAMS)
def test_usage_examples_read_cleanly(module):
    """No example line holds the spaces a line continuation left (`2048       --global...`),
    and an example's continued line still ends with its backslash."""
    text = _help(module)
    doc = text[:text.index("Flags, by what they configure.")]
    examples = [line for line in doc.splitlines() if "python -m" in line]
    assert examples, doc[:500]
    for line in doc.splitlines():
        assert not re.search(r"\S {3,}\S", line.strip()), line
    continued = [line for line in doc.splitlines() if line.rstrip().endswith("\\")]
    for line in continued:
        assert line.rstrip().endswith(" \\"), line


def test_inspect_help_shows_backslash_n_as_written():
    assert "newlines shown as \\n, at most" in _help("jaxblend.tools.inspect")


def test_preprocess_help_puts_the_common_flags_first_with_megatron_spellings():
    text = _help("jaxblend.tools.preprocess")
    sections = _sections(text)
    titles = list(sections)
    assert titles[:4] == [flag_help.INPUT, flag_help.OUTPUT, flag_help.TOKENIZER, flag_help.WORKERS]
    assert titles[-1] == flag_help.CLEANING
    assert sections[flag_help.INPUT][0] == "input"
    assert sections[flag_help.OUTPUT][0] == "output_prefix"
    assert sections[flag_help.TOKENIZER][:2] == ["tokenizer_type", "tokenizer_model"]
    assert sections[flag_help.WORKERS][0] == "workers"
    flat = [name for names in sections.values() for name in names]
    assert flat.index("workers") < min(flat.index(n) for n in flat if n.startswith("clean_"))
    for spelling in (
        "--output_prefix (--output-prefix):",
        "--json_keys (--json-keys V [V ...]):",
        "--input (--input V [V ...]):",
        "--tokenizer_type (--tokenizer-type):",
        "--[no]append_eod (--[no-]append-eod):",
        "--[no]split_sentences (--[no-]split-sentences):",
    ):
        assert spelling in text, spelling
    assert "--workers:" in text  # no dashed spelling where it is the same


def test_other_programs_say_once_that_megatron_spellings_work():
    text = _help("jaxblend.train")
    assert "--seq_length (--seq-length)" not in text
    assert "Megatron-LM's spellings work too" in text
    assert "Megatron-LM's spellings work too" not in _help("jaxblend.tools.launch_local")


@pytest.mark.parametrize("spelling", ["-?", "-h", "--helpshort", "--helpfull"])
def test_every_help_flag_exits_0(spelling):
    out = run_tool("jaxblend.tools.dump_samples", [spelling])
    assert out.returncode == 0, out.stderr
    assert "--data_path" in out.stdout


def test_help_wins_over_bad_flags_and_missing_required_ones():
    out = run_tool("jaxblend.tools.dump_batches", ["--no_such_flag=1", "--help"])  # no --out
    assert out.returncode == 0, out.stderr
    assert "--out" in out.stdout


def test_help_after_a_bare_double_dash_belongs_to_the_command():
    out = run_tool("jaxblend.tools.launch_local", ["--num_processes=1", "--", "true", "--help"])
    assert out.returncode == 0, out.stderr
    assert "Flags, by what they configure." not in out.stdout


def test_group_marks_the_flags_defined_in_it_the_inner_group_winning():
    fl = flags.FlagValues()
    with flag_help.group(flag_help.DATA, fl):
        flags.DEFINE_string("a", None, "a", flag_values=fl)
        with flag_help.group(flag_help.STORAGE, fl):
            flags.DEFINE_string("b", None, "b", flag_values=fl)
    flags.DEFINE_string("c", None, "c", flag_values=fl)
    assert [flag_help.group_of(fl[n]) for n in "abc"] == [
        flag_help.DATA, flag_help.STORAGE, flag_help.OTHER,
    ]
    with pytest.raises(ValueError, match="unknown help group"), flag_help.group("nonsense", fl):
        pass


def test_help_as_a_process_exits_0():
    # `python -m` itself: the exit status a shell sees.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-m", "jaxblend.tools.inspect", "--help"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Inspect datasets, batches and blends")
    assert "\ncommands:\n" in out.stdout and "\ndata:\n" in out.stdout
