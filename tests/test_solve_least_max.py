"""least_max_rows (solve/layer_bounds.py) finds the least value whose caps pack, both ways: over the
sorted candidate values (few of them) and over the integers; each equals a plain bisection over
every integer from the lowest to the highest possible value (the reference below)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tinker_opt.costs.recompute import piecewise
from tinker_opt.solve import layer_bounds
from tinker_opt.solve.layer_bounds import least_max_rows, packs
from tinker_opt.solve.layer_split import piecewise_cap


def reference(offsets, low, high, knee, caps, total) -> list[int]:
    """Per row, the least integer in [lo, hi] whose caps pack (hi when none)."""
    out = []
    for row in range(caps.shape[0]):
        lo = int(offsets.min()) + int(piecewise(1, low[row], high[row], knee[row]))
        hi = int(offsets.max()) + int(piecewise(total, low[row], high[row], knee[row]))
        lo = min(lo, hi)
        while lo < hi:
            mid = (lo + hi) // 2
            under = piecewise_cap(mid - offsets, low[row], high[row], knee[row], total)
            if packs(np.minimum(caps[row], under)[None, :], total)[0]:
                hi = mid
            else:
                lo = mid + 1
        out.append(hi)
    return out


@st.composite
def instances(draw):
    stages = draw(st.integers(1, 6))
    total = draw(st.integers(stages, 24))
    rows = draw(st.integers(1, 4))
    offsets = np.array(draw(st.lists(st.integers(0, 10**6), min_size=stages, max_size=stages)))
    column = st.lists(st.integers(0, 10**5), min_size=rows, max_size=rows)
    low, high = np.array(draw(column)), np.array(draw(column))
    knee = np.array(draw(st.lists(st.integers(0, total), min_size=rows, max_size=rows)))
    caps = np.array(
        draw(
            st.lists(
                st.lists(st.integers(-1, total), min_size=stages, max_size=stages),
                min_size=rows,
                max_size=rows,
            )
        )
    )
    return offsets, low, high, knee, caps, total


@settings(max_examples=300, deadline=None)
@given(instances(), st.booleans())
def test_least_max_rows_equals_the_integer_bisection(instance, few: bool) -> None:
    offsets, low, high, knee, caps, total = instance
    limit = 10**9 if few else 0  # every instance through the candidates, or none
    saved = layer_bounds.CANDIDATES
    layer_bounds.CANDIDATES = limit
    try:
        found = least_max_rows(offsets, low[:, None], high[:, None], knee[:, None], caps, total)
    finally:
        layer_bounds.CANDIDATES = saved
    assert [int(v) for v in found] == reference(offsets, low, high, knee, caps, total)
