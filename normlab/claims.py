"""A preset's claims judged with effect sizes on its arms (normlab.arms: each run's seeds aggregated),
and the metric vocabulary both use. Torch-free: `normlab reproduce` (through the engine) and
`GET /api/groups/{id}` (from the store) call the same functions, so the browser, the client and
REPRODUCTIONS.md say the same thing.

Every comparison is paired by seed (one seed = the same data split, initialization and batch order for
every run of a preset): the per-seed differences d_s give the effect d̄ (their mean), its paired standard
error SE = sd(d)/√n and the interval d̄ ± t(0.95, n−1)·SE. Each kind's rule (a one-sided t test at 5 %,
or TOST at 5 % each side for an equivalence), its sign-test companion and the rule for a diverged run are
in normlab.claim_rules; normlab.claim_kinds has one judge per kind.

One evidence standard at every moment: a claim has a verdict ("holds" true or false) only once its
planned seeds are in, the seeds launched (`expected`; all of them in `normlab reproduce`) and at least
MIN_SEEDS. Before that it is *pending*: it reports its running estimate, interval and "n of N seeds in",
and "holds" is None, never a verdict either way. Each claim also carries its declaration
(normlab.declarations): the commit, and whether it is exploratory.
"""

from __future__ import annotations

import math

from normlab.claim_kinds import KINDS, Context, refusal
from normlab.claim_rules import (
    COMPANION_TEXT,
    DECIDES,
    EDGE_REL,
    EQUIV_REL,
    LINE_REL,
    MIN_SEEDS,
    RULE_TEXT,
    effect,
)
from normlab.declarations import MARGINS, claim_declared
from normlab_client.group_models import AnyClaim, BestClaim, CellResult, Claim, Verdict
from normlab_client.spec import RunSpec

__all__ = [
    "EDGE_REL",
    "EQUIV_REL",
    "LINE_REL",
    "MIN_SEEDS",
    "RULE_TEXT",
    "Z",
    "effect",
    "judge",
    "judge_all",
    "pending",
    "refusal",
]

Rule = tuple[str, ...]  # ("better", "layer", "batch"): a kind and its run labels (normlab.presets)

Z = 2.0  # the maps' descriptive marker (normlab.maps: which side a point "favours"); claims use t

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


def metric_key(metric: str) -> str:
    """The RunResult.metrics key of a preset's metric: 'val_loss' stays, 'accuracy' -> 'val_accuracy'."""
    return metric if metric.startswith(("val_", "test_")) else f"val_{metric}"


def curve_field(metric: str) -> str:
    """The scalars-event field holding a preset metric's validation curve."""
    return CURVE_FIELD.get(metric.removeprefix("val_"), "val_loss")


def higher_is_better(metric: str) -> bool:
    return metric.removeprefix("val_") in HIGHER_IS_BETTER


def judge(
    rule: Rule,
    arms: dict[str, CellResult],
    metric: str,
    *,
    chance: float | None = None,
    base_spec: RunSpec | None = None,
) -> AnyClaim:
    """One claim as if every seed were in: its effect and interval, whether its t rule holds, its
    sign-test companion and its rules (judge_all withholds the verdict while seeds are to come)."""
    kind, *labels = rule
    if kind not in KINDS:
        raise ValueError(f"unknown claim kind {kind!r}")
    claim = KINDS[kind](labels, Context(arms, not higher_is_better(metric), chance, base_spec))
    claim.decides = DECIDES if kind != "refused" else "checked on the spec"
    claim.companion_rule = COMPANION_TEXT[kind]
    return claim


def pending(claim: Claim, expected: int | None = None) -> bool:
    """Whether a judged claim still waits for seeds: fewer than MIN_SEEDS paired seeds in (even when no
    more are coming), or (with `expected`, the seeds launched) fewer than the planned seeds."""
    seeds_in = claim.seeds_in
    if seeds_in is None:
        return False
    return seeds_in < MIN_SEEDS or (expected is not None and seeds_in < expected)


def _withhold(claim: AnyClaim) -> None:
    """No verdict either way while seeds are to come: the estimate and interval stay, the verdicts go."""
    claim.holds = claim.all_seeds = None
    if claim.companion is not None:
        claim.companion.holds = None
    if isinstance(claim, BestClaim):
        for part in claim.versus:
            part.holds = part.all_seeds = None
            if part.companion is not None:
                part.companion.holds = None


def _declare(claim: AnyClaim, preset: str | None, rule: Rule) -> None:
    declared = claim_declared(preset, rule) if preset else None
    if declared is None:
        return
    claim.declared = declared.commit
    margin = MARGINS.get(rule[0])
    if margin is not None and margin.commit != declared.commit:
        claim.declared += f" (margin {margin.commit})"
    claim.exploratory = declared.exploratory is not None
    claim.exploratory_why = declared.exploratory


def judge_all(
    rules: list[Rule],
    arms: dict[str, CellResult],
    metric: str,
    base_spec: RunSpec,
    expected: int | None = None,
    preset: str | None = None,
) -> Verdict:
    """Every claim whose runs are present (a trimmed preset drops the others), and the overall verdict.

    `expected`: how many seeds were launched (a live group): until they are in, every claim is pending
    and no verdict is given. `preset`: its name, for the claims' declarations."""
    usable = [r for r in rules if r[0] == "refused" or set(r[1:]) <= set(arms)]
    classes = CLASSES.get(base_spec.task)
    chance = math.log(classes) if classes else None
    claims = [judge(r, arms, metric, chance=chance, base_spec=base_spec) for r in usable]
    for rule, c in zip(usable, claims, strict=True):
        c.seeds_expected = None if c.seeds_in is None else expected
        c.pending = pending(c, expected)
        if c.pending:
            _withhold(c)
        _declare(c, preset, tuple(rule))
    waiting = any(c.pending for c in claims)
    return Verdict(
        claims=claims,
        pending=waiting,
        holds=None if waiting else bool(claims) and all(c.holds for c in claims),
        all_seeds=None if waiting else bool(claims) and all(c.all_seeds for c in claims),
        rule=None if usable else "no rule for this preset: compare the numbers",
    )
