"""The same flags give the same index-map key and publication key in every program: what
`build_index` builds is what `inspect` (preflight, explain, mixture), `dump_samples`,
`dump_batches` and training load without building anything, and `inspect preflight` says
"cached" exactly when training will not build (with a bucket cache: only once the maps are
published).

Each program runs in this process on one command line (with and without `--data_schedule`, with
and without explicit sample counts, with a local and a bucket `--data_cache_path`): the tools
through `helpers_cli.run_tool`, as their command line runs them; training through the functions
its `main` calls to assemble and open its data, under its own flags (`cli.call` with
`train.define_flags`), without training.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers_cli import run_program, run_tool
from helpers_data import write_random_dataset

from jaxblend import cli, train
from jaxblend.sources.gpt_source import gpt_source_fingerprint

SEQ, B, ITERS = 16, 8, 6


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("same-key")
    rng = np.random.default_rng(5)
    return [write_random_dataset(str(root / n), rng, docs, lengths=(2, 60), vocab=(0, 500))
            for n, docs in (("a", 90), ("b", 140))]


class _Store:
    """The map store of one run: where it is and what it holds."""

    def __init__(self, location: str, list_keys, mirror: str | None = None):
        self.location, self._list, self.mirror = location, list_keys, mirror

    def contents(self) -> set[str]:
        return set(self._list())


def _local_store(path) -> _Store:
    def keys():
        return [os.path.relpath(os.path.join(d, f), path)
                for d, _, files in os.walk(path) for f in files]
    return _Store(str(path), keys)


def _bucket_store(server, name: str, mirror) -> _Store:
    prefix = f"same-key/{name}/maps"

    def keys():
        return [k.decode() for k in server.kvstore().list().result() if k.decode().startswith(prefix)]
    return _Store(server.prefix_url(prefix), keys, str(mirror))


def _flags(datasets, store: _Store, tmp_path, scheduled: bool, explicit: bool, server) -> list[str]:
    """The command line every program gets."""
    a, b = datasets
    argv = [
        f"--data_path=30 {a} 70 {b}", "--split=80,15,5", f"--seq_length={SEQ}",
        f"--global_batch_size={B}", f"--train_iters={ITERS}", "--eval_interval=3", "--eval_iters=2",
        f"--data_cache_path={store.location}",
    ]
    if store.mirror is not None:
        argv.append(f"--data_cache_mirror={store.mirror}")
    if server is not None and server.scheme == "s3":
        argv.append(f"--s3_endpoint={server.url}")
    if explicit:
        argv += ["--train_samples=64", "--valid_samples=24", "--test_samples=8"]
    if scheduled:
        path = tmp_path / "schedule.json"
        path.write_text(json.dumps({"stages": [
            {"start_step": 0, "blend": ["50", a, "50", b]},
            {"start_step": 2, "blend": ["20", a, "80", b]},
        ]}))
        argv.append(f"--data_schedule={path}")
    return argv


def _run(tool: str, argv: list[str]) -> str:
    return run_tool(f"jaxblend.tools.{tool}", argv, check=True).stdout


def _open_training_data(argv: list[str], tmp_path):
    """What training assembles and opens (its `_data_spec` and `_open_data`), under its flags."""
    opened = []

    def main(_):
        settings = cli.train_settings_from_flags()
        run, _ = train._data_spec(settings)
        opened.append((run, train._open_data(run)))

    train_argv = [*argv, "--vocab_size=500", f"--workdir={tmp_path / 'run'}",
                  f"--checkpoint_dir={tmp_path / 'run' / 'ckpt'}"]
    run_program(lambda args: cli.call(main, args, cli.MEGATRON_NARGS, define=train.define_flags),
                train_argv, check=True, name="train")
    return opened[0]


def _check_every_program(argv: list[str], store: _Store, tmp_path, bucket: bool) -> None:
    inspect = [*argv, "--vocab_size=500"]
    preflight = ["preflight", *inspect, f"--json={tmp_path / 'preflight.json'}"]
    _run("inspect", preflight)
    before = json.loads((tmp_path / "preflight.json").read_text())
    assert before["cached"] is False and before["problems"] == [], before

    if bucket:  # maps in the bucket but no publication record: training would still publish
        _run("dump_samples", [*argv, f"--out={tmp_path / 'early'}", "--num=1"])
        out = _run("inspect", preflight)
        assert "cached but not published" in out, out
        assert json.loads((tmp_path / "preflight.json").read_text())["cached"] is False

    out = _run("build_index", argv)
    key = next(line for line in out.splitlines() if line.startswith("index maps ")).split()[2]
    if bucket:
        assert any(line.startswith("published: ") for line in out.splitlines()), out
    built = store.contents()
    assert built

    _run("inspect", preflight)
    after = json.loads((tmp_path / "preflight.json").read_text())
    assert after["fingerprint"] == before["fingerprint"] == key
    assert after["cached"] is True, after
    assert store.contents() == built

    _run("inspect", ["explain", *inspect, "--step=1"])
    assert store.contents() == built, "inspect explain built maps"
    _run("inspect", ["mixture", *inspect, "--start_step=0", "--end_step=4"])
    assert store.contents() == built, "inspect mixture built maps"
    _run("dump_samples", [*argv, f"--out={tmp_path / 'samples'}", "--num=2"])
    assert store.contents() == built, "dump_samples built maps"
    _run("dump_batches", [*argv, f"--out={tmp_path / 'batches'}", "--steps=1", "--start_step=0",
                          "--mesh_shape=8", "--mesh_axes=data"])
    assert store.contents() == built, "dump_batches built maps"
    if bucket:
        out = _run("build_index", argv)
        assert any(line.startswith("already published: ") for line in out.splitlines()), out

    run, data = _open_training_data([*argv, "--mesh_shape=8", "--mesh_axes=data"], tmp_path)
    assert store.contents() == built, "training built maps"
    config = run.config
    assert data.train.fingerprint == gpt_source_fingerprint(
        key, "train", run.schema, config.seq_length, config.add_extra_token_to_sequence,
    )
    assert set(data.valid) == {"valid"} and len(data.valid["valid"]) > 0


@pytest.mark.parametrize("scheduled", [False, True], ids=["blend", "data_schedule"])
@pytest.mark.parametrize("explicit", [False, True], ids=["derived_counts", "explicit_counts"])
def test_local_cache_same_key_everywhere(datasets, tmp_path, scheduled, explicit):
    store = _local_store(tmp_path / "cache")
    argv = _flags(datasets, store, tmp_path, scheduled, explicit, None)
    _check_every_program(argv, store, tmp_path, bucket=False)


@pytest.mark.parametrize("scheduled", [False, True], ids=["blend", "data_schedule"])
@pytest.mark.parametrize("explicit", [False, True], ids=["derived_counts", "explicit_counts"])
def test_bucket_cache_same_key_everywhere(datasets, tmp_path, object_store, scheduled, explicit):
    name = f"{object_store.scheme}-{int(scheduled)}{int(explicit)}-{os.getpid()}"
    store = _bucket_store(object_store, name, tmp_path / "mirror")
    argv = _flags(datasets, store, tmp_path, scheduled, explicit, object_store)
    _check_every_program(argv, store, tmp_path, bucket=True)
