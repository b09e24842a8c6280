"""normlab.stats against printed tables and hand-computed binomial sums."""

from __future__ import annotations

import math

import pytest

from normlab.stats import betainc, sign_p, t_cdf, t_quantile


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [
        # Student's t tables (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2), six decimals
        (0.95, 4, 2.131847),
        (0.975, 4, 2.776445),
        (0.95, 9, 1.833113),
        (0.95, 1, 6.313752),
        (0.975, 1, 12.706205),
        (0.95, 2, 2.919986),
        (0.99, 4, 3.746947),
        (0.95, 30, 1.697261),
        (0.975, 100, 1.983972),
    ],
)
def test_t_quantile_matches_the_printed_table(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=2e-6)
    assert t_quantile(1 - p, df) == pytest.approx(-table, abs=2e-6)


def test_t_cdf_closed_forms():
    # df = 1 is the Cauchy distribution: F(t) = ½ + atan(t)/π; df = 2: F(t) = ½ + t / (2√(2 + t²))
    for t in (-3.0, -0.5, 0.0, 0.7, 4.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


def test_betainc_closed_forms():
    # I_x(1, b) = 1 − (1 − x)^b and I_x(a, 1) = x^a
    assert betainc(1, 3, 0.2) == pytest.approx(1 - 0.8**3, abs=1e-13)
    assert betainc(2.5, 1, 0.6) == pytest.approx(0.6**2.5, abs=1e-13)
    with pytest.raises(ValueError):
        betainc(1, 1, 1.5)


@pytest.mark.parametrize(
    ("wins", "n", "p"),
    [
        (5, 5, 1 / 32),  # every seed: 1 of 32 sign patterns
        (4, 5, 6 / 32),  # C(5,4) + C(5,5) = 6
        (3, 5, 16 / 32),
        (0, 5, 1.0),
        (8, 10, 56 / 1024),  # C(10,8) + C(10,9) + C(10,10) = 45 + 10 + 1
        (9, 10, 11 / 1024),
        (0, 0, 1.0),
    ],
)
def test_sign_p_is_the_binomial_tail(wins, n, p):
    assert sign_p(wins, n) == pytest.approx(p, abs=1e-15)


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="0 < p < 1"):
        t_quantile(1.0, 4)
    with pytest.raises(ValueError, match="wins"):
        sign_p(6, 5)
