"""A preset's claims judged with effect sizes on its arms (normlab.arms: each run's seeds aggregated),
and the metric vocabulary both use. Torch-free: `normlab reproduce` (through the engine) and
`GET /api/groups/{id}` (from the store) call the same functions, so the browser and REPRODUCTIONS.md say
the same thing.

Every comparison is paired by seed (one seed = the same data split, initialization and batch order for
every run of a preset): the per-seed differences d_s give the effect d̄ (their mean) and its paired
standard error SE = sd(d)/√n. The rules, stated once here and reported with every claim:

    better A B     A's final metric beats B's: d̄ = A − B favours A by more than Z·SE
    faster A B     A's validation curve lies lower (or higher, for accuracy): the per-seed area under the
                   curve ÷ its span, d̄ favours A by more than Z·SE ("converges faster")
    close A B      equivalence: |d̄| + Z·SE ≤ EQUIV_REL × |mean B| (the difference's interval lies inside
                   ±EQUIV_REL of B); per seed |d_s| ≤ EQUIV_REL × |B_s|
    gap A1 A2 B1 B2   A is less sensitive to the change than B: d_s = |A1−A2| − |B1−B2| < 0 beyond Z·SE
    steadier A B   hidden-state norm spread past the start-up steps (max ÷ min of ‖h_t‖ over t ≥ START):
                   A's spread smaller than B's beyond Z·SE (§3.1)
    gradient A B   ‖∂ℓ/∂h_t‖ falls by fewer orders of magnitude from the last to the first step with A than
                   with B (log10 g_T/g_1 per seed), beyond Z·SE (§3.1: vanishing gradients)
    best A         A better than every other run (each by the rule "better")
    trains A       A's validation loss ends below ln(classes) (a uniform guess) by more than Z·SE
    decays A       A's effective learning rate η/‖w‖² (scale-invariant sets) falls from the first Fisher
                   estimate to the last: log10 last/first below 0 beyond Z·SE
    equilibrium A  A's angular update over the second half of its estimates ÷ √(2ηλ/(1+μ)) within
                   ±LINE_REL of 1 beyond Z·SE (equivalence), per seed within ±LINE_REL
    edge A         A's η·λ_max(Hessian) over the second half of its estimates ÷ 2 within ±EDGE_REL of 1
                   beyond Z·SE (equivalence), per seed within ±EDGE_REL (edge of stability)
    chance A       A stays at a uniform guess: |final validation loss − ln(classes)| + Z·SE ≤ EQUIV_REL ×
                   ln(classes) (equivalence, as "close"); per seed within EQUIV_REL × ln(classes)
    refused N      the spec refuses norm N at the preset's batch size (checked, not trained)

"holds" is the rule on the paired differences; "all_seeds" says whether every seed's own difference
pointed the claimed way. A standard error needs at least MIN_SEEDS paired differences: with fewer, a
claim never "holds". It is *pending* ("seeds_in" of "seeds_expected" in) while it has fewer than
MIN_SEEDS paired seeds (even when no more are coming), or, when the caller says how many seeds were
launched, while it does not hold and seeds are still to come: an audience never sees a claim fail on
the first seeds, nor hold on one.
"""

from __future__ import annotations

import math
import statistics
from typing import Literal

from pydantic import ValidationError

from normlab.arms import START, is_number
from normlab.theory import angular_equilibrium
from normlab_client.group_models import (
    AnyClaim,
    BestClaim,
    CellResult,
    ChanceClaim,
    Claim,
    CloseClaim,
    Comparison,
    DecaysClaim,
    Effect,
    LineClaim,
    PairedClaim,
    RefusedClaim,
    TraceName,
    TrainsClaim,
    Verdict,
)
from normlab_client.spec import RunSpec

Rule = tuple[str, ...]  # ("better", "layer", "batch"): a kind and its run labels (normlab.presets)

