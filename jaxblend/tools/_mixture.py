"""The mixture of a split over a step range: realized vs target share of every dataset, per
stage of a staged train split (`jaxblend.index.BlendSchedule`), and the plot of `inspect mixture`.

A stage's target is its blend's normalized weights (zero for datasets it does not name); its
realized share counts the samples of the range's steps that fall in the stage (by sample id, so
a stage starting inside a step, possible through the Python API, splits that step). Over a range
crossing stages, the overall target is the stages' targets weighted by the range's samples in
each. Stage boundaries are given in steps as the step holding the stage's first sample
(`start_step`; `start_offset` > 0 when the stage starts inside it).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from collections.abc import Sequence

import numpy as np

from jaxblend import atomic_write


@dataclasses.dataclass(frozen=True)
class StageSpan:
    """One stage of a staged split, in samples and steps.

    Attributes:
      index: the stage's position in the schedule.
      start_sample: its first sample; stop_sample: one past its last (the split's end for the last).
      start_step: the step holding its first sample; start_offset: that sample's row in the step.
      blend: the stage's blend as given.
      target: [D] its normalized weights over the split's datasets.
    """

    index: int
    start_sample: int
    stop_sample: int
    start_step: int
    start_offset: int
    blend: tuple[str, ...]
    target: np.ndarray

    def to_json(self) -> dict:
        return {
            "stage": self.index, "start_sample": self.start_sample,
            "stop_sample": self.stop_sample, "start_step": self.start_step,
            "start_offset": self.start_offset, "blend": list(self.blend),
        }

    def label(self) -> str:
        """`stage 1 (from step 20)`, or `(from step 20, row 3)` inside a step."""
        where = f"step {self.start_step}" + (f", row {self.start_offset}" if self.start_offset else "")
        return f"stage {self.index} (from {where})"


def step_of_sample(steps, sample: int) -> tuple[int, int]:
    """(step holding train sample `sample`, the sample's row in it) under the step plan `steps`.

    Raises:
      ValueError: a sample beyond the plan's samples.
    """
    if not 0 <= sample < steps.num_samples:
        raise ValueError(f"sample {sample} is outside the plan's {steps.num_samples} samples")
    def first(step: int) -> int:
        return int(steps.sample_ids(step)[0])

    step = bisect.bisect_right(range(steps.num_steps), sample, key=first) - 1
    return step, sample - first(step)


def stage_spans(schedule, names: Sequence[str], num_samples: int, steps) -> list[StageSpan]:
    """The stages of `schedule` over a split of `num_samples` samples whose datasets are `names`
    (the split's `dataset_names`), located in the steps of `steps`.

    A stage starting past the plan's last step (the split holds samples no step reads) gets
    `start_step` = the plan's step count.
    """
    index = {name: j for j, name in enumerate(names)}
    spans = []
    for k, (stage, (start, stop)) in enumerate(
        zip(schedule.stages, schedule.bounds(num_samples), strict=True)
    ):
        target = np.zeros(len(names), np.float64)
        for prefix, weight in zip(stage.parsed.prefixes, stage.weights(), strict=True):
            target[index[prefix]] += weight
        if start < steps.num_samples:
            step, offset = step_of_sample(steps, start)
        else:
            step, offset = steps.num_steps, 0
        spans.append(StageSpan(k, start, stop, step, offset, tuple(stage.blend), target))
    return spans


def _table(names: Sequence[str], counts: np.ndarray, target: np.ndarray, indent: str = "",
           only_used: bool = False) -> list[dict]:
    """Prints a realized/target table; returns its rows (every dataset)."""
    total = int(counts.sum())
    realized = counts / total if total else np.zeros(len(names))
    print(f"{indent}{'dataset':<40} {'samples':>10} {'realized':>9} {'target':>9} {'diff':>9}")
    rows = []
    for j, name in enumerate(names):
        if not only_used or counts[j] or target[j]:
            print(f"{indent}{os.path.basename(name)[-40:]:<40} {int(counts[j]):>10,} "
                  f"{realized[j]:>9.4f} {target[j]:>9.4f} {realized[j] - target[j]:>+9.4f}")
        rows.append({"dataset": name, "samples": int(counts[j]), "realized": float(realized[j]),
                     "target": float(target[j])})
    return rows


def report(names: Sequence[str], samples: np.ndarray, ids: np.ndarray, target: np.ndarray | None,
           spans: list[StageSpan] | None, start: int, end: int, split: str) -> dict:
    """Prints the mixture of steps [start, end) and returns it as JSON-ready data.

    Args:
      names: the split's datasets.
      samples: the sample ids of the range's steps, in order; ids: their dataset ids.
      target: [D] the split's target shares (a split without stages), else None.
      spans: the stages (`stage_spans`) of a staged split, else None.
      start, end: the step range; split: the split's name.

    Returns:
      `{"start_step", "end_step", "rows"}` (rows: dataset, samples, realized, target over the
      range) and, for a staged split, `"stages"`: each stage's span, its samples in the range and
      its own rows (empty when the range holds none of its samples).
    """
    d = len(names)
    counts = np.bincount(ids, minlength=d)
    staged = spans is not None
    print(f"steps [{start}, {end}) = {ids.size} samples ({split})"
          + (f", {len(spans)} stages" if staged else ""))
    result: dict = {"start_step": start, "end_step": end}
    if not staged:
        result["rows"] = _table(names, counts, target)
        return result
    stage_of = np.searchsorted([s.start_sample for s in spans], samples, side="right") - 1
    stages, overall = [], np.zeros(d, np.float64)
    for span in spans:
        inside = stage_of == span.index
        entry = {**span.to_json(), "samples": int(inside.sum()), "rows": []}
        if inside.any():
            first = int(np.argmax(inside))
            print(f"\n{span.label()}: blend {' '.join(span.blend)}; "
                  f"{int(inside.sum())} samples of the range (from sample {int(samples[first])})")
            entry["rows"] = _table(
                names, np.bincount(ids[inside], minlength=d), span.target, "  ", only_used=True
            )
            overall += inside.sum() * span.target
        stages.append(entry)
    print("\nall stages of the range (target: the stages' targets weighted by their samples)")
    result["rows"] = _table(names, counts, overall / max(ids.size, 1), only_used=True)
    result["stages"] = stages
    return result


def plot(path: str, names: Sequence[str], ids: np.ndarray, sizes: np.ndarray,
         target: np.ndarray | None, spans: list[StageSpan] | None, start: int, end: int,
         split: str, note: str | None = None) -> list[dict]:
    """Writes a PNG of each dataset's cumulative share after every step of [start, end) against
    its target (dashed). For a staged split the shares restart at each stage boundary (a vertical
    line labelled with the stage), and the dashed targets follow the stages. `note` (e.g. the
    Megatron phase the range lies in) is added to the title.

    Returns:
      the vertical lines drawn: `[{"stage": k, "step": x}, ...]` (x fractional for a stage
      starting inside a step).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bounds = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    per_step = np.stack([np.add.reduceat(ids == j, bounds) for j in range(len(names))], 1)
    steps = np.arange(start + 1, end + 1)
    segments = [(start, end, target)]
    if spans is not None:
        cuts = [(max(s.start_step, start), s) for s in spans if s.start_step < end]
        cuts = [(c, s) for i, (c, s) in enumerate(cuts) if i + 1 == len(cuts) or cuts[i + 1][0] > c]
        segments = [
            (c, cuts[i + 1][0] if i + 1 < len(cuts) else end, s.target)
            for i, (c, s) in enumerate(cuts) if c < end
        ]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors, lines = {}, []

    def label(x: float, stage: int) -> None:
        ax.annotate(f"stage {stage}", (x, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(3, -12), textcoords="offset points", fontsize=8, color="0.2")

    for lo, hi, seg_target in segments:
        part = slice(lo - start, hi - start)
        cum = np.cumsum(per_step[part], 0)
        share = cum / np.maximum(cum.sum(1, keepdims=True), 1)
        for j, name in enumerate(names):
            if not (share[:, j].any() or seg_target[j] > 0):
                continue
            first = j not in colors
            line, = ax.plot(steps[part], share[:, j], color=colors.get(j),
                            label=f"{os.path.basename(name)} (realized)" if first else None)
            colors[j] = line.get_color()
            ax.hlines(seg_target[j], lo, hi, colors=colors[j], linestyles="--", linewidth=0.8)
    if spans is not None:
        active = [s for s in spans if s.start_step <= start][-1]
        if active.index:  # the range starts inside a later stage: name it, no boundary line
            label(start, active.index)
        for span in spans:
            if span.index == 0 or not start < span.start_step < end:
                continue
            x = span.start_step + span.start_offset / sizes[span.start_step - start]
            ax.axvline(x, color="0.3", linewidth=0.8)
            label(x, span.index)
            lines.append({"stage": span.index, "step": float(x)})
    ax.set_xlabel("step")
    ax.set_ylabel("cumulative share of samples" + (" in the stage" if spans is not None else ""))
    title = f"Blend mixture, {split} split (dashed: target" + (
        "; vertical lines: stage boundaries)" if spans is not None else ")")
    if note:
        ax.set_title(f"{title}\n{note}", fontsize=10)
    else:
        ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_write.atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return lines
