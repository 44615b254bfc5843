"""Fill-in-the-middle (`jaxblend.sources.fim`): Megatron-LM's `GPTFIMDataset` rewrite of a sample.

The expected arrays below are worked out by hand from Megatron-LM's
`megatron/training/datasets/fim_dataset.py` for the same draws (a scripted `Draws` that also
checks Megatron's draw order and probabilities), over a character tokenizer whose ids are easy to
read: 'a' is 97, the sentinels are 1000+.
"""

from __future__ import annotations

import collections
import math
import pickle

import numpy as np
import pytest

from jaxblend.sources import fim

EOD, PRE, MID, SUF, PAD, SEP = 1000, 1001, 1002, 1003, 1004, 1005
NAMES = {
    "<|endoftext|>": EOD, "<fim_prefix>": PRE, "<fim_middle>": MID, "<fim_suffix>": SUF,
    "<fim_pad>": PAD, "<file_sep>": SEP,
}


class CharTokenizer:
    """One id per character (its code point); special ids (>= 1000) are dropped when decoding,
    as Megatron decodes with `remove_special_tokens=True`."""

    def tokenize_batch(self, texts):
        ids = [ord(c) for text in texts for c in text]
        return np.array(ids, np.int64), np.array([len(text) for text in texts], np.int64)

    def detokenize(self, ids) -> str:
        return "".join(chr(int(i)) for i in ids if int(i) < 1000)

    def token_to_id(self, token: str) -> int | None:
        return NAMES.get(token)


class ScriptedDraws:
    """Draws given in advance, each checked against what is asked (kind and argument)."""

    def __init__(self, script):
        self.script = list(script)

    def coin(self, p):
        kind, arg, value = self.script.pop(0)
        assert (kind, arg) == ("coin", p)
        return value

    def cuts(self, n):
        kind, arg, value = self.script.pop(0)
        assert (kind, arg) == ("cuts", n)
        return value

    def done(self):
        return not self.script


def t(text: str) -> list[int]:
    return [ord(c) for c in text]


def rewriter(**options) -> fim.FIMRewriter:
    opts = fim.FIMOptions(**{"rate": 0.5, "spm_rate": 0.25, **options})
    tok = CharTokenizer()
    return fim.FIMRewriter(opts, fim.FIMTokens.resolve(opts, tok, "chars"), tok)


def run(rw, sample, script, pad=PAD):
    draws = ScriptedDraws(script)
    out = fim.fit(rw.sample(np.array(sample, np.int64), draws), len(sample), pad)
    assert draws.done(), draws.script
    return out.tolist()


# ------------------------------------------------------------------ one sample against Megatron


def test_psm_of_a_sample_without_eod_is_cut_back_to_its_length():
    # cut at 1 and 3: prefix "a", middle "bc", suffix "de"; PSM = PRE a SUF d e MID b c -> 5 kept
    out = run(rewriter(), t("abcde"), [("coin", 0.5, True), ("cuts", 5, (1, 3)), ("coin", 0.25, False)])
    assert out == [PRE, *t("a"), SUF, *t("de")]


def test_spm_order_and_eod_segments():
    # segments "ab" | (empty, dropped with its EOD) | "cde"; the first untouched, the last SPM
    # with cuts (0, 3): prefix "", middle "cde", suffix "" -> PRE SUF MID c d e
    sample = [*t("ab"), EOD, EOD, *t("cde")]
    script = [("coin", 0.5, False), ("coin", 0.5, True), ("cuts", 3, (0, 3)), ("coin", 0.25, True)]
    assert run(rewriter(), sample, script) == [*t("ab"), EOD, PRE, SUF, MID, *t("c")]


def test_full_spm_and_psm_layouts():
    rw = rewriter()
    spm = rw.fragment(np.array(t("abcdef")), 0.5, ScriptedDraws(
        [("coin", 0.5, True), ("cuts", 6, (2, 4)), ("coin", 0.25, True)]))
    assert spm.tolist() == [PRE, SUF, *t("ef"), MID, *t("ab"), *t("cd")]
    psm = rw.fragment(np.array(t("abcdef")), 0.5, ScriptedDraws(
        [("coin", 0.5, True), ("cuts", 6, (2, 4)), ("coin", 0.25, False)]))
    assert psm.tolist() == [PRE, *t("ab"), SUF, *t("ef"), MID, *t("cd")]


