"""The built-in corpus is the same bytes everywhere: fixed digests, no dependence on the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jaxblend.training import corpus

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# SHA-256 of the raw corpus (corpus.corpus_digest) for the demo's default size (6 MB per dataset,
# --default_corpus_mb=6) and the test size (0.25 MB). Changing the generator changes these: bump
# corpus.VERSION too, so existing demo directories are not reused.
DIGESTS = {
    6_000_000: "26fe8bdf1129a85e1ecd289c54a3437b4286acec86f42dba3704fe23103a2ea9",
    250_000: "40c9122f1689c35ff8ef85911177424ec89b2df36ff610b5d433731165147b91",
}


def test_default_size_has_the_fixed_digest(tmp_path):
    paths = corpus.write_raw(str(tmp_path), 6_000_000)
    assert corpus.corpus_digest(paths) == DIGESTS[6_000_000]
    for name in corpus.DATASETS:
        size = os.path.getsize(paths[name])
        assert 6_000_000 <= size < 6_100_000, (name, size)


def test_same_bytes_in_another_interpreter_and_hash_seed(tmp_path):
    code = (
        "import sys; from jaxblend.training import corpus; "
        "print(corpus.corpus_digest(corpus.write_raw(sys.argv[1], 250_000)))"
    )
    env = dict(os.environ, PYTHONPATH=REPO, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=120, check=True, env=env)
    assert out.stdout.strip() == DIGESTS[250_000]


def test_smaller_budget_is_a_prefix_and_documents_are_text(tmp_path):
    small = corpus.write_raw(str(tmp_path / "small"), 250_000)
    large = corpus.write_raw(str(tmp_path / "large"), 600_000)
    for name in corpus.DATASETS:
        a = Path(small[name]).read_bytes()
        b = Path(large[name]).read_bytes()
        assert b.startswith(a) and len(b) > len(a)
        docs = [json.loads(line)["text"] for line in a.splitlines()]
        assert len(docs) > 20 and len(set(docs)) > 0.9 * len(docs)
    code = [json.loads(line)["text"] for line in Path(small["code"]).read_bytes().splitlines()]
    compile(code[0], "<corpus>", "exec")  # the code dataset is Python
