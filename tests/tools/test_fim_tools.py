"""`--fim_data` and its settings (Megatron's `--fim-*` names, dashed spellings accepted) in every
program that builds GPT batches: the assembled configuration, `dump_batches` (the loader's
batches equal the Python API's FIM source), `inspect explain --decode` and `dump_batches --decode`
(sentinels shown as [FIM_PREFIX] ...), and the training example."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers_cli import run_tool

from jaxblend import cli, index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.cli.flag_values import DataFlagValues
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources
from jaxblend.sources.fim import FIMOptions
from tests.helpers_fim import make_code_dataset

DATA = ["--split=100,0,0", "--seq_length=24", "--train_samples=64", "--seed=9"]
FIM = ["--fim_data", "--fim_rate=0.9", "--fim_spm_rate=0.5"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("fim_tools")
    prefix, model = make_code_dataset(root, "code", n=100, seed=2)
    return {"root": root, "prefix": prefix, "model": model}


def _error(out) -> str:
    lines = [s for s in out.stderr.splitlines() if s.startswith("error: ")]
    assert out.returncode != 0 and len(lines) == 1, out.stderr[-3000:]
    return lines[0]


def test_flag_values_assemble_into_the_schema():
    values = DataFlagValues(
        data_path=("/d/a",), seq_length=8, fim_data=True, fim_rate=0.3, fim_spm_rate=0.7,
        fim_split_sample="<file_sep>", fim_fragment_rate=0.4, fim_no_prefix="#!",
        fim_pad_token="<pad>",
    )
    run = cli.assemble(values)
    assert run.schema.fim == FIMOptions(
        rate=0.3, spm_rate=0.7, split_sample="<file_sep>", fragment_rate=0.4, no_prefix="#!",
        pad_token="<pad>",
    )
    assert cli.assemble(values.replace(fim_data=False, fim_rate=0.5, fim_spm_rate=0.5,
                                       fim_split_sample=None, fim_fragment_rate=None,
                                       fim_no_prefix=None, fim_pad_token="<fim_pad>")).schema.fim is None
    with pytest.raises(ValueError, match=r"--fim_rate, --fim_eod_token apply only with --fim_data"):
        cli.assemble(DataFlagValues(data_path=("/d/a",), seq_length=8, fim_rate=0.2,
                                    fim_eod_token="</s>"))
    with pytest.raises(ValueError, match="--fim_data .* --mock_data .* drop one of the two"):
        cli.assemble(DataFlagValues(mock_data=True, seq_length=8, fim_data=True))
    with pytest.raises(ValueError, match="--fim_spm_rate"):
        cli.assemble(values.replace(fim_spm_rate=1.5))


def test_dump_batches_with_megatron_spellings_equals_the_python_api(data, tmp_path):
    out = run_tool("jaxblend.tools.dump_batches", [
        f"--data-path={data['prefix']}", *DATA, "--global-batch-size=8", "--steps=2",
        "--fim-data", "--fim-rate", "0.9", "--fim-spm-rate", "0.5",
        "--fim-split-sample", "<file_sep>", "--fim-fragment-rate=0.5",
        f"--out={tmp_path / 'dashed'}", f"--data_cache_path={tmp_path / 'maps'}", "--decode",
    ])
    assert out.returncode == 0, out.stderr[-3000:]
    with np.load(tmp_path / "dashed" / "batches.npz") as f:
        inputs, sample_ids = f["inputs"], f["sample_ids"]
    config = index.GPTDataConfig(
        blend=[data["prefix"]], split="100,0,0", seq_length=24, seed=9, num_samples=(64, 0, 0))
    fim = FIMOptions(rate=0.9, spm_rate=0.5, split_sample="<file_sep>", fragment_rate=0.5)
    src = open_gpt_sources(
        config, GPTSchemaOptions(fim=fim),
        access=DataAccess(maps=MapStoreOptions(location=str(tmp_path / "maps"))))["train"]
    for step in range(2):
        np.testing.assert_array_equal(sample_ids[step], np.arange(8 * step, 8 * step + 8))
        np.testing.assert_array_equal(inputs[step], src.get_batch(sample_ids[step])["inputs"])
    texts = json.loads((tmp_path / "dashed" / "batches.decoded.json").read_text(encoding="utf-8"))
    shown = "".join(t for rows in texts.values() for t in rows)
    assert "[FIM_PREFIX]" in shown and "[FIM_MIDDLE]" in shown and "[FIM_SUFFIX]" in shown
    assert "<fim_prefix>" not in shown


def _explain_plain_and_fim(data, tmp_path, *extra):
    """`inspect explain --decode --json` rows of one step, without and with `FIM`; their pieces
    agree."""
    args = ["explain", f"--data_path={data['prefix']}", *DATA, "--global_batch_size=8",
            "--decode", "--decode_chars=0", f"--data_cache_path={tmp_path / 'maps'}", *extra]
    plain = run_tool("jaxblend.tools.inspect", [*args, f"--json={tmp_path / 'plain.json'}"])
    fim = run_tool("jaxblend.tools.inspect", [*args, *FIM, f"--json={tmp_path / 'fim.json'}"])
    assert plain.returncode == 0 and fim.returncode == 0, fim.stderr[-3000:]
    plain_rows = json.loads((tmp_path / "plain.json").read_text())["rows"]
    fim_rows = json.loads((tmp_path / "fim.json").read_text())["rows"]
    assert [r["pieces"] for r in plain_rows] == [r["pieces"] for r in fim_rows]
    return plain_rows, fim_rows


def test_inspect_explain_decode_shows_the_rewritten_sample(data, tmp_path):
    plain_rows, fim_rows = _explain_plain_and_fim(data, tmp_path, "--step=1")
    assert not any("[FIM_" in r["text"] for r in plain_rows)
    rewritten = [r for r in fim_rows if r["text"].startswith("[FIM_PREFIX]")]
    assert len(rewritten) >= 4
    for r in rewritten:
        assert "[FIM_SUFFIX]" in r["text"]
    # the rows a loader reads hold these texts: dump_batches --decode agrees
    out = run_tool("jaxblend.tools.dump_batches", [
        f"--data_path={data['prefix']}", *DATA, *FIM, "--global_batch_size=8", "--steps=1",
        "--start_step=1", "--megatron_compat", f"--out={tmp_path / 'dump'}",
        f"--data_cache_path={tmp_path / 'maps'}", "--decode",
    ])
    assert out.returncode == 0, out.stderr[-3000:]
    texts = json.loads((tmp_path / "dump" / "batches.decoded.json").read_text())["1"]
    for row, text in zip(fim_rows, texts, strict=True):  # inputs: the window less its last token
        assert row["text"].startswith(text[: len(text) // 2])


def test_inspect_explain_decode_shows_each_packed_document_rewritten(data, tmp_path):
    plain_rows, fim_rows = _explain_plain_and_fim(data, tmp_path, "--step=0", "--packing=best_fit")
    texts = [t for r in fim_rows for t in r["texts"]]
    assert len(texts) == sum(len(r["texts"]) for r in plain_rows)
    assert not any("[FIM_" in t for r in plain_rows for t in r["texts"])
    rewritten = [t for t in texts if t.startswith("[FIM_PREFIX]")]
    assert len(rewritten) >= 0.5 * len(texts) > 2  # --fim_rate=0.9, per document
    assert all("[FIM_SUFFIX]" in t for t in rewritten)


def test_missing_sentinel_is_one_line(data, tmp_path):
    out = run_tool("jaxblend.tools.dump_batches", [
        f"--data_path={data['prefix']}", *DATA, *FIM, "--fim_middle_token=<mid>",
        "--global_batch_size=8", "--steps=1", f"--out={tmp_path}",
    ])
    assert "--fim_middle_token=<mid> is not a token of the tokenizer" in _error(out)


def test_training_example_trains_on_fim_samples(data, tmp_path):
    out = run_tool("jaxblend.train", [
        f"--data_path={data['prefix']}", *DATA, *FIM, "--global_batch_size=8", "--train_iters=2",
        "--hidden_size=16", "--ffn_hidden_size=32", "--num_layers=1", "--num_attention_heads=2",
        "--eval_interval=0", "--save_interval=0", "--log_interval=1", f"--workdir={tmp_path}",
    ])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "finished at step 2" in out.stdout


def _dump(tmp_path, name, *args, env=None):
    out = run_tool("jaxblend.tools.dump_batches", [*DATA, *FIM, "--global_batch_size=8",
                                                   f"--out={tmp_path / name}", *args], env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    with np.load(tmp_path / name / "batches.npz") as f:
        return {k: f[k] for k in f.files}


def test_stages_and_resume_with_fim(data, tmp_path):
    other, _ = make_code_dataset(data["root"], "other", n=80, seed=3, model=data["model"])
    schedule = tmp_path / "stages.json"
    schedule.write_text(json.dumps({"stages": [
        {"start_step": 0, "blend": [data["prefix"]]},
        {"start_step": 2, "blend": ["50", data["prefix"], "50", other]},
    ]}))
    common = [f"--data_schedule={schedule}", f"--data_path={data['prefix']}", "--train_iters=6",
              f"--data_cache_path={tmp_path / 'maps'}"]
    whole = _dump(tmp_path, "whole", *common, "--steps=5")
    first = _dump(tmp_path, "first", *common, "--steps=3", f"--state_out={tmp_path / 'state.json'}")
    rest = _dump(tmp_path, "rest", *common, "--steps=2", f"--state_in={tmp_path / 'state.json'}")
    for key in ("inputs", "targets", "loss_mask", "sample_ids", "dataset_ids"):
        np.testing.assert_array_equal(np.concatenate([first[key], rest[key]]), whole[key])
    assert set(np.unique(whole["dataset_ids"][2:])) == {0, 1}  # the second stage blends both
    state = json.loads((tmp_path / "state.json").read_text())
    plain = run_tool("jaxblend.tools.dump_batches", [
        *DATA, *common, "--global_batch_size=8", "--steps=2", f"--state_in={tmp_path / 'state.json'}",
        f"--out={tmp_path / 'plain'}"])
    assert state["step"] == 3  # a FIM state does not resume a plain run:
    assert "comes from a different data configuration" in _error(plain)


def test_bucket_data_reads_its_record_from_the_bucket(data, s3_server, tmp_path):
    url = s3_server.upload(data["prefix"], "fim/code_text_document")
    with open(str(data["root"] / ".jaxblend" / "code.preprocess.json"), "rb") as f:
        s3_server.write("fim/.jaxblend/code.preprocess.json", f.read())
    env = {**os.environ, **s3_server.environ()}
    remote = _dump(tmp_path, "remote", f"--data_path={url}", f"--s3_endpoint={s3_server.url}",
                   f"--data_cache_path={tmp_path / 'maps_remote'}", "--steps=2", env=env)
    local = _dump(tmp_path, "local", f"--data_path={data['prefix']}", "--steps=2",
                  f"--data_cache_path={tmp_path / 'maps_local'}")
    np.testing.assert_array_equal(remote["inputs"], local["inputs"])
    assert (remote["inputs"][:, :, 0] == 1).any()  # <fim_prefix> (id 1) starts rewritten rows
