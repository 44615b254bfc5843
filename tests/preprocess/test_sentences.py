"""Built-in sentence splitter."""

from __future__ import annotations

import pytest

from jaxblend.preprocess.sentences import split_sentences


@pytest.mark.parametrize(
    "text,expected",
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        ("Mr. Smith met Dr. Who. Then left.", ["Mr. Smith met Dr. Who.", "Then left."]),
        ("J. R. Tolkien wrote. Pi is 3.14 here.", ["J. R. Tolkien wrote.", "Pi is 3.14 here."]),
        ('He said "Stop." She went.', ['He said "Stop."', "She went."]),
        ("e.g. this stays. lower case continues.", ["e.g. this stays. lower case continues."]),
        ("第一句。第二句！", ["第一句。", "第二句！"]),
        ("Title\n\nBody text here", ["Title", "Body text here"]),
        ("   \n ", []),
        ("Wait... What?! Yes.", ["Wait...", "What?!", "Yes."]),
    ],
)
def test_split(text, expected):
    assert split_sentences(text) == expected
