"""A claim as the cards show it (Presets page, Compare): its verdict or, while seeds are still coming in,
its running estimate; its t rule, sign-test companion, declaration and the replication record — pure
functions of the API's claims (normlab_client.group_models), kept apart from the card layout so each can
change on its own."""

from __future__ import annotations

import math
from typing import Any

from dash import html
from dash.development.base_component import Component

from normlab.claim_rules import MIN_SEEDS
from normlab_client.group_models import Claim


def _num(v: Any, digits: int = 2) -> str:
    """`digits` decimals, or `digits` significant digits below 0.1: never "± 0.00" for a small effect."""
    if not isinstance(v, int | float) or not math.isfinite(v):
        return "–"
    text = f"{v:+.{digits}g}" if abs(v) < 0.1 and v != 0 else f"{v:+.{digits}f}"
    return text.replace("-", "−")


def _effect(claim: Claim) -> str:
    """' — Δ = −0.14 ± 0.02, interval [−0.18, −0.10]' (empty without a difference)."""
    if claim.difference is None:
        return ""
    text = f" — Δ = {_num(claim.difference)}"
    if claim.se is not None:
        text += f" ± {_num(claim.se).lstrip('+')}"
    if claim.interval is not None and claim.t is not None:
        lo, hi = claim.interval
        text += f", interval [{_num(lo)}, {_num(hi)}] (± t = {claim.t:.2f} SE)"
    return text


def pending_text(claim: Claim) -> str:
    """'pending — 3 of 5 seeds in — Δ = … (running estimate; no verdict until all 5 are in)'."""
    got, want = claim.seeds_in or 0, claim.seeds_expected
    text = (
        f"pending — {got} of {want} seeds in" if want else f"pending — {got} seed{'s' if got != 1 else ''} in"
    )
    if want is not None and got >= want and got < MIN_SEEDS:
        return text + f"; a standard error needs {MIN_SEEDS} seeds: launch the preset with more"
    if claim.difference is not None:
        text += _effect(claim) + f" (running estimate; no verdict until all {want or MIN_SEEDS} are in)"
    return text


def claim_text(claim: Claim) -> str:
    """'holds on all 5 seeds — Δ = −0.14 ± 0.02, interval […]' or, while the planned seeds are not all
    in, 'pending — 3 of 5 seeds in' with the running estimate."""
    if claim.pending or claim.holds is None:
        return pending_text(claim)
    n = claim.n
    seeds = f"{n} seed{'s' if n != 1 else ''}" if n is not None else "the finished seeds"
    if claim.holds and claim.all_seeds:
        verdict = f"holds on all {seeds}" if n is not None else "holds on every seed"
    elif claim.holds:
        verdict = f"holds on the mean of {seeds}, not on every seed"
    else:
        verdict = f"does not hold ({seeds})"
    return verdict + _effect(claim)


def state(claim: Claim) -> tuple[str, str]:
    """The card's class and mark: ('pending', '… '), ('holds', '✓ ') or ('fails', '✗ ')."""
    if claim.pending or claim.holds is None:
        return "pending", "… "
    return ("holds", "✓ ") if claim.holds else ("fails", "✗ ")


def companion_text(claim: Claim) -> str | None:
    """'sign test: layer lower on 5 of 5 seeds (sign test p = 0.0312): holds' (None without one)."""
    comp = claim.companion
    if comp is None:
        return None
    verdict = "" if comp.holds is None else ": holds" if comp.holds else ": does not hold"
    return f"sign test: {comp.text}{verdict}"


def declaration_text(claim: Claim) -> str | None:
    """'declared in 2d54ec1 · confirmatory' or 'exploratory (declared in …): why'."""
    if not claim.declared:
        return None
    if claim.exploratory:
        return f"exploratory (declared in {claim.declared}): {claim.exploratory_why}"
    return f"declared in {claim.declared}, before any run on its verdict seeds · confirmatory"


def claim_details(claim: Claim) -> list[Component]:
    """The muted lines under a claim: its t rule, which rule decides, the companion, the declaration."""
    lines = [f"rule: {claim.rule}"]
    if claim.decides:
        lines.append(f"decides: {claim.decides}; companion: {claim.companion_rule}")
    lines += [t for t in (companion_text(claim), declaration_text(claim)) if t]
    return [html.Div(line, className="muted rule") for line in lines]


def replication_text(record: dict[str, Any] | None) -> str | None:
    """'fresh seeds 18833, …: holds · replicated on 2 of 3 draws' from a claim's replication record
    (`GET /api/presets/{name}/replications`), or None before any fresh draw has ended."""
    if not record or not record.get("draws"):
        return None
    latest = record["latest"]
    seeds = ", ".join(map(str, latest["seeds"]))
    verdict = {True: "holds", False: "does not hold", None: "pending"}[latest["holds"]]
    return (
        f"latest fresh draw (seeds {seeds}): {verdict} · replicated on {record['held']} of "
        f"{record['judged']} judged draw{'s' if record['judged'] != 1 else ''}"
    )
