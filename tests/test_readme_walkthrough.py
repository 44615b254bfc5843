"""README "Your own data" runs as written: its bash blocks, in order, against the local S3 (moto)
and GCS (fake-gcs-server) servers, the way the README says to run them.

The first block activates the virtual environment, sets the walkthrough's placeholders (`$DATA`,
`$TOKENIZER`, `$BUCKET`, `$S3_ENDPOINT`) and, for a local S3 server, dummy credentials. The test
runs it as it is except for the placeholders' values (a temporary directory holding a generated
`corpus.jsonl` and `tokenizer.json`, a fresh bucket path on the local server and its endpoint) and
the path of the environment it activates (the one running this test: `.venv/` of the clone under
`dev.py test`); every later block runs unchanged after it in one bash at the repository root,
checked for what it should have done. Nothing else is set up: no interpreter on `PATH`, no
credentials and no endpoint in the environment (the S3 endpoint reaches the bucket run only through
the README's `--s3_endpoint`); only the fake GCS server's own emulator settings are given, which
a real bucket does not need.

The blocks before the bucket's (tokenize, inspect, train) read and write only `$DATA`: they run
once for the module, and each bucket test starts from their outcome (the checkpoints of step 12
as the second training command left them).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.preprocess.conftest import make_documents

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLACEHOLDERS = ["DATA", "TOKENIZER", "BUCKET", "S3_ENDPOINT"]
ENDPOINT_ENVS = ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
# What the walkthrough's shell must get from the README alone.
USER_ENVS = (*ENDPOINT_ENVS, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
             "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "VIRTUAL_ENV", "XLA_FLAGS")
ACTIVATE = "source .venv/bin/activate"
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
    lines = blocks[0].splitlines()
    assert lines[0].split("#")[0].strip() == ACTIVATE
    credentials = [s for s in lines if not s.startswith(("#", "export ", ACTIVATE))]
    assert credentials[0].startswith('[ -z "$S3_ENDPOINT" ] || export ')  # only with S3_ENDPOINT
    assert re.findall(r"(\w+)=\$\{", " ".join(credentials)) == [
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"]


def _setup(block: str, values: dict[str, str]) -> str:
    """The first block with the test's placeholder values and this test's environment activated."""
    lines = []
    for line in block.splitlines():
        name = re.match(r"export (\w+)=", line)
        if name and name.group(1) in values:
            line = f"export {name.group(1)}={shlex.quote(values[name.group(1)])}"
        elif line.startswith(ACTIVATE):
            line = f"source {shlex.quote(os.path.join(sys.prefix, 'bin', 'activate'))}"
        lines.append(line)
    return "\n".join(lines)


def _environment(kind: str | None = None, server=None) -> dict[str, str]:
    """What the walkthrough's shell starts from: this process's environment without the user's
    settings, plus the fake GCS server's emulator settings for `kind` "gcs"."""
    env = {k: v for k, v in os.environ.items() if k not in USER_ENVS}
    if kind == "gcs":  # the fake GCS server's emulator settings (a real bucket needs none)
        env.update(server.environ())
    # The clone's own package (a no-op in a clone; a worktree's venv may point elsewhere).
    env["PYTHONPATH"] = ROOT
    return env


@dataclasses.dataclass(frozen=True)
class _Local:
    """The walkthrough's local part, run once: its blocks, placeholder values and checkpoints."""

    blocks: list[str]
    values: dict[str, str]
    trained: str  # a copy of `$DATA/checkpoints` after the second training command


@pytest.fixture(scope="module")
def local_part(tmp_path_factory) -> _Local:
    """Runs the blocks that use only `$DATA` (tokenize, inspect, train), checking each."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = section_blocks(f.read())
    assert len(blocks) == 5, "the walkthrough's blocks changed: update this test"
    tmp = tmp_path_factory.mktemp("walkthrough")
    data = str(tmp / "data")
    values = {"DATA": data, "TOKENIZER": _user_inputs(data, str(tmp / "model"))}
    setup = _setup(blocks[0], {**values, "BUCKET": "", "S3_ENDPOINT": ""})
    env, cwd = _environment(), ROOT
    _, tokenize, inspect, train, _ = (setup + "\n" + b for b in blocks)

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
    trained = str(tmp / "trained")
    shutil.copytree(os.path.join(data, "checkpoints"), trained)
    return _Local(blocks, values, trained)


def test_the_local_blocks_tokenize_inspect_and_train(local_part):
    data = local_part.values["DATA"]
    assert sorted(os.listdir(local_part.trained)) == ["12", "6"]
    assert os.path.isfile(os.path.join(data, "data.flags"))
    assert os.path.isfile(os.path.join(data, "model.flags"))


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_your_own_data_walkthrough_runs_as_written(kind, request, local_part):
    server = request.getfixturevalue(f"{kind}_server")
    data = local_part.values["DATA"]
    # The checkpoints as the local blocks left them (an earlier bucket test trained on).
    shutil.rmtree(os.path.join(data, "checkpoints"))
    shutil.copytree(local_part.trained, os.path.join(data, "checkpoints"))
    setup = _setup(local_part.blocks[0], {
        **local_part.values,
        "BUCKET": server.prefix_url(f"walkthrough{next(_runs)}"),
        "S3_ENDPOINT": server.url if kind == "s3" else "",
    })
    bucket = setup + "\n" + local_part.blocks[4]

    out = _bash(bucket, _environment(kind, server), ROOT).splitlines()
    assert out[:3] == [f"copied {n}" for n in (
        ".jaxblend/corpus.preprocess.json", "corpus_text_document.bin", "corpus_text_document.idx")]
    assert f"resumed from {data}/checkpoints step 12" in out
    assert any(s.startswith("finished at step 18: final loss") for s in out), out
