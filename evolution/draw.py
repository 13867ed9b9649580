"""Drawing indices from a fixed distribution many times, exactly as numpy's ``choice`` does."""
from __future__ import annotations

import numpy as np


class Draw:
    """Draws an index with probabilities ``p`` (non-negative, summing to 1) exactly as
    ``rng.choice(len(p), p=p)`` does (the same index from the same one uniform number),
    with the cumulative distribution made once rather than at every draw: a generation
    draws thousands of parents from one distribution."""

    def __init__(self, p: np.ndarray):
        self.cdf = np.cumsum(np.asarray(p, dtype=np.float64))
        self.cdf /= self.cdf[-1]

    def __call__(self, rng: np.random.Generator) -> int:
        return int(self.cdf.searchsorted(rng.random(), side="right"))
