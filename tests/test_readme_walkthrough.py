"""README "Your own data" runs as written: its bash blocks, in order, against the local S3 (moto)
and GCS (fake-gcs-server) servers.

The first block only sets the walkthrough's placeholders (`$DATA`, `$TOKENIZER`, `$BUCKET`,
`$S3_ENDPOINT`); the test gives them its own values (a temporary directory holding a generated
`corpus.jsonl` and `tokenizer.json`, a fresh bucket path on the local server and its endpoint) and
runs every other block unchanged with bash, checking what each should have done. The S3 endpoint
reaches the bucket run only through the README's `--s3_endpoint` (none in the environment).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys

import pytest

from tests.preprocess.conftest import make_documents

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLACEHOLDERS = ["DATA", "TOKENIZER", "BUCKET", "S3_ENDPOINT"]
ENDPOINT_ENVS = ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_runs = itertools.count()


def section_blocks(readme: str, title: str = "## Your own data") -> list[str]:
    """The fenced bash blocks of one README section, in order."""
    start = readme.index(title + "\n")
    end = readme.find("\n## ", start + len(title))
    section = readme[start : end if end >= 0 else len(readme)]
    return re.findall(r"^```bash\n(.*?)^```$", section, flags=re.DOTALL | re.MULTILINE)


def _user_inputs(data: str, tokenizer_dir: str) -> str:
    """What the user brings: ``corpus.jsonl`` in ``data`` and a HuggingFace ``tokenizer.json``
    (a tiny byte-level BPE trained here); returns the tokenizer's path."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    docs = make_documents(400, seed=11)
    os.makedirs(data)
    with open(os.path.join(data, "corpus.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(docs, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ))
    os.makedirs(tokenizer_dir)
    path = os.path.join(tokenizer_dir, "tokenizer.json")
    bpe.save(path)
    return path


def _bash(block: str, env: dict[str, str], cwd: str) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{block}\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def test_the_placeholder_block_sets_exactly_the_placeholders():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = section_blocks(f.read())
    names = re.findall(r"^export (\w+)=", blocks[0], flags=re.MULTILINE)
    assert names == PLACEHOLDERS
    assert all(not s.strip() or s.startswith(("#", "export ")) for s in blocks[0].splitlines())


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_your_own_data_walkthrough_runs_as_written(kind, request, tmp_path):
    server = request.getfixturevalue(f"{kind}_server")
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = section_blocks(f.read())
    assert len(blocks) == 5, "the walkthrough's blocks changed: update this test"
    data = str(tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if k not in (*ENDPOINT_ENVS, "XLA_FLAGS")}
    env.update({k: v for k, v in server.environ().items() if k not in ENDPOINT_ENVS})
    env.update(
        PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
        PYTHONPATH=ROOT,
        DATA=data,
        TOKENIZER=_user_inputs(data, str(tmp_path / "model")),
        BUCKET=server.prefix_url(f"walkthrough{next(_runs)}"),
        S3_ENDPOINT=server.url if kind == "s3" else "",
    )
    cwd = str(tmp_path)
    _, tokenize, inspect, train, bucket = blocks

    _bash(tokenize, env, cwd)
    for name in ("corpus_text_document.bin", "corpus_text_document.idx",
                 ".jaxblend/corpus.preprocess.json"):
        assert os.path.isfile(os.path.join(data, "tok", name))

    out = _bash(inspect, env, cwd)
    assert "tokenizer HuggingFaceTokenizer (vocab 300): eod 0, pad none" in out
    assert "preflight: ok" in out.splitlines()
    assert out.count("\n      text: ") == 8

    out = _bash(train, env, cwd).splitlines()
    assert "finished at step 6" in "\n".join(out)
    assert f"resumed from {data}/checkpoints step 6" in out
    assert any(s.startswith("finished at step 12: final loss") for s in out)

    out = _bash(bucket, env, cwd).splitlines()
    assert out[:3] == [f"copied {n}" for n in (
        ".jaxblend/corpus.preprocess.json", "corpus_text_document.bin", "corpus_text_document.idx")]
    assert f"resumed from {data}/checkpoints step 12" in out
    assert any(s.startswith("finished at step 18: final loss") for s in out), out
