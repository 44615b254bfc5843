"""The README's cleaning run, as written there (its commands as processes), and the CLI's one-line
errors (in this process: `helpers_cli.run_tool`)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers_cli import run_tool

from tests.preprocess.test_resume_cli import _ROOT


def _cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_readme_cleaning_run(tmp_path):
    demo = tmp_path / "clean_demo"
    made = _cli("benchmarks/cleaning_throughput.py", f"--write_corpus={demo}", "--docs=300")
    assert made.returncode == 0, made.stderr[-2000:]
    proc = _cli(
        "-m",
        "jaxblend.tools.preprocess",
        "--tokenizer-type",
        "ByteTokenizer",
        "--input",
        f"{demo}/corpus.jsonl",
        "--output-prefix",
        f"{demo}/out/web",
        "--workers",
        "2",
        "--append-eod",
        "--noprogress",
        "--clean_pii",
        "--clean_quality=all",
        "--clean_exact_dedup",
        "--clean_near_dedup",
        f"--clean_decontaminate={demo}/eval.jsonl",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(demo / "out" / ".jaxblend" / "web.cleaning.json") as f:
        report = json.load(f)
    for step in ("quality", "exact_dedup", "near_dedup", "decontamination"):
        assert report["removed"][step]["documents"] > 0, step
        assert f"{step} " in proc.stdout
    assert report["pii"]["email"] > 0 and report["pii"]["ipv4"] > 0
    assert f"{demo}/corpus.jsonl:" in proc.stdout
    assert (demo / "out" / ".jaxblend" / "web.cleaning.png").stat().st_size > 1000
    assert (demo / "out" / "web_text_document.bin").exists()


def test_cli_errors_are_one_line(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "x"}\n')
    cfg = tmp_path / "clean.json"
    cfg.write_text('{"pii": true, "shingles": 3}')
    for flag, message in (
        ("--clean_languages=en", "needs --clean_lang_model=PATH"),
        (f"--clean_lang_model={tmp_path}/lid.176.bin", "no such file"),
        ("--clean_quality=words", "unknown quality filter"),
        ("--clean_quality_thresholds=word_count.min", "must be <filter>.min=<number>"),
        (f"--clean_config={cfg}", "unknown setting(s) ['shingles']"),
    ):
        proc = run_tool("jaxblend.tools.preprocess", [
            "--tokenizer-type",
            "ByteTokenizer",
            f"--input={src}",
            f"--output_prefix={tmp_path}/o",
            "--clean_languages=en" if "lang_model" in flag else "--noprogress",
            flag,
        ])
        assert proc.returncode == 1, flag
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (
            flag,
            proc.stderr,
        )


def test_clean_config_file(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "write to a@example.com"}\n{"text": "WRITE to a@example.com!"}\n')
    cfg = tmp_path / "clean.json"
    cfg.write_text('{"pii": true, "exact_dedup": true, "plot": false}')
    proc = run_tool("jaxblend.tools.preprocess", [
        "--tokenizer-type",
        "ByteTokenizer",
        f"--input={src}",
        f"--output_prefix={tmp_path}/o/c",
        f"--clean_config={cfg}",
        "--noprogress",
    ])
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(tmp_path / "o" / ".jaxblend" / "c.cleaning.json") as f:
        report = json.load(f)
    assert report["removed"]["exact_dedup"]["documents"] == 1
    assert report["pii"]["email"] == 2
    assert not (tmp_path / "o" / ".jaxblend" / "c.cleaning.png").exists()
