"""One judge per claim kind (the table `KINDS`): each returns the claim's effect, its t interval, whether
the t rule holds and its sign-test companion, by the rules of normlab.claim_rules (torch-free;
`normlab.claims.judge` dispatches here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from normlab.arms import START, is_number
from normlab.claim_rules import (
    EDGE_REL,
    EQUIV_REL,
    LINE_REL,
    RULE_TEXT,
    beyond,
    inside,
    interval,
    sign,
)
from normlab.theory import angular_equilibrium
from normlab_client.group_models import (
    AnyClaim,
    BestClaim,
    CellResult,
    ChanceClaim,
    CloseClaim,
    Comparison,
    DecaysClaim,
    LineClaim,
    PairedClaim,
    RefusedClaim,
    TraceName,
    TrainsClaim,
)
from normlab_client.spec import RunSpec


@dataclass(frozen=True)
class Context:
    """What every judge reads: the arms by label, whether lower wins, ln(classes) and the base spec."""

    arms: dict[str, CellResult]
    lower: bool
    chance: float | None
    base_spec: RunSpec | None


Quantity = Literal["value", "auc"] | TraceName

# what each kind judges, per seed: the final metric, the area under its curve, or a hidden-state figure
# (normlab.arms.trace_stats); the Presets page draws this quantity on a preset's card
QUANTITY: dict[str, Quantity] = {
    "better": "value",
    "close": "value",
    "gap": "value",
    "best": "value",
    "trains": "value",
    "chance": "value",
    "faster": "auc",
    "steadier": "hidden_spread_late",
    "gradient": "grad_orders",
    "decays": "elr_orders",
    "equilibrium": "angular_late",
    "edge": "eta_lambda_late",
}


def per_seed(arm: CellResult, key: Quantity) -> dict[int, float | None]:
    vals: list[float | None]
    if key == "value":
        vals = arm.values
    elif key == "auc":
        vals = arm.aucs
    else:
        trace = arm.traces.get(key)
        vals = trace.values if trace is not None else [None] * len(arm.seeds)
    return dict(zip(arm.seeds, vals, strict=True))


def _sub(x: float | None, y: float | None) -> float | None:
    return x - y if is_number(x) and is_number(y) else None


def directional(
    kind: Literal["better", "faster", "steadier", "gradient"],
    claim: str,
    a: CellResult,
    b: CellResult,
    key: Quantity,
    lower: bool,
    what: str,
) -> PairedClaim:
    """A's `key` lower (lower=True) or higher than B's, paired by seed: the t rule and the sign test."""
    pa, pb = per_seed(a, key), per_seed(b, key)
    seeds = [s for s in pa if s in pb]
    wins = diverged = 0
    diffs = []
    for s in seeds:
        x, y = pa[s], pb[s]
        if is_number(x) and is_number(y):
            diffs.append(x - y)
            wins += x < y if lower else x > y
        else:  # a diverged or failed run ranks worst
            diverged += 1
            wins += is_number(x)
    numbers = interval(diffs)
    return PairedClaim(
        claim=claim,
        kind=kind,
        holds=beyond(numbers, below=lower),
        seeds_in=len(seeds),
        all_seeds=bool(seeds) and wins == len(seeds),
        per_seed=[_sub(pa[s], pb[s]) for s in seeds],
        rule=RULE_TEXT[kind],
        companion=sign(wins, len(seeds), diverged, what),
        **numbers,
    )


def _better(labels: list[str], ctx: Context) -> AnyClaim:
    a, b = labels
    what = f"{a} {'lower' if ctx.lower else 'higher'}"
    return directional("better", f"{a} better than {b}", ctx.arms[a], ctx.arms[b], "value", ctx.lower, what)


def _faster(labels: list[str], ctx: Context) -> AnyClaim:
    a, b = labels
    what = f"{a}'s curve {'lower' if ctx.lower else 'higher'}"
    claim = f"{a} converges faster than {b}"
    return directional("faster", claim, ctx.arms[a], ctx.arms[b], QUANTITY["faster"], ctx.lower, what)


def _steadier(labels: list[str], ctx: Context) -> AnyClaim:
    a, b = labels
    claim = f"{a} steadier than {b} (‖h_t‖ max ÷ min over t ≥ {START})"
    arms = ctx.arms
    return directional("steadier", claim, arms[a], arms[b], QUANTITY["steadier"], True, f"{a} steadier")


def _gradient(labels: list[str], ctx: Context) -> AnyClaim:
    a, b = labels
    claim = f"‖∂ℓ/∂h_t‖ vanishes less over time with {a} than with {b}"
    what = f"{a} vanishes less"
    return directional("gradient", claim, ctx.arms[a], ctx.arms[b], QUANTITY["gradient"], True, what)


def _below(diffs: list[float], seeds: int, what: str) -> dict[str, Any]:
    """The t rule and sign test on per-seed numbers that should lie below 0 (`seeds` seeds in; one with a
    diverged run gives no number and counts against)."""
    numbers = interval(diffs)
    wins = sum(x < 0 for x in diffs)
    return {
        **numbers,
        "holds": beyond(numbers, below=True),
        "seeds_in": seeds,
        "all_seeds": bool(diffs) and wins == seeds,
        "per_seed": list(diffs),
        "companion": sign(wins, seeds, seeds - len(diffs), what),
    }


def _gap(labels: list[str], ctx: Context) -> AnyClaim:
    a1, a2, b1, b2 = labels
    maps = [per_seed(ctx.arms[lab], "value") for lab in labels]
    seeds = [s for s in maps[0] if all(s in m for m in maps)]
    diffs = []
    for s in seeds:
        w, x, y, z = (m[s] for m in maps)
        if is_number(w) and is_number(x) and is_number(y) and is_number(z):
            diffs.append(abs(w - x) - abs(y - z))
    return PairedClaim(
        claim=f"|{a1} − {a2}| smaller than |{b1} − {b2}|",
        kind="gap",
        rule=RULE_TEXT["gap"],
        **_below(diffs, len(seeds), f"|{a1} − {a2}| smaller"),
    )


def _trains(labels: list[str], ctx: Context) -> AnyClaim:
    (a,) = labels
    vals, chance = ctx.arms[a].values, ctx.chance
    diffs = [v - chance for v in vals if is_number(v)] if chance is not None else []
    claim = f"{a} trains (val loss below ln(classes) = {chance:.3f})" if chance else f"{a} trains"
    return TrainsClaim(
        claim=claim,
        kind="trains",
        chance=chance,
        rule=RULE_TEXT["trains"],
        **_below(diffs, len(vals), f"{a} below chance"),
    )


def _decays(labels: list[str], ctx: Context) -> AnyClaim:
    (a,) = labels
    by_seed = per_seed(ctx.arms[a], QUANTITY["decays"])
    orders = [v for v in by_seed.values() if is_number(v)]
    return DecaysClaim(
        claim=f"{a}: η/‖w‖² decays",
        kind="decays",
        rule=RULE_TEXT["decays"],
        **_below(orders, len(by_seed), "η/‖w‖² falls"),
    )


def _equivalent(diffs: list[float], seeds: int, margins: list[float] | float | None) -> dict[str, Any]:
    """TOST and the sign test on per-seed differences `diffs` (of `seeds` seeds) from a line: whether
    they lie inside ±margin (one margin, or one per difference)."""
    numbers = interval(diffs)
    mean_margin = margins if not isinstance(margins, list) else None
    per = margins if isinstance(margins, list) else [margins] * len(diffs)
    ok = sum(m is not None and abs(d) <= m for d, m in zip(diffs, per, strict=True))
    return {
        **numbers,
        "holds": inside(numbers, mean_margin),
        "seeds_in": seeds,
        "all_seeds": bool(diffs) and ok == seeds,
        "per_seed": list(diffs),
        "companion": sign(ok, seeds, seeds - len(diffs), "inside the margin"),
    }


def _close(labels: list[str], ctx: Context) -> AnyClaim:
    a, b = labels
    pa, pb = per_seed(ctx.arms[a], "value"), per_seed(ctx.arms[b], "value")
    pairs = [(pa[s], pb[s]) for s in pa if s in pb]
    ok = [(x, y) for x, y in pairs if is_number(x) and is_number(y)]
    ref = ctx.arms[b].mean
    margin = None if ref is None else EQUIV_REL * abs(ref)
    numbers = _equivalent([x - y for x, y in ok], len(pairs), [EQUIV_REL * abs(y) for _, y in ok])
    numbers["holds"] = inside(numbers, margin)
    return CloseClaim(claim=f"{a} ≈ {b}", kind="close", margin=margin, rule=RULE_TEXT["close"], **numbers)


def _line(labels: list[str], ctx: Context, kind: Literal["equilibrium", "edge"]) -> AnyClaim:
    (a,) = labels
    key: Quantity
    line: float | None
    if kind == "equilibrium":
        spec = ctx.arms[a].spec
        lr, wd, mom = (spec.get(k) for k in ("lr", "weight_decay", "momentum"))
        line = angular_equilibrium(lr, wd, mom or 0.0) if lr and wd else None
        key, what, margin = QUANTITY["equilibrium"], f"{a}: angular update at √(2ηλ/(1+μ))", LINE_REL
    else:
        line, key, what = 2.0, QUANTITY["edge"], f"{a}: η·λ_max(H) at the edge of stability (2)"
        margin = EDGE_REL
    per = per_seed(ctx.arms[a], key)
    ratios = [v / line - 1 for v in per.values() if is_number(v) and line]
    return LineClaim(
        claim=what,
        kind=kind,
        margin=margin,
        line=line,
        rule=RULE_TEXT[kind],
        **_equivalent(ratios, len(per), margin),
    )


def _chance(labels: list[str], ctx: Context) -> AnyClaim:
    (a,) = labels
    vals, chance = ctx.arms[a].values, ctx.chance
    diffs = [v - chance for v in vals if is_number(v)] if chance is not None else []
    margin = None if chance is None else EQUIV_REL * chance
    return ChanceClaim(
        claim=f"{a} stays at chance (val loss ≈ ln(classes) = {chance:.3f})" if chance else a,
        kind="chance",
        margin=margin,
        chance=chance,
        rule=RULE_TEXT["chance"],
        **_equivalent(diffs, len(vals), margin),
    )


def _best(labels: list[str], ctx: Context) -> AnyClaim:
    (a,) = labels
    parts = [_better([a, o], ctx) for o in ctx.arms if o != a]
    weakest = max((p.companion for p in parts if p.companion), key=lambda c: c.p or 1.0, default=None)
    return BestClaim(
        claim=f"{a} best of {', '.join(ctx.arms)}",
        kind="best",
        holds=bool(parts) and all(p.holds for p in parts),
        all_seeds=bool(parts) and all(p.all_seeds for p in parts),
        seeds_in=min((p.seeds_in or 0 for p in parts), default=0),
        versus=[Comparison.model_validate(p.model_dump(exclude=CLAIM_ONLY)) for p in parts],
        rule=RULE_TEXT["best"],
        companion=weakest,
    )


def refusal(spec: RunSpec, norm: str) -> str | None:
    """The spec's message when `spec` with `norm` is refused, else None."""
    from pydantic import ValidationError

    try:
        RunSpec(**{**spec.model_dump(exclude={"probes"}), "norm": norm})
    except ValidationError as exc:
        return " ".join(e["msg"] for e in exc.errors())
    return None


