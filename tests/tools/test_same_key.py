"""The same flags give the same index-map key and publication key in every program: what
`build_index` builds is what `inspect` (preflight, explain, mixture), `dump_samples`,
`dump_batches` and training load without building anything, and `inspect preflight` says
"cached" exactly when training will not build (with a bucket cache: only once the maps are
published).

Each program runs in this process on one set of flag values (with and without `--data_schedule`,
with and without explicit sample counts, with a local and a bucket `--data_cache_path`): the
tools through their `main`, training through the functions its `main` calls to assemble and open
its data. The flags of all five programs are defined once in absl's `FLAGS` (a flag two programs
both define, e.g. `--out`, once) and removed afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os

import numpy as np
import pytest
from absl import flags
from helpers_data import write_random_dataset

from jaxblend import cli, train
from jaxblend.cli import phase_flags, tool_flags
from jaxblend.sources.source_identity import gpt_source_fingerprint
from jaxblend.tools import build_index, dump_batches, dump_samples
from jaxblend.tools import inspect as inspect_tool

SEQ, B, ITERS = 16, 8, 6
_DEFINES = ("DEFINE_integer", "DEFINE_string", "DEFINE_bool", "DEFINE_float", "DEFINE_list",
            "DEFINE_enum")


@contextlib.contextmanager
def _every_programs_flags():
    """Defines the flags of build_index, inspect, dump_samples, dump_batches and training in
    absl's `FLAGS` (a name several programs define, once); removes the ones it added."""
    fl = flags.FLAGS
    added = []
    originals = {name: getattr(flags, name) for name in _DEFINES}

    def once(define):
        def wrapper(name, *args, **kwargs):
            if name not in fl:
                define(name, *args, **kwargs)
                added.append(name)
        return wrapper

    for name, define in originals.items():
        setattr(flags, name, once(define))
    try:
        for define in (
            cli.define_data_flags, cli.define_schema_flags, cli.define_source_flags,
            cli.define_step_plan_flags, cli.define_mesh_flags, cli.define_loader_flags,
            cli.define_distributed_flags, cli.define_tokenizer_flags, cli.define_train_flags,
            phase_flags.define_phase_flags, tool_flags.define_inspect_flags,
            tool_flags.define_decode_flags, tool_flags.define_dump_samples_flags,
            tool_flags.define_dump_batches_flags,
        ):
            define()
        flags.DEFINE_bool("verbose", False, "entry.run's flag")  # the patched DEFINE: once
    finally:
        for name, define in originals.items():
            setattr(flags, name, define)
    if not fl.is_parsed():
        fl(["test"])
    saved = {name: fl[name].value for name in fl}
    try:
        yield fl
    finally:
        for name, value in saved.items():
            if fl[name].value != value:
                fl[name].value = value
        for name in added:
            delattr(fl, name)


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


def _set_flags(fl, datasets, store: _Store, tmp_path, scheduled: bool, explicit: bool, server):
    a, b = datasets
    fl.data_path, fl.split, fl.seq_length = [f"30 {a} 70 {b}"], "80,15,5", SEQ
    fl.global_batch_size, fl.train_iters, fl.eval_interval, fl.eval_iters = B, ITERS, 3, 2
    fl.data_cache_path, fl.vocab_size, fl.mesh_shape, fl.mesh_axes = store.location, 500, "8", "data"
    fl.workdir, fl.checkpoint_dir = str(tmp_path / "run"), str(tmp_path / "run" / "ckpt")
    if store.mirror is not None:
        fl.data_cache_mirror = store.mirror
    if server is not None and server.scheme == "s3":
        fl.s3_endpoint = server.url
    if explicit:
        fl.train_samples, fl.valid_samples, fl.test_samples = 64, 24, 8
    if scheduled:
        path = tmp_path / "schedule.json"
        path.write_text(json.dumps({"stages": [
            {"start_step": 0, "blend": ["50", a, "50", b]},
            {"start_step": 2, "blend": ["20", a, "80", b]},
        ]}))
        fl.data_schedule = str(path)


