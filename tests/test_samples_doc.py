"""docs/samples.md: the fill-in-the-middle Python example runs as written on a generated code
corpus (only its dataset path replaced), and its batch holds FIM rows."""

from __future__ import annotations

import os
import re
import runpy

import numpy as np

from tests.helpers_fim import make_code_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python_blocks() -> list[str]:
    with open(os.path.join(ROOT, "docs", "samples.md"), encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.DOTALL)


def test_fim_python_example_runs(tmp_path):
    prefix, _ = make_code_dataset(tmp_path, "code", n=150, seed=4)
    (block,) = [b for b in _python_blocks() if "FIMOptions" in b]
    assert "/data/code_text_document" in block
    script = tmp_path / "fim_example.py"
    script.write_text(block.replace("/data/code_text_document", prefix), encoding="utf-8")
    scope = runpy.run_path(str(script))
    batch, train = scope["batch"], scope["train"]
    assert batch["inputs"].shape == (4, 2048)
    pre = train.transform.tokens.prefix
    rows = [train.get_batch(np.arange(k, k + 16))["inputs"] for k in range(0, 64, 16)]
    assert (np.concatenate(rows)[:, 0] == pre).mean() > 0.5  # rate 0.9: most rows start FIM
