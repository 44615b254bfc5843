"""The publication record: what a training host needs to read a published data plan.

Two objects under `<map store URL>/published/` (docs/pod.md, "Publishing maps before a run"):

* the dataset table `<launch key>-<digest>.datasets` (`DatasetTable`, `encode_table`), written
  first: one fixed-width line per dataset, in the order of first appearance in the
  configuration, so a host reads any datasets' lines by byte range (`dataset_table`). A line is
  the JSON list `[prefix, dtype, bin_size, generation, fingerprint, tokenizer, check]` padded
  with spaces: `generation` is the `.bin` object generation at build (hex; empty for a local
  file), `tokenizer` the position of its facts in the head's list (null: no preprocessing
  record), `check` a digest of the fields, the position and the launch key (a misplaced or
  damaged line is refused). The name holds a digest of the content, so a head never names a
  table rewritten with other content;
* the head `<launch key>.json` (`Publication.to_bytes`), written LAST, the commit point: small
  whatever the number of datasets, with a SHA-256 `checksum` of the rest.

The launch key (`launch_key`) comes from the configuration as written, the index code and this
format's version, so a host finds the head without opening any dataset, and a head of an earlier
layout is never read. Pure: no I/O here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxblend import identity
from jaxblend.index import maps_key
from jaxblend.index.config import GPTDataConfig
from jaxblend.index.split import SPLIT_NAMES
from jaxblend.validation import require_int

FORMAT = "jaxblend-publication"
VERSION = 3
DIRECTORY = "published"
REPUBLISH = "publish it again with python -m jaxblend.tools.build_index and the run's data flags"


def launch_key(config: GPTDataConfig) -> str:
    """The head's name: the configuration as written (no dataset opened) and the index code.

    Two configurations naming the same data differently (another spelling of a prefix) get
    different records; each is published on its own.
    """
    return identity.fingerprint(
        FORMAT,
        VERSION,
        maps_layout=maps_key.MAPS_LAYOUT,
        index_code=maps_key.code_digest(),
        blend=None if config.blend is None else list(config.blend),
        blend_per_split=None
        if config.blend_per_split is None
        else [None if b is None else list(b) for b in config.blend_per_split],
        train_schedule=identity.OMIT  # the stages change the train split: their own record
        if config.train_schedule is None
        else [[s.start_sample, list(s.blend)] for s in config.train_schedule.stages],
        split=config.split,
        **config.sample_fields(),
        **config.packing_fields(),
    )


def record_key(key: str) -> str:
    """The head's object name under the map store's URL."""
    return f"{DIRECTORY}/{key}.json"


def record_url(location: str, key: str) -> str:
    """The head's URL for map store `location` and launch key `key`."""
    return f"{location.rstrip('/')}/{record_key(key)}"


def rows_entry(plan_key: str) -> str:
    """Name of the map-store entry holding the row tables of every split of plan `plan_key`."""
    return f"{plan_key}-rows"


def to_runs(positions: Sequence[int]) -> list[list[int]]:
    """`positions` as runs `[start, stop)` of consecutive integers (`[0, 1, 2, 7]` ->
    `[[0, 3], [7, 8]]`)."""
    p = np.asarray(positions, np.int64)
    if p.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(p) != 1) + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [p.size]])
    return [[int(p[a]), int(p[b - 1]) + 1] for a, b in zip(starts, stops)]


def from_runs(runs: Any) -> tuple[int, ...]:
    """The positions of `to_runs`'s runs.

    Raises:
      ValueError: not a list of `[start, stop)` pairs of integers with 0 <= start < stop.
    """
    if not isinstance(runs, list):
        raise ValueError("runs are not a list")  # noqa: TRY004
    out: list[int] = []
    for run in runs:
        if (
            not isinstance(run, list)
            or len(run) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in run)
            or not 0 <= run[0] < run[1]
        ):
            raise ValueError(f"run {run!r} is not [start, stop) with 0 <= start < stop")
        out.extend(range(run[0], run[1]))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class PublishedDataset:
    """One dataset as the publisher saw it (one line of the dataset table).

    Attributes:
      prefix: the prefix as the configuration names it.
      dtype: the token dtype (numpy `dtype.str`, e.g. "<u2").
      bin_size: bytes of the `.bin`.
      generation: the `.bin` object generation (hex) at build; "" for a local file.
      fingerprint: the dataset's content fingerprint.
      tokenizer: the tokenizer facts its preprocessing record holds
        (`jaxblend.tokenizer_facts.TokenizerFacts.to_json` plus `max_token_id`), or None without a
        record; hosts take them from the publication instead of reading one record per dataset.
    """

    prefix: str
    dtype: str
    bin_size: int
    generation: str
    fingerprint: str
    tokenizer: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("prefix", "dtype", "generation", "fingerprint"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"dataset field {name!r} must be a string")  # noqa: TRY004
        if not self.prefix or not self.dtype or not self.fingerprint:
            raise ValueError("dataset prefix, dtype and fingerprint must not be empty")
        require_int(f"dataset {self.prefix}: bin_size", self.bin_size, 0)
        if self.tokenizer is not None and not isinstance(self.tokenizer, Mapping):
            raise ValueError(f"dataset {self.prefix}: tokenizer must be an object or null")


