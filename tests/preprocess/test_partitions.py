"""Preprocessing inputs and their partitioning: errors name the input, plans are deterministic."""

from __future__ import annotations

import pytest

from jaxblend.preprocess import partitions


def test_input_errors(tmp_path):
    with pytest.raises(partitions.InputError, match="matches no file"):
        partitions.resolve_inputs([str(tmp_path / "*.jsonl")])
    with pytest.raises(partitions.InputError, match="does not exist"):
        partitions.resolve_inputs([str(tmp_path / "x.jsonl")])
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(partitions.InputError, match="unsupported suffix"):
        partitions.resolve_inputs([str(tmp_path / "x.csv")])
    with pytest.raises(ValueError, match="partitions=-1"):
        partitions.plan_partitions([], -1)


def test_plan_depends_on_inputs_and_count_only(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(f'{{"text": "{i}"}}\n' for i in range(200)))
    files = partitions.resolve_inputs([str(path)])
    plan = partitions.plan_partitions(files, 6)
    assert plan == partitions.plan_partitions(partitions.resolve_inputs([str(path)]), 6)
    assert sum(p.weight for p in plan) == path.stat().st_size
    assert [p.index for p in plan] == list(range(len(plan)))


