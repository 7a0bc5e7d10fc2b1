"""Random hot columns for the kernel tests: realistic values with NaN, infinities and extremes sprinkled in."""

from __future__ import annotations

from typing import Any

import numpy as np

from memevo.kernels.lifecycle import N_STATES
from memevo.kernels.params import N_KINDS

NOW = 1.75e9
"""A wall-clock "now" (epoch seconds) for the tests."""

SIZES = (0, 1, 2, 7, 1023, 10_001, (1 << 14) + 3)
"""Empty, one item, odd sizes, and sizes that span one and several parallel chunks."""


def _sprinkle(rng: np.random.Generator, column: np.ndarray, specials: tuple[float, ...], rate: float) -> None:
    """Overwrite about ``rate`` of ``column`` with values drawn from ``specials``."""
    if column.size == 0:
        return
    where = rng.random(column.size) < rate
    column[where] = rng.choice(np.array(specials, dtype=column.dtype), size=int(where.sum()))


def score_columns(rng: np.random.Generator, n: int, *, now: float = NOW, edges: bool = True) -> dict[str, Any]:
    """Keyword arguments for compute_scores (without now, budget and params) of ``n`` random memories."""
    day = 86400.0
    created = now - rng.exponential(60 * day, n) - 1.0
    last_access = np.where(rng.random(n) < 0.3, np.nan, created + rng.random(n) * (now - created))
    columns: dict[str, Any] = {
        "confidence": rng.random(n, dtype=np.float32),
        "successes": rng.poisson(2.0, n).astype(np.float32),
        "failures": rng.poisson(1.0, n).astype(np.float32),
        "inconsistency": (rng.random(n, dtype=np.float32) * (rng.random(n) < 0.2)).astype(np.float32),
        "last_access": last_access,
        "created": created,
        "access_count": rng.geometric(0.1, n).astype(np.uint32) - 1,
        "importance": rng.integers(0, 12, n).astype(np.uint8),
        "content_bytes": rng.integers(0, 5000, n).astype(np.uint32),
        "uniqueness": rng.random(n, dtype=np.float32),
        "stored_bytes": rng.integers(0, 8000, n).astype(np.uint32),
        "kind": rng.integers(0, N_KINDS + 2, n).astype(np.uint8),
    }
    if edges:
        nan, inf = np.nan, np.inf
        for name in ("confidence", "inconsistency", "uniqueness"):
            _sprinkle(rng, columns[name], (nan, inf, -inf, -0.5, 1.5, 0.0, 1.0), 0.05)
        for name in ("successes", "failures"):
            _sprinkle(rng, columns[name], (nan, inf, -inf, 0.0, 1e6), 0.05)
        for name in ("last_access", "created"):
            _sprinkle(rng, columns[name], (nan, inf, -inf, now, now + 10.0, now - 1e12, 0.0), 0.05)
        _sprinkle(rng, columns["access_count"], (0, 1, 2**32 - 1), 0.05)
        _sprinkle(rng, columns["importance"], (0, 1, 10, 11, 255), 0.05)
        _sprinkle(rng, columns["content_bytes"], (0, 2000, 2**32 - 1), 0.05)
        _sprinkle(rng, columns["stored_bytes"], (0, 2**32 - 1), 0.05)
        _sprinkle(rng, columns["kind"], (0, 255), 0.02)
    return columns


def lifecycle_columns(
    rng: np.random.Generator, n: int, *, now: float = NOW, span: float = 90 * 86400.0, edges: bool = True
) -> dict[str, Any]:
    """Keyword arguments for propose_transitions (without now and params) of ``n`` random memories.

    Values cluster around the default thresholds (0.05, 0.2, 0.3) so every rule fires.
    """
    value = rng.choice(np.array([0.0, 0.05, 0.2, 0.3], dtype=np.float32), n) + rng.normal(0, 0.03, n).astype(np.float32)
    below_since = np.where(rng.random(n) < 0.5, now - rng.random(n) * span, np.nan)
    columns: dict[str, Any] = {
        "value": value.astype(np.float32),
        "state": rng.integers(0, N_STATES, n).astype(np.uint8),
        "kind": rng.integers(0, N_KINDS + 2, n).astype(np.uint8),
        "state_since": now - rng.exponential(2 * 3600.0, n),
        "below_since": below_since,
    }
    if edges:
        nan, inf = np.nan, np.inf
        _sprinkle(rng, columns["value"], (nan, inf, -inf, 0.05, 0.2, 0.3), 0.05)
        _sprinkle(rng, columns["state_since"], (nan, inf, -inf, now, now + 5.0), 0.05)
        _sprinkle(rng, columns["below_since"], (nan, inf, -inf, now, now + 5.0, now - 1e12), 0.05)
        _sprinkle(rng, columns["state"], (6, 255), 0.01)
        _sprinkle(rng, columns["kind"], (255,), 0.01)
    return columns