def _run(main, argv, capsys) -> str:
    capsys.readouterr()
    main(argv)
    return capsys.readouterr().out


def _check_every_program(fl, store: _Store, tmp_path, capsys, bucket: bool) -> None:
    fl.json = str(tmp_path / "preflight.json")
    _run(inspect_tool.main, ["inspect", "preflight"], capsys)
    before = json.loads((tmp_path / "preflight.json").read_text())
    assert before["cached"] is False and before["problems"] == [], before

    if bucket:  # maps in the bucket but no publication record: training would still publish
        fl.out, fl.num = str(tmp_path / "early"), 1
        _run(dump_samples.main, ["dump_samples"], capsys)
        out = _run(inspect_tool.main, ["inspect", "preflight"], capsys)
        assert "cached but not published" in out, out
        assert json.loads((tmp_path / "preflight.json").read_text())["cached"] is False

    out = _run(build_index.main, ["build_index"], capsys)
    key = next(line for line in out.splitlines() if line.startswith("index maps ")).split()[2]
    if bucket:
        assert any(line.startswith("published: ") for line in out.splitlines()), out
    built = store.contents()
    assert built

    _run(inspect_tool.main, ["inspect", "preflight"], capsys)
    after = json.loads((tmp_path / "preflight.json").read_text())
    assert after["fingerprint"] == before["fingerprint"] == key
    assert after["cached"] is True, after
    fl.json = None
    assert store.contents() == built

    fl.step = 1
    _run(inspect_tool.main, ["inspect", "explain"], capsys)
    assert store.contents() == built, "inspect explain built maps"
    fl.start_step, fl.end_step = 0, 4
    _run(inspect_tool.main, ["inspect", "mixture"], capsys)
    assert store.contents() == built, "inspect mixture built maps"
    fl.out, fl.num = str(tmp_path / "samples"), 2
    _run(dump_samples.main, ["dump_samples"], capsys)
    assert store.contents() == built, "dump_samples built maps"
    fl.out, fl.steps, fl.start_step = str(tmp_path / "batches"), 1, 0
    _run(dump_batches.main, ["dump_batches"], capsys)
    assert store.contents() == built, "dump_batches built maps"
    if bucket:
        out = _run(build_index.main, ["build_index"], capsys)
        assert any(line.startswith("already published: ") for line in out.splitlines()), out

    settings = cli.train_settings_from_flags()
    spec = train._data_spec(settings)
    data = train._open_data(spec, settings)
    assert store.contents() == built, "training built maps"
    assert data.train.fingerprint == gpt_source_fingerprint(
        key, "train", spec.run.schema, spec.run.config.seq_length,
        spec.run.config.add_extra_token_to_sequence,
    )
    assert set(data.valid) == {"valid"} and len(data.valid["valid"]) > 0


@pytest.mark.parametrize("scheduled", [False, True], ids=["blend", "data_schedule"])
@pytest.mark.parametrize("explicit", [False, True], ids=["derived_counts", "explicit_counts"])
def test_local_cache_same_key_everywhere(datasets, tmp_path, capsys, scheduled, explicit):
    store = _local_store(tmp_path / "cache")
    with _every_programs_flags() as fl:
        _set_flags(fl, datasets, store, tmp_path, scheduled, explicit, None)
        _check_every_program(fl, store, tmp_path, capsys, bucket=False)


@pytest.mark.parametrize("scheduled", [False, True], ids=["blend", "data_schedule"])
@pytest.mark.parametrize("explicit", [False, True], ids=["derived_counts", "explicit_counts"])
def test_bucket_cache_same_key_everywhere(
    datasets, tmp_path, capsys, object_store, scheduled, explicit
):
    name = f"{object_store.scheme}-{int(scheduled)}{int(explicit)}-{os.getpid()}"
    store = _bucket_store(object_store, name, tmp_path / "mirror")
    with _every_programs_flags() as fl:
        _set_flags(fl, datasets, store, tmp_path, scheduled, explicit, object_store)
        _check_every_program(fl, store, tmp_path, capsys, bucket=True)
