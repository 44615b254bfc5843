"""The run manifest of a preprocessing output: the settings that fix its bytes, and resuming.

`<output_prefix>` has one manifest (`layout.manifest_path`) recording the settings that determine
the output bytes and, once finished, the result. A rerun with the same settings resumes (or
returns the finished result); different settings are refused unless `overwrite`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxblend.loss_masks import loss_mask_prefix
from jaxblend.preprocess import chat_template, layout, partitions
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess.config import PreprocessConfig, PreprocessResult


def run_settings(
    config: PreprocessConfig,
    files: Sequence[partitions.InputFile],
    tokenizer: tok_spec.Tokenizer,
    dtype: np.dtype,
    plan: Sequence[partitions.Partition],
) -> dict[str, Any]:
    """The settings that determine the output bytes (compared on resume)."""
    settings = {
        "inputs": [dataclasses.asdict(f) for f in files],
        "json_keys": list(config.json_keys),
        "text_mode": config.text_mode,
        "tokenizer": config.tokenizer.identity(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "append_eod": config.append_eod,
        "split_sentences": config.split_sentences,
        "sentence_splitter": config.sentence_splitter if config.split_sentences else None,
        "lang": config.lang if config.split_sentences else None,
        "keep_newlines": config.keep_newlines,
        "drop_empty": config.drop_empty,
        "max_document_chars": config.max_document_chars,
        "partitions_requested": config.partitions,
        "partitions": [[dataclasses.asdict(p) for p in part.pieces] for part in plan],
    }
    if config.cleaning is not None:  # absent without cleaning: earlier runs' manifests still match
        settings["cleaning"] = config.cleaning.identity()
    if config.chat:  # absent without --chat, likewise
        template = chat_template.load_chat_template(config.tokenizer.model_file())  # type: ignore[arg-type]
        settings["chat"] = {"template_file": template.path, "template_sha256": template.sha256}
    return settings


SCAN_TOKENS = 1 << 24  # tokens per block of `scan_outputs`


def scan_outputs(
    names: dict[str, str], dtype: np.dtype
) -> tuple[dict[str, int | None], dict[str, str]]:
    """One pass over each finished ``.bin``: (key -> largest token id or None when empty,
    key -> MD5 hex of the bytes, the dataset's content digest: docs/format.md, "Fingerprint")."""
    max_ids: dict[str, int | None] = {}
    md5s: dict[str, str] = {}
    for key, name in names.items():
        path = f"{name}.bin"
        digest = hashlib.md5(usedforsecurity=False)
        largest = None
        if os.path.getsize(path):
            tokens = np.memmap(path, dtype=dtype, mode="r")
            for i in range(0, tokens.size, SCAN_TOKENS):
                block = tokens[i : i + SCAN_TOKENS]
                digest.update(memoryview(block).cast("B"))
                top = int(block.max())
                largest = top if largest is None else max(largest, top)
            del tokens, block
        max_ids[key] = largest
        md5s[key] = digest.hexdigest()
    return max_ids, md5s


def _diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            a, b = repr(old.get(k)), repr(new.get(k))
            if len(a) > 120 or len(b) > 120:
                out.append(f"{k} differs")
            else:
                out.append(f"{k}: {a} -> {b}")
    return out


class SettingsMismatchError(ValueError):
    """The output prefix holds a run made with different settings."""


def prepare(config: PreprocessConfig, settings: dict[str, Any]) -> dict[str, Any]:
    """Checks or creates the manifest; returns it.

    Raises:
      SettingsMismatchError: the prefix holds a run with other settings, or outputs without a
        manifest, and ``overwrite`` is off.
    """
    mpath = layout.manifest_path(config.output_prefix)
    manifest = layout.read_manifest(config.output_prefix)
    names = list(config.output_names().values())
    old_names: list[str] = []
    if manifest is not None and manifest.get("settings") != settings:
        if not config.overwrite:
            changes = _diff(manifest.get("settings") or {}, settings)
            raise SettingsMismatchError(
                f"output prefix {config.output_prefix!r} holds a run made with different settings "
                f"({mpath}): {'; '.join(changes)}. Rerun with the original settings to resume, "
                "choose another --output_prefix, or pass --overwrite to discard it"
            )
        old_names = list((manifest.get("outputs") or {}).values())
        manifest = None
    if manifest is None:
        existing = [f"{n}.{e}" for n in names for e in ("bin", "idx") if os.path.exists(f"{n}.{e}")]
        if existing and not config.overwrite:
            raise SettingsMismatchError(
                f"output {existing[0]!r} already exists and has no run manifest ({mpath}); "
                "pass --overwrite to replace it or choose another --output_prefix"
            )
        if config.overwrite:  # with a --chat run's loss masks
            stale = names + old_names
            layout.remove_outputs(config.output_prefix, stale + [loss_mask_prefix(n) for n in stale])
        manifest = {"version": layout.MANIFEST_VERSION, "status": "running", "settings": settings}
        layout.write_json_atomic(mpath, manifest)
    return manifest


def finished_result(config: PreprocessConfig, manifest: dict[str, Any]) -> PreprocessResult | None:
    """The result recorded by an earlier run that finished, if its outputs are all still there
    (the parts with ``keep_parts``, else the merged datasets); None when there is work to do."""
    prev = manifest.get("result")
    if manifest.get("status") != "complete" or not prev:
        return None
    if config.keep_parts:
        usable = bool(prev["parts"])
    else:
        names = [*config.output_names().values(), *config.loss_mask_names().values()]
        usable = bool(prev["outputs"]) and all(
            os.path.exists(f"{n}.idx") and os.path.exists(f"{n}.bin") for n in names
        )
    return PreprocessResult(**prev) if usable else None


def mark_complete(
    config: PreprocessConfig,
    manifest: dict[str, Any],
    result: PreprocessResult,
    max_ids: dict[str, int | None] | None = None,
    bin_md5: dict[str, str] | None = None,
) -> None:
    """Records the finished run's result (a rerun with the same settings returns it), its
    tokenizer's facts (``tokenizer_facts``, read by `jaxblend.tokenizer_facts.read_facts`), the
    largest token id of each output (``max_token_id``, key -> id) and the MD5 of each output's
    ``.bin`` (``bin_md5``, key -> hex; `inspect verify` and the identity memo use it)."""
    manifest = dict(
        manifest, status="complete", result=result.to_json(), outputs=config.output_names(),
        tokenizer_facts=result.tokenizer, max_token_id=max_ids or {}, bin_md5=bin_md5 or {},
    )
    layout.write_json_atomic(layout.manifest_path(config.output_prefix), manifest)
