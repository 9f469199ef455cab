"""The F distribution's upper tail, for the nested least-squares tests of hardware/regime_fit.py
(whether a size switch pays for its figures): numpy-free, through the regularized incomplete beta
function, so that the fit needs no scipy."""

from __future__ import annotations

import math


def f_survival(f: float, extra: int, left: float) -> float:
    """P(F(extra, left) >= f), the F distribution's upper tail through the regularized
    incomplete beta function; 1 where the larger fit gained nothing (f <= 0)."""
    return _beta_regularized(left / 2, extra / 2, left / (left + extra * f)) if f > 0 else 1.0


def _beta_regularized(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function (Press et al., "Numerical Recipes",
    3rd ed., section 6.4: the continued fraction on the side where it converges)."""
    if x <= 0 or x >= 1:
        return float(x >= 1)
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), evaluated by the modified Lentz method (NR 6.4)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-12:
            break
    return h
