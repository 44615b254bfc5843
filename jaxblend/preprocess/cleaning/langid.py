"""Optional language filter with a fastText language-ID model given by path (never downloaded).

Uses the ``fasttext`` module (from the ``fasttext-predict`` wheel of the ``clean`` extra, or the
full ``fasttext`` package). Labels are the model's without the ``__label__`` prefix (``en``, ...).
"""

from __future__ import annotations


class LanguageFilter:
    """Keeps texts whose top language is in ``languages`` with probability >= ``min_score``."""

    def __init__(self, model_path: str, languages: tuple[str, ...], min_score: float) -> None:
        try:
            import fasttext
        except ImportError:
            raise ValueError(
                "--clean_lang_model needs the fasttext module: pip install fasttext-predict "
                "(part of jaxblend[clean])"
            ) from None
        try:
            self.model = fasttext.load_model(model_path)
        except Exception as e:  # noqa: BLE001 - fastText raises plain ValueError/RuntimeError
            raise ValueError(
                f"--clean_lang_model={model_path}: not a fastText model ({e})"
            ) from None
        self.languages = frozenset(languages)
        self.min_score = min_score

    def label(self, text: str) -> tuple[str, float]:
        """The top language of ``text`` and its probability."""
        labels, scores = self.model.predict(" ".join(text.split()), k=1)
        return labels[0].removeprefix("__label__"), float(scores[0])

    def keeps(self, text: str) -> bool:
        lang, score = self.label(text)
        return lang in self.languages and score >= self.min_score