def test_leading_eod_is_dropped_and_the_sample_padded():
    # Megatron keeps an EOD only after a non-empty segment: a leading one disappears, the sample
    # is one token short and padded with the FIM pad token
    out = run(rewriter(), [EOD, *t("ab")], [("coin", 0.5, False)])
    assert out == [*t("ab"), PAD]


def test_empty_segment_after_the_last_eod_is_visited():
    # the (empty) segment after a final EOD draws too: chosen, it becomes the three sentinels,
    # which the cut to length then removes
    script = [("coin", 0.5, False), ("coin", 0.5, True), ("cuts", 0, (0, 0)), ("coin", 0.25, False)]
    draws = ScriptedDraws(script)
    whole = rewriter().sample(np.array([*t("a"), EOD]), draws)
    assert whole.tolist() == [*t("a"), EOD, PRE, SUF, MID] and draws.done()
    assert fim.fit(whole, 2, PAD).tolist() == [*t("a"), EOD]


def test_no_prefix_keeps_the_fragment_after_its_coin():
    rw = rewriter(no_prefix="#!")
    assert run(rw, t("#!x"), [("coin", 0.5, True)]) == t("#!x")  # no cut points drawn
    out = run(rw, t("xy"), [("coin", 0.5, True), ("cuts", 2, (1, 1)), ("coin", 0.25, False)])
    assert out == [PRE, *t("x")]  # PRE x SUF y MID, cut to 2


def test_split_sample_fragments():
    # a segment holding the split token: one coin at rate, then each non-empty fragment at
    # fragment_rate (an empty one dropped with its split token), the last fragment always visited
    rw = rewriter(split_sample="<file_sep>", fragment_rate=0.75)
    sample = [*t("a"), SEP, *t("bc"), SEP, SEP, *t("d")]
    script = [
        ("coin", 0.5, True),  # the segment is split
        ("coin", 0.75, True), ("cuts", 1, (0, 1)), ("coin", 0.25, False),  # "a": PSM, all middle
        ("coin", 0.75, False),  # "bc" kept
        ("coin", 0.75, False),  # "d" kept
    ]
    whole = [PRE, SUF, MID, *t("a"), SEP, *t("bc"), SEP, *t("d")]
    assert run(rw, sample, script) == whole[: len(sample)]


def test_split_sample_segment_not_chosen_and_segment_without_split_token():
    rw = rewriter(split_sample="<file_sep>", fragment_rate=0.75)
    sample = [*t("a"), SEP, *t("b")]
    assert run(rw, sample, [("coin", 0.5, False)]) == sample  # no fragment draws
    # no split token in the segment: one fragment at `rate`, as without split_sample
    out = run(rw, t("ab"), [("coin", 0.5, True), ("cuts", 2, (2, 2)), ("coin", 0.25, True)])
    assert out == [PRE, SUF]  # PRE SUF MID a b, cut to 2


def test_split_token_segments_and_eod_segments_compose():
    rw = rewriter(split_sample="<file_sep>", fragment_rate=1.0)
    sample = [*t("ab"), EOD, *t("c"), SEP, *t("d")]
    script = [
        ("coin", 0.5, False),  # "ab": one fragment, kept
        ("coin", 0.5, True),  # "c<sep>d" is split
        ("coin", 1.0, False), ("coin", 1.0, True), ("cuts", 1, (1, 1)), ("coin", 0.25, True),
    ]
    # "d" SPM with cuts (1, 1): prefix "d", middle "", suffix "" -> PRE SUF MID d
    whole = [*t("ab"), EOD, *t("c"), SEP, PRE, SUF, MID, *t("d")]
    assert run(rw, sample, script, pad=None) == whole[: len(sample)]


def test_fit_pads_only_when_asked():
    short = np.array([1, 2], np.int64)
    assert fim.fit(short, 4, PAD).tolist() == [1, 2, PAD, PAD]
    assert fim.fit(short, 4, None).tolist() == [1, 2]
    assert fim.fit(np.arange(6), 4, PAD).tolist() == [0, 1, 2, 3]


# ------------------------------------------------------------------ a packed row's document

def document(rw, doc, script):
    draws = ScriptedDraws(script)
    out = rw.document(np.array(doc, np.int64), draws)
    assert draws.done(), draws.script
    return out.tolist()


