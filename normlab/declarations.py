"""Pre-registration, in the code: the commit that declared each preset's claims, margins, tuning grids and
map points, and which of them are *exploratory* (torch-free data; normlab.claims attaches it to every
judged claim, tests/normlab/test_declarations.py checks each hash against git).

A claim is confirmatory when its rule, its margin and the setting it judges were committed before any run
on its verdict seeds (0–4); one declared after such runs is exploratory and says why. An exploratory claim
becomes confirmatory only by holding on seeds drawn after its declaration: a fresh draw
(`normlab reproduce PRESET --fresh-seeds K`, the Presets page's "replicate on fresh seeds"), which the
replication record shows beside it. The hashes were found with `git log -S` on normlab/presets.py and
normlab/claims.py; the reasons come from the commits and REPRODUCTIONS.md.
"""

from __future__ import annotations

from dataclasses import dataclass

Rule = tuple[str, ...]


@dataclass(frozen=True)
class Declared:
    """Where a claim, margin, grid or map's points were declared: a short commit hash, and why it is
    exploratory (None: declared before any run on its verdict seeds)."""

    commit: str
    exploratory: str | None = None


# The margins of the equivalence kinds (normlab.claim_kinds), by kind.
MARGINS: dict[str, Declared] = {
    "close": Declared("2d54ec1"),  # EQUIV_REL, with the effect-size claims
    "chance": Declared("2d54ec1"),  # EQUIV_REL of ln(classes)
    "equilibrium": Declared(
        "9ee88a0", "the ±25 % margin (LINE_REL) was written after trials on the verdict seeds"
    ),
    "edge": Declared("9ee88a0", "the ±10 % margin (EDGE_REL) was written after trials on the verdict seeds"),
}

_MAP_CLAIMS_AFTER = "the claim was added after the map's runs on seeds 0–4 had been seen"
_EDGE = (
    "the ±10 % margin and the LN learning-rate grid were written after trials on the verdict seeds "
    "(LN diverging at η = 0.5 had been seen)"
)

