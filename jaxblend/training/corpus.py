"""The built-in default corpus: three datasets from text every Python installation has.

* `code`  - the Python standard library's source files, one document per file;
* `prose` - their docstrings and comment blocks, one document per docstring / comment block;
* `legal` - licence and metadata texts of the installed packages (`*.dist-info`) and Python's own
  LICENSE, one document per file.

Nothing is downloaded. The raw documents are written as jsonl (sorted, deterministic), then
tokenized by the real preprocessing CLI (`python -m jaxblend.tools.preprocess`) with the built-in
byte tokenizer. Finished datasets are reused on later runs.
"""

from __future__ import annotations

import ast
import io
import json
import os
import site
import sys
import sysconfig
import tokenize
from collections.abc import Iterator
from pathlib import Path

from absl import logging

DATASETS = ("code", "prose", "legal")


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3"}
    files = [
        p for p in root.rglob("*.py")
        if not skip.intersection(p.relative_to(root).parts[:-1])
    ]
    return sorted(files)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def code_documents() -> Iterator[str]:
    """Standard-library source files."""
    for path in _stdlib_files():
        text = _read(path)
        if text and text.strip():
            yield text


def prose_documents() -> Iterator[str]:
    """Docstrings and comment blocks of the standard library."""
    for path in _stdlib_files():
        text = _read(path)
        if not text:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    yield doc
        block: list[str] = []
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type == tokenize.COMMENT:
                    block.append(tok.string.lstrip("#").strip())
                elif tok.type not in (tokenize.NL, tokenize.NEWLINE) and block:
                    if sum(map(len, block)) > 80:
                        yield "\n".join(block)
                    block = []
        except (tokenize.TokenError, SyntaxError):
            continue


def legal_documents() -> Iterator[str]:
    """Licence and metadata texts of installed distributions, and Python's LICENSE."""
    roots = {Path(p) for p in [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]}
    files: set[Path] = set()
    for root in roots:
        if not root.is_dir():
            continue
        for dist in root.glob("*.dist-info"):
            for p in dist.rglob("*"):
                if p.is_file() and (p.name.upper().startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS")) or p.name == "METADATA"):
                    files.add(p)
    own = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"
    if own.is_file():
        files.add(own)
    for path in sorted(files):
        text = _read(path)
        if text and text.strip():
            yield text


_SOURCES = {"code": code_documents, "prose": prose_documents, "legal": legal_documents}


def write_raw(directory: str, max_bytes_per_dataset: int) -> dict[str, str]:
    """Writes `<directory>/<name>.jsonl` for each dataset (atomically); returns their paths."""
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for name, documents in _SOURCES.items():
        path = os.path.join(directory, f"{name}.jsonl")
        paths[name] = path
        if os.path.exists(path):
            continue
        tmp = f"{path}.tmp-{os.getpid()}"
        written = count = 0
        with open(tmp, "w", encoding="utf-8") as f:
            for text in documents():
                line = json.dumps({"text": text}, ensure_ascii=False)
                f.write(line + "\n")
                written += len(line) + 1
                count += 1
                if written >= max_bytes_per_dataset:
                    break
        if count == 0:
            os.unlink(tmp)
            raise RuntimeError(f"no {name!r} documents found on this machine for the default corpus")
        os.replace(tmp, path)
        logging.info("default corpus: %s: %d documents, %.1f MB", name, count, written / 1e6)
    return paths


def python_executable() -> str:
    """The interpreter running jaxblend (used to start the preprocessing CLI)."""
    return sys.executable