def test_a_document_keeps_its_length_and_its_final_eod():
    # "abcde" PSM with cuts (1, 3): PRE a SUF de MID bc, cut to the 5 places before the EOD
    psm = [("coin", 0.5, True), ("cuts", 5, (1, 3)), ("coin", 0.25, False)]
    assert document(rewriter(), [*t("abcde"), EOD], psm) == [PRE, *t("a"), SUF, *t("de"), EOD]
    # a piece of a longer document (no final EOD): cut to its length like a sample
    assert document(rewriter(), t("abcde"), psm) == [PRE, *t("a"), SUF, *t("de")]
    # not chosen, or nothing before the EOD (no draws): unchanged
    assert document(rewriter(), [*t("ab"), EOD], [("coin", 0.5, False)]) == [*t("ab"), EOD]
    assert document(rewriter(), [EOD], []) == [EOD]
    # an EOD inside the document cuts it into segments, as in a sample
    inner = [("coin", 0.5, False), ("coin", 0.5, False)]
    assert document(rewriter(), [*t("a"), EOD, *t("b"), EOD], inner) == [*t("a"), EOD, *t("b"), EOD]


def test_fit_document_pads_after_the_eod_and_counts_the_real_tokens():
    tokens = fim.FIMTokens(prefix=PRE, middle=MID, suffix=SUF, pad=PAD, eod=EOD)
    doc = np.array([*t("abcde"), EOD], np.int64)
    out, real = fim.fit_document(doc, np.array([PRE, SUF, MID, 97], np.int64), tokens)
    assert (out.tolist(), real) == ([PRE, SUF, MID, 97, EOD, PAD], 5)
    out, real = fim.fit_document(doc[:-1], np.array([PRE, 97], np.int64), tokens)
    assert (out.tolist(), real) == ([PRE, 97, PAD, PAD, PAD], 2)
    out, real = fim.fit_document(doc, np.zeros(0, np.int64), tokens)  # nothing planned
    assert (out.tolist(), real) == (doc.tolist(), 6)


def test_each_document_of_a_row_draws_from_its_own_stream():
    a = fim.sample_draws(5, "train", 17, 0).rng.integers(0, 1 << 30, 8)
    assert np.array_equal(a, fim.sample_draws(5, "train", 17, 0).rng.integers(0, 1 << 30, 8))
    for other in ((5, "train", 17, 1), (5, "train", 17, None), (5, "train", 18, 0)):
        assert not np.array_equal(a, fim.sample_draws(*other).rng.integers(0, 1 << 30, 8))


# -------------------------------------------------------------------------------- options


def test_options_are_validated():
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="--fim_rate"):
            fim.FIMOptions(rate=bad)
        with pytest.raises(ValueError, match="--fim_spm_rate"):
            fim.FIMOptions(spm_rate=bad)
    with pytest.raises(TypeError, match="--fim_rate"):
        fim.FIMOptions(rate="0.5")
    with pytest.raises(ValueError, match="needs --fim_fragment_rate"):
        fim.FIMOptions(split_sample="<file_sep>")
    with pytest.raises(ValueError, match="only with --fim_split_sample"):
        fim.FIMOptions(fragment_rate=0.5)
    with pytest.raises(ValueError, match="--fim_prefix_token"):
        fim.FIMOptions(prefix_token="")
    assert fim.FIMOptions(rate=0, spm_rate=1).rate == 0.0  # 0 is a rate (Megatron refuses it)


def test_sentinels_are_resolved_by_name_with_one_line_for_a_missing_one():
    tok = CharTokenizer()
    tokens = fim.FIMTokens.resolve(fim.FIMOptions(), tok, "chars")
    assert (tokens.prefix, tokens.middle, tokens.suffix, tokens.pad, tokens.eod) == (
        PRE, MID, SUF, PAD, EOD)
    assert tokens.marks() == {PRE: "[FIM_PREFIX]", MID: "[FIM_MIDDLE]", SUF: "[FIM_SUFFIX]",
                              PAD: "[FIM_PAD]"}
    with pytest.raises(ValueError, match=r"--fim_middle_token=<mid> is not a token .*\(chars\)"):
        fim.FIMTokens.resolve(fim.FIMOptions(middle_token="<mid>"), tok, "chars")
    with pytest.raises(ValueError, match="--fim_split_sample=<sep>"):
        fim.FIMTokens.resolve(
            fim.FIMOptions(split_sample="<sep>", fragment_rate=0.5), tok, "chars")