@dataclasses.dataclass(frozen=True)
class DatasetTable:
    """The head's description of the dataset table (see the module docstring).

    Attributes:
      key: the table's object name under the map store's URL.
      count: its lines, one per dataset.
      width: bytes of every line, its newline included.
      masked: table positions of the datasets with a stored loss mask
        (`jaxblend.loss_masks.loss_mask_prefix`), ascending.
      tokenizers: the distinct tokenizer facts of the datasets, in order of first appearance.
      uniform: every dataset has `tokenizers[0]` (or, `tokenizers` empty, none has facts): a host
        then needs no line for them.
      remote: some dataset is in an object store (not a local file).
    """

    key: str
    count: int
    width: int
    masked: tuple[int, ...] = ()
    tokenizers: tuple[Mapping[str, Any], ...] = ()
    uniform: bool = True
    remote: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "masked", tuple(self.masked))
        object.__setattr__(self, "tokenizers", tuple(dict(t) for t in self.tokenizers))
        if not isinstance(self.key, str) or not self.key:
            raise ValueError("table key must be an object name")
        for name in ("count", "width"):
            require_int(f"table {name}", getattr(self, name), 1)
        if any(not 0 <= m < self.count for m in self.masked):
            raise ValueError(f"table masked positions must lie in [0, {self.count})")
        for name in ("uniform", "remote"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"table {name} must be true or false")  # noqa: TRY004

    @property
    def size(self) -> int:
        """Bytes of the table object."""
        return self.count * self.width

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "masked": to_runs(self.masked)}

    @classmethod
    def from_json(cls, value: Any) -> DatasetTable:
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(value, dict) or set(value) != fields:
            raise ValueError(f"the dataset table is not an object with {sorted(fields)}")
        tokenizers = value["tokenizers"]
        if not isinstance(tokenizers, list) or not all(isinstance(t, dict) for t in tokenizers):
            raise ValueError("table tokenizers is not a list of objects")
        return cls(**{**value, "masked": from_runs(value["masked"]), "tokenizers": tokenizers})