Z = 2.0  # effects must exceed 2 paired standard errors (≈ a 95 % interval) to count
MIN_SEEDS = 2  # a standard error sd/√n needs at least two paired differences
EQUIV_REL = 0.10  # "≈": the difference's interval within ±10 % of the reference run's mean
LINE_REL = 0.25  # the angular update "at" its equilibrium line: within ±25 % of it
EDGE_REL = 0.10  # η·λ_max "at" 2: within ±10 % (GD's first steps start well below it)
HIGHER_IS_BETTER = {"accuracy", "recall"}
CURVE_FIELD = {
    "val_loss": "val_loss",
    "accuracy": "accuracy",
    "bpc": "bpc",
    "mse": "val_loss",
    "recall": "recall",
}
CLASSES = {
    "digits": 10,
    "mnist": 10,
    "mnist5k": 10,
    "mnist1d": 10,
    "seq-digits": 10,
    "pixel-digits": 10,
    "pixel-mnist5k": 10,
    "conv-digits": 10,
    "conv-mnist5k": 10,
    "reverse": 10,  # per output position: 10 symbols
}

RULE_TEXT = {
    "better": f"paired by seed, A − B favours A by more than {Z:g} standard errors of the difference",
    "faster": f"per-seed area under the validation curve ÷ its span, A − B favours A by more than {Z:g} "
    "paired standard errors",
    "close": f"|A − B| + {Z:g} paired standard errors ≤ {EQUIV_REL:.0%} of B's mean (equivalence margin)",
    "gap": f"|A1 − A2| − |B1 − B2| below 0 by more than {Z:g} paired standard errors",
    "steadier": f"max ÷ min of ‖h_t‖ over t ≥ {START}: A − B below 0 by more than {Z:g} paired standard "
    "errors",
    "gradient": f"orders of magnitude ‖∂ℓ/∂h_t‖ falls from t = T to t = 1: A − B below 0 by more than {Z:g} "
    "paired standard errors",
    "best": "better (the rule above) than every other run",
    "trains": f"final validation loss − ln(classes) below 0 by more than {Z:g} standard errors",
    "refused": "the RunSpec refuses the norm at this batch size",
    "decays": "log10 of η/‖w‖² at the last Fisher estimate ÷ at the first, mean over scale-invariant "
    f"groups: below 0 by more than {Z:g} standard errors",
    "equilibrium": f"angular update over the second half of the estimates ÷ √(2ηλ/(1+μ)): |mean − 1| + {Z:g} "
    f"standard errors ≤ {LINE_REL:.0%}",
    "edge": f"η·λ_max of the Hessian over the second half of the estimates ÷ 2: |mean − 1| + {Z:g} standard "
    f"errors ≤ {EDGE_REL:.0%}",
    "chance": f"|final validation loss − ln(classes)| + {Z:g} standard errors ≤ {EQUIV_REL:.0%} of "
    "ln(classes) (equivalence with a uniform guess)",
}


def metric_key(metric: str) -> str:
    """The RunResult.metrics key of a preset's metric: 'val_loss' stays, 'accuracy' -> 'val_accuracy'."""
    return metric if metric.startswith(("val_", "test_")) else f"val_{metric}"


def curve_field(metric: str) -> str:
    """The scalars-event field holding a preset metric's validation curve."""
    return CURVE_FIELD.get(metric.removeprefix("val_"), "val_loss")


def higher_is_better(metric: str) -> bool:
    return metric.removeprefix("val_") in HIGHER_IS_BETTER


def _sub(x: float | None, y: float | None) -> float | None:
    return x - y if is_number(x) and is_number(y) else None


def _per_seed(arm: CellResult, key: Literal["value", "auc"] | TraceName) -> dict[int, float | None]:
    vals: list[float | None]
    if key == "value":
        vals = arm.values
    elif key == "auc":
        vals = arm.aucs
    else:
        trace = arm.traces.get(key)
        vals = trace.values if trace is not None else [None] * len(arm.seeds)
    return dict(zip(arm.seeds, vals, strict=True))


def effect(diffs: list[float]) -> Effect:
    """The mean of the paired differences, its standard error and n."""
    n = len(diffs)
    if not n:
        return Effect(difference=None, se=None, n=0)
    se = statistics.stdev(diffs) / math.sqrt(n) if n > 1 else 0.0
    return Effect(difference=statistics.fmean(diffs), se=se, n=n)


Directional = Literal["better", "faster", "steadier", "gradient"]


