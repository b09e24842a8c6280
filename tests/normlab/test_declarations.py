"""The pre-registration registry (normlab.declarations): every claim of every preset has a rule, a
companion, a declaration commit that exists in git and holds the claim, and an exploratory flag."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from normlab.claims import judge_all
from normlab.declarations import CLAIMS, GRIDS, MAP_POINTS, MARGINS
from normlab.presets import PRESETS
from tests.normlab.test_claims import _arms

ROOT = Path(__file__).resolve().parents[2]


def _show(commit: str, path: str) -> str | None:
    """The file `path` at `commit`, or None when git has no such commit or file here."""
    if shutil.which("git") is None:
        return None
    done = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:{path}"], capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else None


def _in_git() -> bool:
    return _show("HEAD", "normlab/presets.py") is not None


def test_every_claim_of_every_preset_is_declared_and_judged_with_a_rule_and_companion():
    assert set(CLAIMS) == {name for name, p in PRESETS.items() if p.claims}
    for name, preset in PRESETS.items():
        assert set(CLAIMS.get(name, {})) == set(preset.claims), name
        arms = _arms(**{lab: [0.5, 0.4, 0.6] for lab in preset.run_labels()})
        for claim in judge_all(list(preset.claims), arms, preset.metric, preset.runs[0], preset=name).claims:
            assert claim.rule and claim.decides and claim.companion_rule, (name, claim.claim)
            assert claim.declared and isinstance(claim.exploratory, bool), (name, claim.claim)
            assert claim.exploratory == (claim.exploratory_why is not None)
            assert claim.companion is not None or claim.kind == "refused"
    assert set(GRIDS) == {name for name, p in PRESETS.items() if p.tuning}
    assert set(MAP_POINTS) == {name for name, p in PRESETS.items() if p.scale_map}


def test_the_audits_post_hoc_claims_are_exploratory():
    exploratory = {(n, r) for n, claims in CLAIMS.items() for r, d in claims.items() if d.exploratory}
    assert {n for n, _ in exploratory} == {
        "edge-of-stability",
        "wd-effective-lr",
        "map-ln-bn-batch",
        "map-ln-none-lr",
        "map-ln-none-depth",
    }
    assert ("wd-effective-lr", ("decays", "no WD")) not in exploratory  # no margin, declared with it
    assert GRIDS["edge-of-stability"].exploratory and MARGINS["edge"].exploratory


@pytest.mark.skipif(not _in_git(), reason="needs the git history of this checkout")
def test_each_declaration_commit_holds_what_it_declares():
    for name, claims in CLAIMS.items():
        for rule, declared in claims.items():
            text = _show(declared.commit, "normlab/presets.py")
            assert text is not None, (name, declared.commit)
            assert f'"{rule[-1]}"' in text and f'"{rule[0]}"' in text, (name, rule, declared.commit)
    for kind, declared in MARGINS.items():
        text = _show(declared.commit, "normlab/claims.py")
        assert (
            text is not None
            and {"close": "EQUIV_REL", "chance": "EQUIV_REL"}.get(
                kind, {"equilibrium": "LINE_REL", "edge": "EDGE_REL"}.get(kind, "")
            )
            in text
        )
    for name, declared in {**GRIDS, **MAP_POINTS}.items():
        text = _show(declared.commit, "normlab/presets.py")
        assert text is not None and name in text, (name, declared.commit)