def _canonical(value: Any) -> bytes:
    """Compact JSON with sorted keys: the bytes a head is written as and its checks digest."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _line_check(launch: str, position: int, fields: list[Any]) -> str:
    return hashlib.sha256(_canonical([launch, position, fields])).hexdigest()[:16]


def encode_table(
    launch: str, datasets: Sequence[PublishedDataset], masked: Sequence[int], remote: bool
) -> tuple[DatasetTable, bytes]:
    """The dataset table of `datasets` (publication `launch`): its head description and bytes."""
    tokenizers: list[dict[str, Any]] = []
    position: dict[str, int] = {}
    lines = []
    for k, d in enumerate(datasets):
        t = None
        if d.tokenizer is not None:
            text = json.dumps(dict(d.tokenizer), sort_keys=True)
            if text not in position:
                position[text] = len(tokenizers)
                tokenizers.append(dict(d.tokenizer))
            t = position[text]
        fields = [d.prefix, d.dtype, d.bin_size, d.generation, d.fingerprint, t]
        line = json.dumps([*fields, _line_check(launch, k, fields)], separators=(",", ":"))
        lines.append(line.encode("utf-8"))
    width = max(len(line) for line in lines) + 1
    body = b"".join(line.ljust(width - 1) + b"\n" for line in lines)
    has = [d.tokenizer is not None for d in datasets]
    uniform = (not any(has)) or (all(has) and len(tokenizers) == 1)
    digest = hashlib.sha256(body).hexdigest()[:16]
    table = DatasetTable(
        f"{DIRECTORY}/{launch}-{digest}.datasets", len(lines), width, tuple(sorted(masked)),
        tuple(tokenizers), uniform, remote,
    )
    return table, body


def decode_line(launch: str, table: DatasetTable, position: int, line: bytes) -> PublishedDataset:
    """Dataset `position` from its line of `table` (publication `launch`).

    Raises:
      ValueError: not a line of this table at this position (malformed, damaged, misplaced).
    """
    try:
        value = json.loads(line.decode("utf-8"))
        if not isinstance(value, list) or len(value) != 7:
            raise ValueError("not a list of 7 fields")
        *fields, check = value
        if check != _line_check(launch, position, fields):
            raise ValueError("its check does not match (damaged, or not this publication's line)")
        t = fields[5]
        if t is not None and (
            isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < len(table.tokenizers)
        ):
            raise ValueError(f"tokenizer {t!r} is not one of the {len(table.tokenizers)} recorded")
        return PublishedDataset(*fields[:5], None if t is None else table.tokenizers[t])
    except (UnicodeDecodeError, ValueError, TypeError) as err:
        raise ValueError(f"dataset {position}: {err}") from None


@dataclasses.dataclass(frozen=True)
class PublishedSplit:
    """One split of the plan.

    Attributes:
      length: its samples (> 0; splits without samples are left out of the record).
      datasets: table positions of the split's datasets, in the split's order (the row table's
        dataset ids index this tuple).
      rows_url: URL of the map-store entry holding its row table.
    """

    length: int
    datasets: tuple[int, ...]
    rows_url: str

    def __post_init__(self) -> None:
        require_int("split length", self.length, 1)
        object.__setattr__(self, "datasets", tuple(self.datasets))
        if not self.datasets or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in self.datasets
        ):
            raise ValueError("split datasets must be a non-empty list of positions")
        if not isinstance(self.rows_url, str) or not self.rows_url:
            raise ValueError("split rows_url must be a URL")

    def to_json(self) -> dict[str, Any]:
        return {"length": self.length, "datasets": to_runs(self.datasets), "rows": self.rows_url}

    @classmethod
    def from_json(cls, value: Any) -> PublishedSplit:
        if not isinstance(value, dict) or set(value) != {"length", "datasets", "rows"}:
            raise ValueError("a split is not an object with length, datasets, rows")
        return cls(value["length"], from_runs(value["datasets"]), value["rows"])


@dataclasses.dataclass(frozen=True)
class Publication:
    """A published data plan: its head (see the module docstring).

    Attributes:
      launch_key: the head's name (`launch_key` of the configuration).
      plan_key: the maps' fingerprint.
      table: the dataset table holding every dataset of the configuration.
      splits: split name -> its description; splits without samples are absent.
    """

    launch_key: str
    plan_key: str
    table: DatasetTable
    splits: Mapping[str, PublishedSplit]

    def __post_init__(self) -> None:
        object.__setattr__(self, "splits", dict(self.splits))
        for name, split in self.splits.items():
            if name not in SPLIT_NAMES:
                raise ValueError(f"unknown split {name!r}")
            if max(split.datasets) >= self.table.count:
                raise ValueError(f"split {name} names dataset {max(split.datasets)} of "
                                 f"{self.table.count}")

    def to_bytes(self) -> bytes:
        """The head as written: compact canonical JSON with its checksum."""
        body = {
            "format": FORMAT,
            "version": VERSION,
            "launch_key": self.launch_key,
            "plan_key": self.plan_key,
            "table": self.table.to_json(),
            "splits": {k: self.splits[k].to_json() for k in SPLIT_NAMES if k in self.splits},
        }
        body["checksum"] = hashlib.sha256(_canonical(body)).hexdigest()
        return _canonical(body)

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Publication:
        """Parses and checks a head read from `where`.

        Raises:
          ValueError: not a head, another format version, a checksum mismatch or a malformed
            field (one line naming `where` and what to do).
        """
        try:
            body = json.loads(data.decode("utf-8"))
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")  # noqa: TRY004
            if body.get("format") != FORMAT or body.get("version") != VERSION:
                raise ValueError(
                    f"format {body.get('format')!r} version {body.get('version')!r}, this jaxblend "
                    f"reads {FORMAT!r} version {VERSION}"
                )
            checksum = body.pop("checksum", None)
            if checksum != hashlib.sha256(_canonical(body)).hexdigest():
                raise ValueError("checksum mismatch (the record was damaged)")
            if not isinstance(body.get("splits"), dict):
                raise ValueError("splits missing")  # noqa: TRY004
            for k in ("launch_key", "plan_key"):
                if not isinstance(body.get(k), str):
                    raise ValueError(f"{k} missing")  # noqa: TRY004
            return cls(
                body["launch_key"],
                body["plan_key"],
                DatasetTable.from_json(body.get("table")),
                {k: PublishedSplit.from_json(v) for k, v in body["splits"].items()},
            )
        except (UnicodeDecodeError, ValueError, TypeError) as err:
            raise ValueError(f"publication record {where}: unreadable ({err}); {REPUBLISH}") from None