def _directional(
    kind: Directional,
    claim: str,
    a: CellResult,
    b: CellResult,
    key: Literal["value", "auc"] | TraceName,
    lower_wins: bool,
) -> PairedClaim:
    """A paired claim that A's `key` is lower (lower_wins) or higher than B's beyond Z·SE."""
    pa, pb = _per_seed(a, key), _per_seed(b, key)
    seeds = [s for s in pa if s in pb]
    wins, diffs = [], []
    for s in seeds:
        x, y = pa[s], pb[s]
        if is_number(x) and is_number(y):
            diffs.append(x - y)
            wins.append(x < y if lower_wins else x > y)
        else:  # a failed or diverged run loses its seed
            wins.append(is_number(x) and not is_number(y))
    eff = effect(diffs)
    d, se = eff.difference, eff.se
    holds = d is not None and se is not None and (d < 0 if lower_wins else d > 0) and abs(d) > Z * se
    return PairedClaim(
        claim=claim,
        kind=kind,
        holds=holds and eff.n >= MIN_SEEDS,
        seeds_in=len(seeds),
        all_seeds=bool(wins) and all(wins),
        per_seed=[_sub(pa[s], pb[s]) for s in seeds],
        difference=d,
        se=se,
        n=eff.n,
        rule=RULE_TEXT[kind],
    )


def _below_zero(diffs: list[float], seeds: int) -> tuple[Effect, bool, bool]:
    """Whether the per-seed differences `diffs` (of `seeds` seeds; a failed run gives none) lie below 0
    beyond Z·SE: (the effect, holds, all_seeds); "all_seeds" also needs every seed to have given one."""
    eff = effect(diffs)
    d, se = eff.difference, eff.se
    holds = d is not None and se is not None and d < 0 and abs(d) > Z * se and eff.n >= MIN_SEEDS
    all_seeds = bool(diffs) and len(diffs) == seeds and all(x < 0 for x in diffs)
    return eff, holds, all_seeds


def _within(eff: Effect, margin: float | None) -> bool:
    """The equivalence test: |Δ| + Z·SE ≤ margin, over at least MIN_SEEDS paired seeds."""
    d, se = eff.difference, eff.se
    return (
        d is not None
        and se is not None
        and margin is not None
        and abs(d) + Z * se <= margin
        and eff.n >= MIN_SEEDS
    )


def _near_one(
    kind: Literal["equilibrium", "edge"],
    claim: str,
    ratios: list[float],
    seeds: int,
    margin: float,
    line: float | None,
) -> LineClaim:
    """An equivalence claim that per-seed ratios to a theory line are 1: |mean − 1| + Z·SE ≤ margin."""
    eff = effect([r - 1 for r in ratios])
    d, se = eff.difference, eff.se
    return LineClaim(
        claim=claim,
        kind=kind,
        holds=_within(eff, margin),
        seeds_in=seeds,
        all_seeds=bool(ratios) and len(ratios) == seeds and all(abs(r - 1) <= margin for r in ratios),
        per_seed=[r - 1 for r in ratios],
        margin=margin,
        line=line,
        difference=d,
        se=se,
        n=eff.n,
        rule=RULE_TEXT[kind],
    )


