"""A TokenBudgetPlan on disk: one `.npy` file per array plus `plan.json` (version, fingerprint, steps).

Plans are computed once, offline, and loaded (memory-mapped) by every host of a run.
"""

from __future__ import annotations

import json
import os

import numpy as np

from jaxblend import atomic_write
from jaxblend.sampling.token_budget_plan import PLAN_VERSION, TokenBudgetPlan

# TokenBudgetPlan field -> file name (without .npy); names are part of the on-disk format.
_FILES = {
    "step_bucket": "step_bucket",
    "step_offsets": "step_offsets",
    "row_ids": "sample_ids",
    "bucket_lengths": "bucket_lengths",
    "bucket_rows": "bucket_rows",
}


def save_token_budget_plan(plan: TokenBudgetPlan, directory: str | os.PathLike) -> None:
    """Writes `plan` into `directory` atomically, replacing a plan already there."""
    with atomic_write.atomic_directory(directory, exists="replace", prefix=".token_budget_plan.") as d:
        for field, name in _FILES.items():
            d.save_npy(name, np.asarray(getattr(plan, field)))
        d.write_json(
            "plan.json", {"version": PLAN_VERSION, "fingerprint": plan.fingerprint, "steps": len(plan)}
        )


def load_token_budget_plan(directory: str | os.PathLike, *, mmap: bool = True) -> TokenBudgetPlan:
    """Loads a saved plan (arrays memory-mapped by default).

    Raises:
      ValueError: if files are missing, the version differs or the arrays disagree.
    """
    directory = os.fspath(directory)
    meta_path = os.path.join(directory, "plan.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        arrays = {
            field: np.load(os.path.join(directory, f"{name}.npy"), mmap_mode="r" if mmap else None)
            for field, name in _FILES.items()
        }
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"bucket plan {directory}: cannot read ({err})") from err
    if meta.get("version") != PLAN_VERSION:
        raise ValueError(f"bucket plan {meta_path}: version {meta.get('version')} != {PLAN_VERSION}")
    plan = TokenBudgetPlan(fingerprint=str(meta["fingerprint"]), **arrays)
    if len(plan) != meta.get("steps"):
        raise ValueError(
            f"bucket plan {meta_path}: {len(plan)} steps, plan.json says {meta.get('steps')}"
        )
    return plan
