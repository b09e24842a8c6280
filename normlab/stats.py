"""Small exact statistics the claims need (torch- and scipy-free): Student's t quantile and the sign test.

`t_quantile(p, df)` inverts Student's t distribution function, written through the regularized incomplete
beta function I_x(a, b) (evaluated by its continued fraction, Numerical Recipes §6.4):
F(t) = 1 − ½·I_{ν/(ν+t²)}(ν/2, ½) for t ≥ 0. `sign_p(wins, n)` is the exact one-sided sign-test p-value
P(X ≥ wins) for X ~ Binomial(n, ½): the chance that at least `wins` of `n` paired seeds point the claimed
way when there is no effect.
"""

from __future__ import annotations

import math

_EPS = 1e-15
_TINY = 1e-300


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), converging fast for x < (a+1)/(a+b+2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 ≤ x ≤ 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must lie in [0, 1] (got {x})")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b  # the symmetry I_x(a,b) = 1 − I_{1−x}(b,a)


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T ≤ t) = p for Student's t with `df` > 0 degrees of freedom (0 < p < 1)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0 (got p={p}, df={df})")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:  # bracket, then bisect: F is monotone, so this cannot miss
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def sign_p(wins: int, n: int) -> float:
    """One-sided exact sign-test p-value: P(X ≥ wins) for X ~ Binomial(n, ½) (1.0 when n = 0)."""
    if not 0 <= wins <= n:
        raise ValueError(f"wins must lie in 0..n (got {wins} of {n})")
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / (1 << n)