def judge(
    rule: Rule,
    arms: dict[str, CellResult],
    metric: str,
    *,
    chance: float | None = None,
    base_spec: RunSpec | None = None,
) -> AnyClaim:
    """One claim: its effect (difference ± se over n paired seeds), whether it holds, and its rule."""
    kind, *labels = rule
    lower = not higher_is_better(metric)
    if kind in ("better", "faster"):
        a, b = labels
        word = "better than" if kind == "better" else "converges faster than"
        return _directional(
            "better" if kind == "better" else "faster",
            f"{a} {word} {b}",
            arms[a],
            arms[b],
            "value" if kind == "better" else "auc",
            lower,
        )
    if kind == "steadier":
        a, b = labels
        return _directional(
            "steadier",
            f"{a} steadier than {b} (‖h_t‖ max ÷ min over t ≥ {START})",
            arms[a],
            arms[b],
            "hidden_spread_late",
            True,
        )
    if kind == "gradient":
        a, b = labels
        return _directional(
            "gradient",
            f"‖∂ℓ/∂h_t‖ vanishes less over time with {a} than with {b}",
            arms[a],
            arms[b],
            "grad_orders",
            True,
        )
    if kind == "close":
        a, b = labels
        pa, pb = _per_seed(arms[a], "value"), _per_seed(arms[b], "value")
        pairs = [(pa[s], pb[s]) for s in pa if s in pb]
        ok = [(x, y) for x, y in pairs if is_number(x) and is_number(y)]
        eff = effect([x - y for x, y in ok])
        ref = arms[b].mean
        margin = None if ref is None else EQUIV_REL * abs(ref)
        holds = _within(eff, margin)
        return CloseClaim(
            claim=f"{a} ≈ {b}",
            kind=kind,
            holds=holds,
            seeds_in=len(pairs),
            all_seeds=bool(ok)
            and len(ok) == len(pairs)
            and all(abs(x - y) <= EQUIV_REL * abs(y) for x, y in ok),
            per_seed=[x - y for x, y in ok],
            margin=margin,
            difference=eff.difference,
            se=eff.se,
            n=eff.n,
            rule=RULE_TEXT[kind],
        )
    if kind == "gap":
        a1, a2, b1, b2 = labels
        maps = [_per_seed(arms[lab], "value") for lab in labels]
        seeds = [s for s in maps[0] if all(s in m for m in maps)]
        diffs = []
        for s in seeds:
            w, x, y, z = (m[s] for m in maps)
            if is_number(w) and is_number(x) and is_number(y) and is_number(z):
                diffs.append(abs(w - x) - abs(y - z))
        eff, holds, all_seeds = _below_zero(diffs, len(seeds))
        return PairedClaim(
            claim=f"|{a1} − {a2}| smaller than |{b1} − {b2}|",
            kind=kind,
            holds=holds,
            seeds_in=len(seeds),
            all_seeds=all_seeds,
            per_seed=list(diffs),
            difference=eff.difference,
            se=eff.se,
            n=eff.n,
            rule=RULE_TEXT[kind],
        )
    if kind == "best":
        (a,) = labels
        parts = [
            _directional("better", f"{a} better than {o}", arms[a], arms[o], "value", lower)
            for o in arms
            if o != a
        ]
        return BestClaim(
            claim=f"{a} best of {', '.join(arms)}",
            kind=kind,
            holds=bool(parts) and all(p.holds for p in parts),
            all_seeds=bool(parts) and all(p.all_seeds for p in parts),
            seeds_in=min((p.seeds_in or 0 for p in parts), default=0),
            versus=[
                Comparison.model_validate(p.model_dump(exclude={"pending", "seeds_expected"})) for p in parts
            ],
            rule=RULE_TEXT[kind],
        )
    if kind == "trains":
        (a,) = labels
        vals = arms[a].values
        diffs = [v - chance for v in vals if is_number(v)] if chance is not None else []
        claim = f"{a} trains (val loss below ln(classes) = {chance:.3f})" if chance else f"{a} trains"
        eff, holds, all_seeds = _below_zero(diffs, len(vals))
        return TrainsClaim(
            claim=claim,
            kind=kind,
            holds=holds,
            seeds_in=len(vals),
            all_seeds=all_seeds,
            per_seed=list(diffs),
            chance=chance,
            difference=eff.difference,
            se=eff.se,
            n=eff.n,
            rule=RULE_TEXT[kind],
        )
    if kind == "decays":
        (a,) = labels
        by_seed = _per_seed(arms[a], "elr_orders")
        orders = [v for v in by_seed.values() if is_number(v)]
        eff, holds, all_seeds = _below_zero(orders, len(by_seed))
        return DecaysClaim(
            claim=f"{a}: η/‖w‖² decays",
            kind=kind,
            holds=holds,
            seeds_in=len(by_seed),
            all_seeds=all_seeds,
            per_seed=list(orders),
            difference=eff.difference,
            se=eff.se,
            n=eff.n,
            rule=RULE_TEXT[kind],
        )
    if kind == "equilibrium" or kind == "edge":
        (a,) = labels
        key: TraceName
        line: float | None
        if kind == "equilibrium":
            spec = arms[a].spec
            lr, wd, mom = (spec.get(k) for k in ("lr", "weight_decay", "momentum"))
            line = angular_equilibrium(lr, wd, mom or 0.0) if lr and wd else None
            key, what = "angular_late", f"{a}: angular update at √(2ηλ/(1+μ))"
        else:
            line, key, what = 2.0, "eta_lambda_late", f"{a}: η·λ_max(H) at the edge of stability (2)"
        per = _per_seed(arms[a], key)
        ratios = [v / line for v in per.values() if is_number(v) and line]
        if kind == "equilibrium":
            return _near_one("equilibrium", what, ratios, len(per), LINE_REL, line)
        return _near_one("edge", what, ratios, len(per), EDGE_REL, line)
    if kind == "chance":
        (a,) = labels
        vals = arms[a].values
        finite = [v for v in vals if is_number(v)]
        diffs = [v - chance for v in finite] if chance is not None else []
        eff = effect(diffs)
        margin = None if chance is None else EQUIV_REL * chance
        holds = _within(eff, margin)
        return ChanceClaim(
            claim=f"{a} stays at chance (val loss ≈ ln(classes) = {chance:.3f})" if chance else a,
            kind=kind,
            holds=holds,
            seeds_in=len(vals),
            all_seeds=bool(diffs)
            and len(diffs) == len(vals)
            and margin is not None
            and all(abs(d) <= margin for d in diffs),
            per_seed=list(diffs),
            margin=margin,
            chance=chance,
            difference=eff.difference,
            se=eff.se,
            n=eff.n,
            rule=RULE_TEXT[kind],
        )
    if kind == "refused":
        (norm,) = labels
        message = refusal(base_spec, norm) if base_spec is not None else None
        batch = base_spec.batch_size if base_spec is not None else None
        return RefusedClaim(
            claim=f"norm '{norm}' refused at batch size {batch}",
            kind=kind,
            holds=message is not None,
            all_seeds=message is not None,
            seeds_in=None,  # checked on the spec: no seed to wait for
            message=message,
            rule=RULE_TEXT[kind],
        )
    raise ValueError(f"unknown claim kind {kind!r}")


