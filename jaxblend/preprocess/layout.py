"""On-disk layout of a preprocessing run: output names, partial datasets, done markers, manifest.

For ``--output_prefix P``, key ``K`` and level ``L`` (``document``, or ``sentence`` with
``--split_sentences``) the final dataset is ``P_K_L.bin``/``P_K_L.idx`` (Megatron-LM's
``preprocess_data.py`` naming). Work in progress lives beside it:

- ``P.preprocess.json`` — the run manifest: the settings that determine the output (inputs with sizes
  and mtimes, keys, tokenizer with file hashes, partition plan, ...), the status
  (``running``/``complete``) and, when complete, the summary. A rerun with different settings is
  refused unless ``overwrite``.
- ``P.parts/part-NNNNN_K_L.{bin,idx}`` — partition NNNNN's partial dataset for key K.
- ``P.parts/part-NNNNN.done.json`` — written (atomically) only after all of the partition's files are
  complete; it records their sizes. A partition counts as finished only if its marker parses and the
  files have the recorded sizes, so a file left by a killed run is never taken for a finished one.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Any

from jaxblend import atomic_write

MANIFEST_VERSION = 1


def dataset_name(output_prefix: str, key: str, level: str) -> str:
    """Returns the final dataset prefix ``{output_prefix}_{key}_{level}``."""
    return f"{output_prefix}_{key}_{level}"


def manifest_path(output_prefix: str) -> str:
    """Returns the run manifest path."""
    return output_prefix + ".preprocess.json"


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
    """Writes JSON atomically and durably (`jaxblend.atomic_write.atomic_file`)."""
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


def write_done_marker(parts: str, index: int, result: dict[str, Any]) -> None:
    """Records partition ``index`` as finished (after its datasets are in place)."""
    write_json_atomic(done_marker_path(parts, index), result)


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
    for path in glob.glob(os.path.join(glob.escape(directory), pattern + ".tmp-*")):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def remove_outputs(output_prefix: str, names: list[str]) -> None:
    """Deletes a previous run's outputs, parts and manifest (for ``overwrite``)."""
    shutil.rmtree(parts_dir(output_prefix), ignore_errors=True)
    for name in names:
        for ext in ("bin", "idx"):
            try:
                os.remove(f"{name}.{ext}")
            except FileNotFoundError:
                pass
    try:
        os.remove(manifest_path(output_prefix))
    except FileNotFoundError:
        pass