def _refused(labels: list[str], ctx: Context) -> AnyClaim:
    (norm,) = labels
    message = refusal(ctx.base_spec, norm) if ctx.base_spec is not None else None
    batch = ctx.base_spec.batch_size if ctx.base_spec is not None else None
    return RefusedClaim(
        claim=f"norm '{norm}' refused at batch size {batch}",
        kind="refused",
        holds=message is not None,
        all_seeds=message is not None,
        seeds_in=None,  # checked on the spec: no seed to wait for
        message=message,
        rule=RULE_TEXT["refused"],
    )


CLAIM_ONLY = {
    "pending",
    "seeds_expected",
    "declared",
    "exploratory",
    "exploratory_why",
    "decides",
    "companion_rule",
}
Judge = Callable[[list[str], Context], AnyClaim]
KINDS: dict[str, Judge] = {
    "better": _better,
    "faster": _faster,
    "steadier": _steadier,
    "gradient": _gradient,
    "close": _close,
    "gap": _gap,
    "best": _best,
    "trains": _trains,
    "decays": _decays,
    "equilibrium": lambda labels, ctx: _line(labels, ctx, "equilibrium"),
    "edge": lambda labels, ctx: _line(labels, ctx, "edge"),
    "chance": _chance,
    "refused": _refused,
}
