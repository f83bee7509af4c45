"""Hypothesis strategies shared by the index kernel tests."""

from __future__ import annotations

import numpy
from hypothesis import strategies as st


def normalise(raw) -> numpy.ndarray:
    """megatron-core's normalisation: float64 division by the float64 sum."""
    raw = numpy.asarray(raw, dtype=numpy.float64)
    return raw / raw.sum()


@st.composite
def blend_weights(draw, max_datasets: int = 120) -> numpy.ndarray:
    """Normalised weights, including adversarial families (ties, ulp-close, tiny)."""
    n = draw(st.integers(1, max_datasets))
    family = draw(st.sampled_from(["random", "equal", "ulp", "tiny", "ratios", "pow2"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = numpy.random.default_rng(seed)
    if family == "random":
        raw = rng.random(n) + 1e-3
    elif family == "equal":
        raw = numpy.ones(n)
    elif family == "ulp":  # weights a few ulps apart: errors tie or nearly tie
        raw = numpy.nextafter(numpy.ones(n), 2.0) ** rng.integers(0, 4, n)
    elif family == "tiny":  # some datasets almost never due
        raw = numpy.where(rng.random(n) < 0.5, 1e-12 * (1 + rng.random(n)), rng.random(n))
    elif family == "ratios":  # small integer ratios: exact float ties are common
        raw = rng.integers(1, 5, n).astype(numpy.float64)
    else:  # powers of two: exactly representable weights
        raw = 2.0 ** -rng.integers(0, 6, n).astype(numpy.float64)
    return normalise(raw)