def refusal(spec: RunSpec, norm: str) -> str | None:
    """The spec's message when `spec` with `norm` is refused, else None."""
    try:
        RunSpec(**{**spec.model_dump(exclude={"probes"}), "norm": norm})
    except ValidationError as exc:
        return " ".join(e["msg"] for e in exc.errors())
    return None


def pending(claim: Claim, expected: int | None = None) -> bool:
    """Whether a judged claim is still waiting for seeds: fewer than MIN_SEEDS paired seeds in, or (with
    `expected`, the seeds launched) not holding while seeds are still to come."""
    seeds_in = claim.seeds_in
    if seeds_in is None:
        return False
    if seeds_in < MIN_SEEDS:  # even when no more are coming: "launch more seeds", never a verdict
        return True
    return expected is not None and seeds_in < expected and not claim.holds


def judge_all(
    rules: list[Rule],
    arms: dict[str, CellResult],
    metric: str,
    base_spec: RunSpec,
    expected: int | None = None,
) -> Verdict:
    """Every claim whose runs are present (a trimmed preset drops the others), and the overall verdict.

    `expected`: how many seeds were launched (a live group), so a claim not yet holding is pending."""
    usable = [r for r in rules if r[0] == "refused" or set(r[1:]) <= set(arms)]
    classes = CLASSES.get(base_spec.task)
    chance = math.log(classes) if classes else None
    claims = [judge(r, arms, metric, chance=chance, base_spec=base_spec) for r in usable]
    for c in claims:
        c.seeds_expected = None if c.seeds_in is None else expected
        c.pending = pending(c, expected)
    return Verdict(
        claims=claims,
        pending=any(c.pending for c in claims),
        holds=bool(claims) and all(c.holds for c in claims),
        all_seeds=bool(claims) and all(c.all_seeds for c in claims),
        rule=None if usable else "no rule for this preset: compare the numbers",
    )