CLAIMS: dict[str, dict[Rule, Declared]] = {
    "fig6-batch128": {("close", "layer", "batch"): Declared("2d54ec1")},
    "fig6-batch4": {
        ("better", "layer", "batch"): Declared("2d54ec1"),
        ("faster", "layer", "batch"): Declared("2d54ec1"),
    },
    "online": {
        ("trains", "layer"): Declared("2d54ec1"),
        ("refused", "batch"): Declared("2d54ec1"),
        ("better", "layer", "none"): Declared("2d54ec1"),
    },
    "convnets": {
        ("better", "batch", "layer"): Declared("2d54ec1"),
        ("better", "layer", "none"): Declared("2d54ec1"),
    },
    "gain-init": {
        ("gap", "layer g=1.0", "layer g=0.1", "batch g=1.0", "batch g=0.1"): Declared("2d54ec1"),
        ("better", "layer g=1.0", "layer g=0.1"): Declared("2d54ec1"),
        ("better", "batch g=0.1", "batch g=1.0"): Declared("2d54ec1"),
    },
    "pixel-digits": {
        ("better", "layer", "none"): Declared("2d54ec1"),
        ("faster", "layer", "none"): Declared("2d54ec1"),
    },
    "pixel-mnist784": {
        ("better", "layer", "none"): Declared("c4e3bf3"),
        ("faster", "layer", "none"): Declared("c4e3bf3"),
    },
    "handwriting": {("faster", "layer", "none"): Declared("07360cf")},
    "draw": {("faster", "layer", "none"): Declared("527139a")},
    "order-embeddings": {("faster", "layer", "none"): Declared("527139a")},
    "long-sequences": {
        ("gradient", "layer", "none"): Declared("2d54ec1"),
        ("steadier", "layer", "none"): Declared("2d54ec1"),
    },
    # the 256 and gap claims were first written at cfbb17b on an earlier design (300 steps, one rate) after
    # its runs; 6c1081c fixed today's design and all three claims from the tuning seeds before any verdict
    # seed of it ran (REPRODUCTIONS.md)
    "map-ln-none-seq-len": {
        ("better", "layer seq_len=128", "none seq_len=128"): Declared("6c1081c"),
        ("better", "layer seq_len=256", "none seq_len=256"): Declared("6c1081c"),
        ("gap", "layer seq_len=16", "none seq_len=16", "layer seq_len=256", "none seq_len=256"): Declared(
            "6c1081c"
        ),
    },
    "map-ln-bn-batch": {
        ("better", "layer batch_size=2", "batch batch_size=2"): Declared("3791b28", _MAP_CLAIMS_AFTER),
        ("better", "layer batch_size=4", "batch batch_size=4"): Declared("3791b28", _MAP_CLAIMS_AFTER),
    },
    "map-ln-none-depth": {
        ("better", "layer layers=8", "none layers=8"): Declared("cfbb17b", _MAP_CLAIMS_AFTER),
    },
    "map-ln-none-lr": {
        ("better", "layer lr=0.01", "none lr=0.01"): Declared("2a2c047", _MAP_CLAIMS_AFTER),
        ("better", "layer lr=0.1", "none lr=0.1"): Declared("2a2c047", _MAP_CLAIMS_AFTER),
    },
    "map-gn-bn-batch": {("better", "group batch_size=2", "batch batch_size=2"): Declared("33f59fc")},
    "groupnorm-batch2": {
        ("better", "group", "batch"): Declared("963efdc"),
        ("better", "group+WS", "batch"): Declared("963efdc"),
    },
    "wd-effective-lr": {
        ("decays", "no WD"): Declared("9ee88a0"),
        ("equilibrium", "WD 0.01"): Declared("9ee88a0", MARGINS["equilibrium"].exploratory),
    },
    "edge-of-stability": {
        ("edge", "none η=2"): Declared("9ee88a0", MARGINS["edge"].exploratory),
        ("edge", "layer η=0.25"): Declared("55d1a09", _EDGE),  # η = 0.25 by the grid of bda2ec6
    },
    "transformer-ln-position": {
        ("better", "pre-LN", "post-LN"): Declared("963efdc"),
        ("trains", "pre-LN"): Declared("963efdc"),
        ("chance", "post-LN"): Declared("963efdc"),
    },
}

# Tuning grids (normlab.tuning), by preset.
GRIDS: dict[str, Declared] = {
    "fig6-batch128": Declared("d1a0a62"),
    "convnets": Declared("d1a0a62"),
    "gain-init": Declared("d1a0a62"),
    "pixel-digits": Declared("d1a0a62"),
    "pixel-mnist784": Declared("c4e3bf3"),
    "handwriting": Declared("d1a0a62"),
    "draw": Declared("d1a0a62"),
    "order-embeddings": Declared("d1a0a62"),
    "long-sequences": Declared("d1a0a62"),
    "map-ln-none-seq-len": Declared("c0746be"),
    "groupnorm-batch2": Declared("bda2ec6"),
    "edge-of-stability": Declared(
        "bda2ec6", "declared after trials on the verdict seeds had shown LN diverge at η = 0.5"
    ),
    "transformer-ln-position": Declared("bda2ec6"),
}

# The axis values of each map (normlab.maps.ScaleMap), by preset.
MAP_POINTS: dict[str, Declared] = {
    "map-ln-bn-batch": Declared("e1e4c7b"),
    "map-ln-none-depth": Declared("096f020"),
    "map-ln-none-lr": Declared("096f020"),
    "map-ln-none-seq-len": Declared("6c1081c"),
    "map-gn-bn-batch": Declared("33f59fc"),
}


def claim_declared(preset: str, rule: Rule) -> Declared | None:
    """The declaration of one claim of `preset` (None for a claim the registry does not know)."""
    return CLAIMS.get(preset, {}).get(tuple(rule))