def test_identity_fields_cover_every_setting():
    base = fim.FIMOptions().identity_fields()
    for change in ({"rate": 0.4}, {"spm_rate": 0.4}, {"no_prefix": "#"},
                   {"split_sample": "<file_sep>", "fragment_rate": 0.5}, {"pad_token": "<pad>"},
                   {"eod_token": "</s>"}):
        assert fim.FIMOptions(**change).identity_fields() != base, change


# --------------------------------------------------------------------- draws, rates, invariants


def test_each_sample_draws_from_its_own_stream():
    a = fim.sample_draws(5, "train", 17).rng.integers(0, 1 << 30, 8)
    assert np.array_equal(a, fim.sample_draws(5, "train", 17).rng.integers(0, 1 << 30, 8))
    for other in ((6, "train", 17), (5, "valid", 17), (5, "train", 18)):
        assert not np.array_equal(a, fim.sample_draws(*other).rng.integers(0, 1 << 30, 8))
    with pytest.raises(ValueError, match="FIM split must be one of .*, got 'dev'"):
        fim.sample_draws(5, "dev", 0)


def _binomial_ok(hits: int, n: int, p: float) -> bool:
    """Within 4.5 standard deviations of Binomial(n, p)'s mean."""
    return abs(hits - n * p) <= 4.5 * math.sqrt(n * p * (1 - p)) + 1e-9


@pytest.mark.parametrize("rate,spm_rate", [(0.5, 0.5), (0.9, 0.1), (0.2, 0.8)])
def test_realized_fim_and_spm_rates_over_10000_samples(rate, spm_rate):
    rw = rewriter(rate=rate, spm_rate=spm_rate)
    text = "abcdefghij"  # 10 characters, one segment per sample
    n_samples, n_chars = 10_000, len(text)
    fimmed = starts_with_suffix = 0
    for i in range(n_samples):
        out = rw.sample(np.array(t(text)), fim.sample_draws(3, "train", i))
        if out[0] != PRE:
            assert out.tolist() == t(text)
            continue
        fimmed += 1
        starts_with_suffix += int(out[1] == SUF)
    assert _binomial_ok(fimmed, n_samples, rate), (fimmed, rate)
    # SPM always puts SUF second; PSM does so only when its prefix is empty (smaller cut at 0,
    # probability 1 - (n/(n+1))^2 for two uniform cuts in [0, n])
    empty_prefix = 1 - (n_chars / (n_chars + 1)) ** 2
    p_second = spm_rate + (1 - spm_rate) * empty_prefix
    assert _binomial_ok(starts_with_suffix, fimmed, p_second), (starts_with_suffix, fimmed)


def test_length_and_token_multiset_invariants():
    rng = np.random.default_rng(0)
    rw = rewriter(rate=0.7, spm_rate=0.5)
    sentinels = collections.Counter({PRE: 1, MID: 1, SUF: 1})
    for i in range(300):
        docs = ["".join(rng.choice(list("abcdefgh"), rng.integers(1, 9))) for _ in range(3)]
        sample = np.array([*t(docs[0]), EOD, *t(docs[1]), EOD, *t(docs[2])], np.int64)
        whole = rw.sample(sample, fim.sample_draws(1, "train", i))
        # no truncation: every rewritten segment holds its characters plus the three sentinels
        fimmed = int((whole == PRE).sum())
        expected = collections.Counter(sample.tolist())
        for _ in range(fimmed):
            expected += sentinels
        assert collections.Counter(whole.tolist()) == expected
        assert whole.size == sample.size + 3 * fimmed
        # cut back: always the sample's length
        assert fim.fit(whole, sample.size, PAD).size == sample.size


def test_stream_draws_distributions():
    draws = fim.StreamDraws(np.random.default_rng(0))
    cuts = [draws.cuts(4) for _ in range(5000)]
    assert all(0 <= a <= b <= 4 for a, b in cuts)
    firsts = collections.Counter(c for pair in cuts for c in pair)
    assert set(firsts) == {0, 1, 2, 3, 4}
    assert not draws.coin(0.0) and draws.coin(1.0)


def test_rewriter_and_draws_pickle():
    rw = rewriter()
    again = pickle.loads(pickle.dumps(rw))
    sample = np.array([*t("abcdef"), EOD, *t("gh")])
    assert np.array_equal(rw.sample(sample, fim.sample_draws(2, "test", 9)),
                          again.sample(sample, fim.sample_draws(2, "test", 9)))
