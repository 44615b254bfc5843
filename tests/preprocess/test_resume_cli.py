"""The CLI as a subprocess: kill -9 mid-run, rerun, byte-identical output; clear CLI errors (those
in this process: `helpers_cli.run_tool`)."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers_cli import run_tool

from jaxblend.preprocess import config as config_lib
from jaxblend.preprocess import layout, pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from tests.preprocess.conftest import make_documents, read_bytes

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(args: list[str], **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=_ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "jaxblend.tools.preprocess", *args],
        cwd=_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_kill_9_then_resume_is_byte_identical(tmp_path, tokenizer_files):
    docs = make_documents(6_000, seed=1, max_sentences=8)
    src = tmp_path / "in.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    model = tokenizer_files["hf_bpe"]["model"]
    prefix = str(tmp_path / "killed" / "c")
    args = [
        f"--input={src}",
        f"--output_prefix={prefix}",
        "--tokenizer_type=hf",
        f"--tokenizer_model={model}",
        "--append_eod",
        "--partitions=48",
        "--workers=2",
        "--noprogress",
    ]
    proc = _cli(args, start_new_session=True)
    parts = layout.parts_dir(prefix)
    deadline = time.monotonic() + 120
    while not glob.glob(os.path.join(parts, "*.done.json")):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "no partition finished in time"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    finished = len(glob.glob(os.path.join(parts, "*.done.json")))
    assert 1 <= finished < 48, finished
    assert not os.path.exists(prefix + "_text_document.idx")

    again = _cli(args + ["--summary_json=" + str(tmp_path / "summary.json")])
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["partitions_reused"] >= finished and summary["partitions"] == 48
    assert "documents" in out and not os.path.exists(parts)

    spec = tok_spec.TokenizerSpec("hf", model=model)
    ref = pipeline.preprocess(
        config_lib.PreprocessConfig(
            input=(str(src),),
            output_prefix=str(tmp_path / "ref" / "c"),
            tokenizer=spec,
            append_eod=True,
            partitions=48,
            workers=1,
            progress=False,
        )
    )
    assert read_bytes(prefix + "_text_document") == read_bytes(ref.outputs["text"])


def test_cli_errors_are_clear(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "hi"}\n')
    proc = run_tool("jaxblend.tools.preprocess", [
        f"--input={tmp_path / 'a.jsonl'}",
        f"--output_prefix={tmp_path / 'o'}",
        "--tokenizer_type=SentencePieceTokenizer",
        f"--tokenizer_model={tmp_path / 'no.model'}",
    ])
    err = proc.stderr
    assert proc.returncode == 1 and "no.model" in err and "does not exist" in err
    assert not os.path.exists(str(tmp_path / "o") + ".preprocess.json")
    assert not os.path.exists(tmp_path / ".jaxblend" / "o.preprocess.json")


def test_cli_exits_non_zero_when_no_document_is_written(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "hi"}\n{"text": "ho"}\n')
    proc = run_tool("jaxblend.tools.preprocess", [
        f"--input={src}", f"--output_prefix={tmp_path / 'o'}", "--tokenizer_type=byte",
        "--json_keys=body", "--noprogress",
    ])
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 1, (out, err)
    lines = [line for line in err.strip().splitlines() if "] preprocess: " not in line]  # logging
    assert len(lines) == 1 and lines[0] == (
        f"error: --input {src}: no documents written: all 2 records were dropped, most as "
        f"missing_key (2, e.g. {src}:1 (key 'body')); check that --json-keys body names fields "
        "the records have"
    ), err
    assert not os.path.exists(str(tmp_path / "o") + "_body_document.idx")
