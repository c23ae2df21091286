"""Is one retriever really better than another on the same questions? A paired bootstrap.

A recall difference of one or two questions in a category of forty is noise, not a result. The
bench therefore reports, for each cell, the mean per-question difference between two retrievers
with a 95% percentile interval from resampling the questions (the same resample for both, so the
comparison stays paired). The seed is fixed: the same scores always give the same interval.
"""

from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Difference:
    mean: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        """'above' or 'below' when the interval excludes zero, else 'tie'."""
        if self.low > 0:
            return "above"
        if self.high < 0:
            return "below"
        return "tie"


def paired_difference(a: list[float], b: list[float], *, resamples: int = RESAMPLES, seed: int = 0) -> Difference:
    """Mean of a − b over the same questions, with a bootstrap interval at CONFIDENCE."""
    if len(a) != len(b):
        raise ValueError(f"paired scores need the same questions: {len(a)} against {len(b)}")
    if not a:
        raise ValueError("paired scores need at least one question")
    diffs = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    picks = np.random.default_rng(seed).integers(0, len(diffs), size=(resamples, len(diffs)))
    means = diffs[picks].mean(axis=1)
    tail = (1.0 - CONFIDENCE) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Difference(float(diffs.mean()), float(low), float(high))
