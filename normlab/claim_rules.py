"""The rules every claim is judged by, stated once (torch-free): the t rule with the t quantile for the n in
hand, the equivalence margins, the sign-test companion, and their texts as the cards and the CLI show them.

- directional kinds (better, faster, steadier, gradient, gap, trains, decays): a one-sided t test at
  ALPHA = 5 % on the paired per-seed differences: the claimed side of d̄ ± t(0.95, n−1)·SE excludes 0;
- equivalence kinds (close, chance, equilibrium, edge): TOST, two one-sided t tests at 5 % each: the
  interval d̄ ± t(0.95, n−1)·SE lies inside ±margin;
- the companion, an exact one-sided sign test over every paired seed: k of n seeds point the claimed way
  (lie inside the margin), p = P(X ≥ k) for X ~ Binomial(n, ½), holding at p ≤ 5 %. A diverged or failed
  run ranks worst: in a two-arm comparison its seed counts for the other arm, in a one-arm or gap claim
  (and an equivalence) against the claim; the companion says how many seeds had one.
The t rule decides (DECIDES); the companion is shown beside it so a reader sees "on 5 of 5 seeds" too.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from normlab.arms import START
from normlab.stats import sign_p, t_quantile
from normlab_client.group_models import Companion, Effect

ALPHA = 0.05  # one-sided level of every t rule (each side of a TOST) and of the sign test
MIN_SEEDS = 2  # a standard error sd/√n needs at least two paired differences
EQUIV_REL = 0.10  # "≈": the difference's interval within ±10 % of the reference run's mean
LINE_REL = 0.25  # the angular update "at" its equilibrium line: within ±25 % of it
EDGE_REL = 0.10  # η·λ_max "at" 2: within ±10 % (GD's first steps start well below it)

_T = "t(0.95, n−1)"  # the quantile as the rule texts write it
_BEYOND = f"by more than {_T} paired standard errors (one-sided t test at 5 %)"
_TOST = f"{_T} standard errors (TOST: two one-sided t tests at 5 % each)"
RULE_TEXT = {
    "better": f"paired by seed, A − B favours A {_BEYOND}",
    "faster": f"per-seed area under the validation curve ÷ its span, A − B favours A {_BEYOND}",
    "close": f"|A − B| + {_TOST} ≤ {EQUIV_REL:.0%} of B's mean (equivalence margin)",
    "gap": f"|A1 − A2| − |B1 − B2| below 0 {_BEYOND}",
    "steadier": f"max ÷ min of ‖h_t‖ over t ≥ {START}: A − B below 0 {_BEYOND}",
    "gradient": f"orders of magnitude ‖∂ℓ/∂h_t‖ falls from t = T to t = 1: A − B below 0 {_BEYOND}",
    "best": "better (the rule above) than every other run",
    "trains": f"final validation loss − ln(classes) below 0 {_BEYOND.replace('paired ', '')}",
    "refused": "the RunSpec refuses the norm at this batch size",
    "decays": "log10 of η/‖w‖² at the last Fisher estimate ÷ at the first, mean over scale-invariant "
    f"groups: below 0 {_BEYOND.replace('paired ', '')}",
    "equilibrium": "angular update over the second half of the estimates ÷ √(2ηλ/(1+μ)): |mean − 1| + "
    f"{_TOST} ≤ {LINE_REL:.0%}",
    "edge": f"η·λ_max of the Hessian over the second half of the estimates ÷ 2: |mean − 1| + {_TOST} ≤ "
    f"{EDGE_REL:.0%}",
    "chance": f"|final validation loss − ln(classes)| + {_TOST} ≤ {EQUIV_REL:.0%} of ln(classes) "
    "(equivalence with a uniform guess)",
}
_SIGN = "exact one-sided sign test at 5 % over the paired seeds"
COMPANION_TEXT = {
    **dict.fromkeys(
        ("better", "faster", "steadier", "gradient"),
        f"{_SIGN}; a diverged run ranks worst (its seed counts for the other arm)",
    ),
    **dict.fromkeys(("gap", "trains", "decays"), f"{_SIGN}; a seed with a diverged run counts against"),
    **dict.fromkeys(
        ("close", "chance", "equilibrium", "edge"),
        f"{_SIGN}: seeds inside the margin (a diverged seed counts outside)",
    ),
    "best": "the sign test against every other run (the weakest of them)",
    "refused": "none: checked on the spec, no seed to count",
}
DECIDES = "the t rule decides; the sign test is shown beside it"


def t_crit(n: int) -> float | None:
    """t(1 − ALPHA, n − 1): the quantile for n paired differences (None below MIN_SEEDS)."""
    return t_quantile(1.0 - ALPHA, n - 1) if n >= MIN_SEEDS else None


def effect(diffs: list[float]) -> Effect:
    """The mean of the paired differences, its standard error and n."""
    n = len(diffs)
    if not n:
        return Effect(difference=None, se=None, n=0)
    se = statistics.stdev(diffs) / math.sqrt(n) if n > 1 else 0.0
    return Effect(difference=statistics.fmean(diffs), se=se, n=n)


def interval(diffs: list[float]) -> dict[str, Any]:
    """A claim's numbers: difference, se, n, t = t(0.95, n−1) and the interval d̄ ± t·SE (each side a
    one-sided 95 % bound; None below MIN_SEEDS)."""
    eff = effect(diffs)
    t, d, se = t_crit(eff.n), eff.difference, eff.se
    span = None if t is None or d is None or se is None else [d - t * se, d + t * se]
    return {"difference": d, "se": se, "n": eff.n, "t": t, "interval": span}


def beyond(numbers: dict[str, Any], below: bool) -> bool:
    """The one-sided t test: the interval's claimed side excludes 0."""
    span = numbers["interval"]
    return span is not None and (span[1] < 0 if below else span[0] > 0)


def inside(numbers: dict[str, Any], margin: float | None) -> bool:
    """TOST: the interval d̄ ± t·SE lies inside ±margin."""
    span = numbers["interval"]
    return span is not None and margin is not None and -margin <= span[0] and span[1] <= margin


def sign(wins: int, n: int, diverged: int, what: str) -> Companion:
    """The sign-test companion: `what` ("layer lower") on `wins` of `n` seeds, p and whether p ≤ ALPHA."""
    p = sign_p(wins, n) if n else None
    text = f"{what} on {wins} of {n} seed{'s' if n != 1 else ''}"
    if p is not None:
        text += f" (sign test p = {p:.3g})"
    if diverged:
        text += f"; {diverged} seed{'s' if diverged != 1 else ''} with a diverged or failed run"
    return Companion(wins=wins, n=n, diverged=diverged, p=p, holds=p is not None and p <= ALPHA, text=text)
