"""On-disk layout of a preprocessing run: output names, partial datasets, done markers, manifest.

For ``--output_prefix P``, key ``K`` and level ``L`` (``document``, or ``sentence`` with
``--split_sentences``) the final dataset is ``P_K_L.bin``/``P_K_L.idx`` (Megatron-LM's
``preprocess_data.py`` naming). Work in progress lives beside it:

- ``<dir of P>/.jaxblend/<name of P>.preprocess.json`` — the run manifest (the run record,
  `jaxblend.tokenizer_facts.record_path`): the settings that determine the output (inputs with
  sizes and mtimes, keys, tokenizer with file hashes, partition plan, ...), the status
  (``running``/``complete``) and, when complete, the summary. A rerun with different settings is
  refused unless ``overwrite``. Side files live in ``.jaxblend/`` so that the output directory
  holds only ``.bin``/``.idx`` pairs (Megatron-LM's ``tools/merge_datasets.py`` takes every file
  in it as half of one); a manifest at the older ``P.preprocess.json`` is read and moved there.
- ``P.parts/part-NNNNN_K_L.{bin,idx}`` — partition NNNNN's partial dataset for key K.
- ``P.parts/part-NNNNN.done.json`` — written (atomically) only after all of the partition's files are
  complete; it records their sizes. A partition counts as finished only if its marker parses and the
  files have the recorded sizes, so a file left by a killed run is never taken for a finished one.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
from typing import Any

from jaxblend import atomic_write
from jaxblend.tokenizer_facts import legacy_record_path, record_path, side_path

MANIFEST_VERSION = 1


def manifest_path(output_prefix: str) -> str:
    """Returns the run manifest path (``<dir>/.jaxblend/<name>.preprocess.json``)."""
    return record_path(output_prefix)


# Side files that runs before `.jaxblend/` wrote beside the data (`P<suffix>`).
LEGACY_SIDE_SUFFIXES = (".preprocess.json", ".cleaning.json", ".cleaning.png")


def read_manifest(output_prefix: str) -> dict[str, Any] | None:
    """The run manifest of ``output_prefix``, or None. A run written before the side files moved
    (manifest at ``P.preprocess.json``) has its side files moved into ``.jaxblend/`` first."""
    manifest = read_json(manifest_path(output_prefix))
    if manifest is None and read_json(legacy_record_path(output_prefix)) is not None:
        for suffix in LEGACY_SIDE_SUFFIXES:
            old = output_prefix + suffix
            if os.path.exists(old):
                new = side_path(output_prefix, suffix)
                os.makedirs(os.path.dirname(os.path.abspath(new)), exist_ok=True)
                os.replace(old, new)
        manifest = read_json(manifest_path(output_prefix))
    return manifest


def parts_dir(output_prefix: str) -> str:
    """Returns the directory holding the partial datasets."""
    return output_prefix + ".parts"


def part_prefix(parts: str, index: int, key: str, level: str) -> str:
    """Returns the prefix of partition ``index``'s partial dataset for ``key``."""
    return os.path.join(parts, f"part-{index:05d}_{key}_{level}")


def done_marker_path(parts: str, index: int) -> str:
    """Returns the done-marker path of partition ``index``."""
    return os.path.join(parts, f"part-{index:05d}.done.json")


def file_sizes(prefix: str) -> dict[str, int]:
    """Returns the sizes of ``prefix.bin`` and ``prefix.idx``."""
    return {ext: os.path.getsize(f"{prefix}.{ext}") for ext in ("bin", "idx")}


def write_json_atomic(path: str, payload: Any) -> None:
    """Writes JSON atomically and durably (`jaxblend.atomic_write.atomic_file`), making its
    directory if needed."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_write.atomic_file(path, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True)
        f.write("\n")


def read_json(path: str) -> Any | None:
    """Returns the parsed JSON at ``path``, or None if it is missing or unparsable."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_done_marker(
    parts: str, index: int, keys: tuple[str, ...], level: str
) -> dict[str, Any] | None:
    """Returns partition ``index``'s result if it is finished and its files are intact, else None."""
    result = read_json(done_marker_path(parts, index))
    if not isinstance(result, dict) or result.get("index") != index:
        return None
    files = result.get("files", {})
    for key in keys:
        prefix = part_prefix(parts, index, key, level)
        try:
            if file_sizes(prefix) != files.get(key):
                return None
        except OSError:
            return None
    return result


def remove_temporaries(directory: str, pattern: str = "*") -> None:
    """Deletes temporary files (``*.tmp-*``) a killed run may have left in ``directory``."""
    _remove(glob.glob(os.path.join(glob.escape(directory), pattern + ".tmp-*")))


def remove_outputs(output_prefix: str, names: list[str]) -> None:
    """Deletes a previous run's outputs, parts and manifest (for ``overwrite``)."""
    shutil.rmtree(parts_dir(output_prefix), ignore_errors=True)
    _remove([f"{name}.{ext}" for name in names for ext in ("bin", "idx")])
    _remove([manifest_path(output_prefix), legacy_record_path(output_prefix)])


def _remove(paths: list[str]) -> None:
    """Deletes the files of ``paths`` that exist."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
