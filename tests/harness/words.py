"""Word error rates: what a transcript got wrong, counted in words.

Plain Python, no numpy, so the corpus (harness.corpus) and the benchmarks can score without
loading anything heavy.
"""

from __future__ import annotations

import re


def words(text: str) -> list[str]:
    """Lower-case words without punctuation, for word error rates."""
    return re.findall(r"[a-z0-9']+", text.lower())


def word_edits(reference: list[str], hypothesis: list[str]) -> int:
    """Levenshtein distance between two word lists (substitutions, insertions, deletions)."""
    previous = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        current = [i] + [0] * len(hypothesis)
        for j, h in enumerate(hypothesis, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h))
        previous = current
    return previous[-1]


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over words, divided by the reference length."""
    ref, hyp = words(reference), words(hypothesis)
    if not ref:
        return float(bool(hyp))
    return word_edits(ref, hyp) / len(ref)
