"""The publication record: what a training host needs to read a published data plan.

A record is one small JSON object (`Publication.to_bytes`), written last by the publishing job
(`jaxblend.map_store.publication`) at `<map store URL>/published/<launch key>.json`. The launch
key (`launch_key`) is computed from the data configuration as written (prefixes as given, split,
sequence length, seed, sample counts, every setting that changes the maps) and the index code, so
a host finds the record without opening any dataset. The record holds:

* `plan_key`: the maps' fingerprint (`DataMaps.fingerprint`), which the loader state and the
  sources' fingerprints are built from;
* per dataset (in the order of first appearance in the configuration): its prefix as given, token
  dtype, `.bin` size in bytes, the `.bin` object generation seen at build (hex; empty for a local
  file, whose version stamp means nothing on another host) and its content fingerprint;
* per split with samples: its length, the positions (into the dataset list) of its datasets in
  the split's own order, and the URL of the map-store entry holding its row table;
* `checksum`: SHA-256 of the canonical JSON of everything else.

Pure: no I/O here (the publication module reads and writes records).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from jaxblend import identity
from jaxblend.index import maps_key
from jaxblend.index.config import GPTDataConfig

FORMAT = "jaxblend-publication"
VERSION = 2
DIRECTORY = "published"
SPLITS = ("train", "valid", "test")


def launch_key(config: GPTDataConfig) -> str:
    """The record's name: the configuration as written (no dataset opened) and the index code.

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
    """The record's object name under the map store's URL."""
    return f"{DIRECTORY}/{key}.json"


def record_url(location: str, key: str) -> str:
    """The record's URL for map store `location` and launch key `key`."""
    return f"{location.rstrip('/')}/{record_key(key)}"


def rows_entry(plan_key: str) -> str:
    """Name of the map-store entry holding the row tables of every split of plan `plan_key`."""
    return f"{plan_key}-rows"


@dataclasses.dataclass(frozen=True)
class PublishedDataset:
    """One dataset as the publisher saw it.

    Attributes:
      prefix: the prefix as the configuration names it.
      dtype: the token dtype (numpy `dtype.str`, e.g. "<u2").
      bin_size: bytes of the `.bin`.
      generation: the `.bin` object generation (hex) at build; "" for a local file.
      fingerprint: the dataset's content fingerprint.
      tokenizer: the tokenizer facts its preprocessing record holds
        (`jaxblend.tokenizer_facts.TokenizerFacts.to_json` plus `max_token_id`), or None without a
        record; hosts take them from here instead of reading one record per dataset.
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
        if isinstance(self.bin_size, bool) or not isinstance(self.bin_size, int) or self.bin_size < 0:
            raise ValueError(f"dataset {self.prefix}: bin_size must be an integer >= 0")
        if self.tokenizer is not None and not isinstance(self.tokenizer, Mapping):
            raise ValueError(f"dataset {self.prefix}: tokenizer must be an object or null")

    def to_json(self) -> list[Any]:
        tokenizer = None if self.tokenizer is None else dict(self.tokenizer)
        return [self.prefix, self.dtype, self.bin_size, self.generation, self.fingerprint, tokenizer]

    @classmethod
    def from_json(cls, value: Any) -> PublishedDataset:
        if not isinstance(value, list) or len(value) != 6:
            raise ValueError("a dataset is not a list of 6 fields")
        return cls(*value)


@dataclasses.dataclass(frozen=True)
class PublishedSplit:
    """One split of the plan.

    Attributes:
      length: its samples (> 0; splits without samples are left out of the record).
      datasets: positions into `Publication.datasets` of the split's datasets, in the split's
        order (the row table's dataset ids index this tuple).
      rows_url: URL of the map-store entry holding its row table.
    """

    length: int
    datasets: tuple[int, ...]
    rows_url: str

    def __post_init__(self) -> None:
        if isinstance(self.length, bool) or not isinstance(self.length, int) or self.length < 1:
            raise ValueError(f"split length must be an integer >= 1, got {self.length!r}")
        object.__setattr__(self, "datasets", tuple(self.datasets))
        if not self.datasets or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in self.datasets
        ):
            raise ValueError("split datasets must be a non-empty list of positions")
        if not isinstance(self.rows_url, str) or not self.rows_url:
            raise ValueError("split rows_url must be a URL")

    def to_json(self) -> dict[str, Any]:
        return {"length": self.length, "datasets": list(self.datasets), "rows": self.rows_url}

    @classmethod
    def from_json(cls, value: Any) -> PublishedSplit:
        if not isinstance(value, dict) or set(value) != {"length", "datasets", "rows"}:
            raise ValueError("a split is not an object with length, datasets, rows")
        if not isinstance(value["datasets"], list):
            raise ValueError("split datasets is not a list")  # noqa: TRY004
        return cls(value["length"], tuple(value["datasets"]), value["rows"])


@dataclasses.dataclass(frozen=True)
class Publication:
    """A published data plan (see the module docstring).

    Attributes:
      launch_key: the record's name (`launch_key` of the configuration).
      plan_key: the maps' fingerprint.
      datasets: every dataset of the configuration, in order of first appearance.
      splits: split name -> its description; splits without samples are absent.
    """

    launch_key: str
    plan_key: str
    datasets: tuple[PublishedDataset, ...]
    splits: Mapping[str, PublishedSplit]

    def __post_init__(self) -> None:
        object.__setattr__(self, "datasets", tuple(self.datasets))
        object.__setattr__(self, "splits", dict(self.splits))
        for name, split in self.splits.items():
            if name not in SPLITS:
                raise ValueError(f"unknown split {name!r}")
            if max(split.datasets) >= len(self.datasets):
                raise ValueError(f"split {name} names dataset {max(split.datasets)} of "
                                 f"{len(self.datasets)}")

    def split_datasets(self, name: str) -> list[PublishedDataset]:
        """The datasets of split `name`, in the split's order."""
        return [self.datasets[k] for k in self.splits[name].datasets]

    def body(self) -> dict[str, Any]:
        """The record's JSON body without its checksum."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "launch_key": self.launch_key,
            "plan_key": self.plan_key,
            "datasets": [d.to_json() for d in self.datasets],
            "splits": {k: self.splits[k].to_json() for k in SPLITS if k in self.splits},
        }

    def to_bytes(self) -> bytes:
        """The record as written: compact canonical JSON with its checksum."""
        body = self.body()
        body["checksum"] = _checksum(body)
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Publication:
        """Parses and checks a record read from `where`.

        Raises:
          ValueError: not a record, another format version, a checksum mismatch or a malformed
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
            if checksum != _checksum(body):
                raise ValueError("checksum mismatch (the record was damaged)")
            if not isinstance(body.get("datasets"), list) or not isinstance(body.get("splits"), dict):
                raise ValueError("datasets/splits missing")  # noqa: TRY004
            for k in ("launch_key", "plan_key"):
                if not isinstance(body.get(k), str):
                    raise ValueError(f"{k} missing")  # noqa: TRY004
            return cls(
                body["launch_key"],
                body["plan_key"],
                tuple(PublishedDataset.from_json(d) for d in body["datasets"]),
                {k: PublishedSplit.from_json(v) for k, v in body["splits"].items()},
            )
        except (UnicodeDecodeError, ValueError, TypeError) as err:
            raise ValueError(
                f"publication record {where}: unreadable ({err}); publish it again with "
                "python -m jaxblend.tools.build_index and the run's data flags"
            ) from None


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    ).hexdigest()
