"""Presets: the paper's figures as runs, as data (torch-free, so the API and front end can list them).

Each preset is a handful of `RunSpec`s compared on one metric. `normlab reproduce PRESET` runs them
(over several seeds) and reports the comparison side by side; REPRODUCTIONS.md records the outcomes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from normlab.spec import RunSpec


@dataclass(frozen=True)
class Preset:
    """A figure of the paper: the runs it compares, the metric, and one sentence on what it shows."""

    name: str
    title: str
    paper_ref: str
    shows: str
    runs: tuple[RunSpec, ...]
    metric: str  # the final metric compared: "val_loss", "accuracy", "bpc" or "mse"
    labels: tuple[str, ...] = ()  # one short label per run (defaults to the normalizer)
    seeds: tuple[int, ...] = (0, 1, 2)
    expect: str = ""  # the paper's direction, in words
    tags: tuple[str, ...] = field(default_factory=tuple)

    def run_labels(self) -> tuple[str, ...]:
        return self.labels or tuple(r.norm for r in self.runs)

    def public(self) -> dict:
        return {
            "name": self.name, "title": self.title, "paper_ref": self.paper_ref, "shows": self.shows,
            "metric": self.metric, "labels": list(self.run_labels()), "seeds": list(self.seeds),
            "expect": self.expect,
            "runs": [r.model_dump(exclude_none=True) for r in self.runs],
        }


def _digits(norm: str, batch_size: int, steps: int = 300, **kw) -> RunSpec:
    return RunSpec(task="digits", norm=norm, batch_size=batch_size, steps=steps, eval_every=25, **kw)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "fig6-batch128", "Fig. 6 (left): BN vs LN at batch size 128", "§6.6, Fig. 6",
            "With large mini-batches LayerNorm and BatchNorm train an MLP about equally well.",
            (_digits("batch", 128), _digits("layer", 128)), "val_loss",
            expect="LN ≈ BN",
        ),
        Preset(
            "fig6-batch4", "Fig. 6 (right): BN vs LN at batch size 4", "§6.6, Fig. 6",
            "With tiny mini-batches BatchNorm's noisy statistics hurt, while LayerNorm stays robust.",
            (_digits("batch", 4), _digits("layer", 4)), "val_loss",
            expect="LN better than BN",
        ),
        Preset(
            "online", "Online learning: batch size 1", "§3",
            "LayerNorm works in the pure online regime, where BatchNorm cannot run at all.",
            (_digits("none", 1, lr=3e-4), _digits("layer", 1, lr=3e-4)), "val_loss",
            expect="LN trains at batch size 1 (BN is refused)",
        ),
        Preset(
            "convnets", "ConvNets: none vs BN vs LN", "§6.7",
            "In a ConvNet LayerNorm beats no normalization, but BatchNorm beats LayerNorm.",
            tuple(RunSpec(task="conv-digits", norm=n, batch_size=32, steps=300, eval_every=25)
                  for n in ("none", "batch", "layer")),
            "val_loss", expect="BN better than LN better than none",
        ),
        Preset(
            "gain-init", "Gain initialization 1.0 vs 0.1", "§6.2 (Cooijmans et al. 2016)",
            "LayerNorm is insensitive to the initial gain; recurrent BatchNorm is not.",
            tuple(RunSpec(task="seq-digits", norm=n, gain_init=g, batch_size=32, steps=300, eval_every=25)
                  for n in ("layer", "batch") for g in (1.0, 0.1)),
            "val_loss", labels=("layer g=1.0", "layer g=0.1", "batch g=1.0", "batch g=0.1"),
            expect="LN's gap between gains smaller than recurrent BN's",
        ),
        Preset(
            "long-sequences", "Long sequences: the adding problem at T=200", "§3.1, §6.5",
            "LayerNorm keeps hidden-state dynamics stable over long sequences with small batches (‖h_t‖ "
            "per time step stays flat); recurrent BN has no statistics past its trained length.",
            # steps cut from 400 when that took > 30 min; now ≈ 2 min for the whole preset (REPRODUCTIONS.md).
            # Probes on: the hidden-state traces (‖h_t‖ per time step) are what §3.1 is about.
            tuple(RunSpec(task="adding", norm=n, cell="lstm", seq_len=200, eval_seq_len=400, batch_size=8,
                          steps=200, eval_every=50, probes={"enabled": True, "trace_every": 50})
                  for n in ("none", "layer", "batch")),
            "val_loss", expect="LN lowest loss at 2× length; LN's ‖h_t‖ steadier over time steps than "
                               "without normalization",
        ),
    ]
}
