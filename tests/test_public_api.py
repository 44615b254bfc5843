"""The README's usage example, run on small generated data, and the Grain source protocol."""

from __future__ import annotations

import json
import pickle

import grain
import jax
import numpy as np
from helpers_data import write_random_dataset

import jaxblend


def test_readme_example_and_grain_protocol(tmp_path):
    rng = np.random.default_rng(0)
    prefixes = []
    dtype = jaxblend.token_dtype_for_vocab(50257).type
    for name in ("a_text_document", "b_text_document"):
        prefixes.append(write_random_dataset(
            str(tmp_path / name), rng, 300, lengths=(5, 80), vocab=(0, 50256), eod=50256, dtype=dtype))
    seq, batch = 32, 16
    config = jaxblend.index.GPTDataConfig(
        blend=["30", prefixes[0], "70", prefixes[1]], split="969,30,1", seq_length=seq, seed=1234,
        num_samples=(batch * 10, batch, 0))
    access = jaxblend.DataAccess.from_env().with_maps(location=str(tmp_path / "cache"))
    sources = jaxblend.open_gpt_sources(
        config, jaxblend.GPTSchemaOptions(eod_id=50256, eod_mask_loss=True),
        access=access)
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    loader = jaxblend.make_loader(sources["train"], mesh, global_batch_size=batch)
    batches = list(loader)
    assert len(batches) == 10
    assert batches[0]["inputs"].shape == (batch, seq)
    ids = np.concatenate([np.asarray(b["sample_ids"]) for b in batches])
    np.testing.assert_array_equal(ids, np.arange(10 * batch))  # every sample once, in order
    state = json.loads(json.dumps(loader.state()))
    assert state["step"] == 10

    src = sources["train"]
    assert isinstance(src, jaxblend.BlendedSource)
    ds = grain.MapDataset.source(src)
    assert len(ds) == len(src)
    np.testing.assert_array_equal(ds[5]["inputs"], src[5]["inputs"])
    assert repr(pickle.loads(pickle.dumps(src))) == repr(src)
    mock = jaxblend.MockSource(64, jaxblend.GPTSchemaOptions(), seq_length=8)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(mock))[3]["inputs"], mock[3]["inputs"])


def test_every_sample_of_an_epoch_exactly_once(tmp_path):
    rng = np.random.default_rng(1)
    prefix = write_random_dataset(str(tmp_path / "d"), rng, 200, lengths=(5, 60))
    config = jaxblend.index.GPTDataConfig(blend=[prefix], split="100,0,0", seq_length=16)
    src = jaxblend.open_gpt_sources(config, jaxblend.GPTSchemaOptions())["train"]
    mesh = jax.make_mesh((4, 2), ("data", "tensor"))
    batches = list(jaxblend.make_loader(src, mesh, global_batch_size=8))
    assert len(batches) == len(src) // 8
    ids = np.concatenate([np.asarray(b["sample_ids"]) for b in batches])
    np.testing.assert_array_equal(np.sort(ids), np.arange(len(batches) * 8))
    # ...and the split's order is a permutation of all of the epoch's sample-index rows.
    maps = src.span_index.maps.constituent(0)
    assert sorted(np.asarray(maps.shuffle_index).tolist()) == list(range(len(src)))


def _top_level_names(tree):
    """(names a module defines, names it imports) at its top level."""
    import ast

    defined, imported = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node.col_offset == 0:
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return defined, imported


def test_modules_export_only_their_own_names():
    # A module's `__all__` lists what it defines; other modules' names are imported from where
    # they are defined (package `__init__.py` facades excepted: they are the public API).
    import ast
    import pathlib

    offenders = []
    for path in pathlib.Path(jaxblend.__file__).parent.rglob("*.py"):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        defined, imported = _top_level_names(tree)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                names = [e.value for e in node.value.elts]
                offenders += [f"{path.name}: {n}" for n in names if n in imported and n not in defined]
    assert not offenders, f"modules re-exporting other modules' names: {offenders}"


def test_each_public_name_has_one_package_facade():
    import collections
    import importlib

    facades = ["index", "loading", "preprocess", "sampling", "sources", "storage"]
    where = collections.defaultdict(list)
    for name in facades:
        for public in importlib.import_module(f"jaxblend.{name}").__all__:
            where[public].append(name)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}
