"""The per-record steps on their own: PII patterns, quality scores, decontamination, config checks."""

from __future__ import annotations

import pytest

from jaxblend.preprocess.cleaning import CleaningConfig, decontam, pii, quality
from jaxblend.preprocess.cleaning.cleaner import Cleaner


@pytest.mark.parametrize(
    ("text", "want", "kinds"),
    [
        ("mail john.doe+tag@mail.example.co.uk now", "mail <EMAIL> now", (1, 0, 0)),
        ("user@[8.8.4.4] here", "<EMAIL> here", (1, 0, 0)),
        ("dns 8.8.8.8, and 1.1.1.1.", "dns <IP_ADDRESS>, and <IP_ADDRESS>.", (0, 2, 0)),
        ("v6 2001:4860:4860::8888 ok", "v6 <IP_ADDRESS> ok", (0, 0, 1)),
        ("private 192.168.1.10 and 10.0.0.1 and ::1 stay", None, (0, 0, 0)),
        ("version 1.2.3.4.5, time 12:30:45, 999.1.1.1", None, (0, 0, 0)),
        ("no at sign: john.doe at example.com", None, (0, 0, 0)),
    ],
)
def test_pii_patterns(text, want, kinds):
    counts = pii.PIICounts()
    assert pii.Scrubber().scrub(text, counts) == (text if want is None else want)
    assert (counts.email, counts.ipv4, counts.ipv6) == kinds


def test_pii_all_ips():
    counts = pii.PIICounts()
    out = pii.Scrubber(public_ips_only=False).scrub("a 192.168.1.10 b ::1", counts)
    assert out == "a <IP_ADDRESS> b <IP_ADDRESS>"


def _scores(text):
    d = quality.Doc(text)
    return {n: quality.score(n, d) for n in quality.FILTER_NAMES}


def test_quality_scores_of_crafted_texts():
    s = _scores("the cat and the dog\n- one\n- two...\n- one\n")
    assert s["word_count"] == 11
    assert s["bullet_lines"] == pytest.approx(3 / 4)
    assert s["ellipsis_lines"] == pytest.approx(1 / 4)
    assert s["dup_lines"] == pytest.approx(1 / 4)
    assert s["stop_words"] == 2  # the, and
    assert s["symbol_word_ratio"] == pytest.approx(1 / 11)
    rep = _scores("a b c d e a b c d e a b c d e")
    assert rep["top_2gram"] == pytest.approx(3 * 2 / 15)
    assert rep["dup_5gram"] == pytest.approx(1.0)
    assert _scores("x y z")["dup_5gram"] == 0.0


def test_quality_select_and_overrides():
    fs = quality.select(["word_count", "dup_lines"], {"word_count.min": 3.0})
    assert [f.name for f in fs] == ["word_count", "dup_lines"]
    assert fs[0].low == 3.0 and fs[0].high == 100_000
    with pytest.raises(ValueError, match="unknown quality filter"):
        quality.select(["nope"], {})
    with pytest.raises(ValueError, match="name no enabled filter"):
        quality.select(["word_count"], {"dup_lines.max": 0.1})


def test_cleaner_reports_first_failing_filter_and_histograms():
    c = Cleaner(CleaningConfig(quality=("word_count", "stop_words")), None)
    values, reason = c.clean(0, {"text": "too short"}, 9)
    assert values is None and reason == "quality_word_count"
    assert sum(c.to_json()["histograms"]["stop_words"]) == 1


def test_histogram_slots():
    f = quality.select(["alpha_words"], {})[0]
    assert quality.bin_index(f, 1.0) == len(f.bins) - 1  # last bin, not the overflow slot
    assert quality.bin_index(f, 0.0) == 1
    assert quality.bin_index(f, -0.1) == 0 and quality.bin_index(f, 1.5) == len(f.bins)


def test_decontamination_ngrams(tmp_path):
    ev = tmp_path / "eval.txt"
    ev.write_text("One two three four five six\nshort\n")
    e = decontam.EvalSet([str(ev)], 4, "text")
    assert e.texts == 2 and e.short == 1
    assert e.contaminated("zero ONE, two: three four! seven")
    assert not e.contaminated("one two three five six")


def test_decontamination_bad_eval_record(tmp_path):
    ev = tmp_path / "eval.jsonl"
    ev.write_text('{"question": "x"}\n')
    with pytest.raises(ValueError, match=r"eval.jsonl:1: .*--clean_decontam_key"):
        decontam.EvalSet([str(ev)], 13, "text")


def test_config_messages(tmp_path):
    with pytest.raises(ValueError, match="needs --clean_lang_model=PATH"):
        CleaningConfig(languages=("en",))
    with pytest.raises(ValueError, match="no such file.*downloads nothing"):
        CleaningConfig(lang_model=str(tmp_path / "lid.176.bin"), languages=("en",))
    with pytest.raises(ValueError, match="multiple of"):
        CleaningConfig(near_dedup=True, num_perm=100, bands=14)
    with pytest.raises(ValueError, match="does not exist"):
        CleaningConfig(decontaminate=(str(tmp_path / "missing.jsonl"),))
    assert not CleaningConfig().enabled
    assert CleaningConfig(near_dedup=True).lsh_threshold == pytest.approx((1 / 14) ** (1 / 8))


def test_lang_model_that_is_not_fasttext(tmp_path):
    bogus = tmp_path / "lid.bin"
    bogus.write_bytes(b"not a model")
    cfg = CleaningConfig(lang_model=str(bogus), languages=("en",))
    with pytest.raises(ValueError, match="not a fastText model"):
        Cleaner(cfg, None)
