"""Plain words for the probe panels: a model's module paths ("rnn.0.ih", "hidden.1.weight", "out") as a
non-expert reads them ("LSTM input weights", "hidden layer 2 weights", "output layer"), and the one
sentence per panel that says what it shows and what to look for."""

from __future__ import annotations

import re

# the parts of a recurrent layer (workers/engine/recurrent.py), in words
RNN_PARTS = {
    "ih": "input weights",
    "hh": "recurrent weights",
    "norm_c": "cell-state norm",
    "ih_gates": "input-to-gates weights",
    "hh_gates": "recurrent-to-gates weights",
    "ih_cand": "input-to-candidate weights",
    "hh_cand": "recurrent-to-candidate weights",
    "bias": "gate biases",
}
PARAM_WORDS = {
    "weight": "weights",
    "v": "weight directions",
    "norm.gain": "norm gain",
    "norm.bias": "norm bias",
}
ESTIMATORS = {"per-sample": "exact per example", "summed-gradient": "noisy batch estimate"}

PANEL_HELP = {
    "curves": "Loss on the training batches (smoothed, raw faint behind) and on held-out data: lower is "
    "better; look for which normalizer falls fastest and whether the validation curve follows.",
    "hidden": "How large the hidden state ‖h_t‖ and its gradient ‖∂L/∂h_t‖ are at each time step: with "
    "Layer Normalization the rows stay even across t; without it the gradient fades towards t = 1.",
    "layers": "Each layer's spread of summed inputs and size of its activations over training: "
    "normalized layers stay near a fixed scale, unnormalized ones drift.",
    "fisher": "How curved the loss is (the Fisher information): large traces mean small weight changes "
    "move the output a lot; η·λ_max above 2 means the step size is too big for stable descent.",
}
FISHER_AXES = {  # subplot (row, col) -> y-axis title with its unit
    (1, 1): "trace of F (per example)",
    (1, 2): "η·λ_max (no unit)",
    (2, 1): "‖w‖ (L2 norm)",
    (2, 2): "step size (fraction of ‖w‖)",
    (3, 1): "uᵀFu (per example)",
    (3, 2): "F_gg (per example)",
}
FISHER_SUBPLOT_HELP = [
    "Fisher trace per layer — how sensitive the output is to each layer's weights; look for one layer "
    "dominating or a sudden jump.",
    "η·λ_max — the sharpest direction times the learning rate; below the dashed line at 2 the descent is "
    "stable.",
    "‖w‖ per weight set — normalized layers' weights grow, which shrinks their effective step.",
    "Effective step — how far each update moves the weights relative to their size.",
    "uᵀFu along w — zero for a scale-invariant (normalized) group: a built-in sanity check.",
    "Gain curvature — how sensitive the output is to the normalization gains.",
]


def cell_of(names: list[str]) -> str:
    """'GRU' when the names are a GRU's (gates and candidate weights), else 'LSTM'."""
    return "GRU" if any(".ih_gates" in n or ".ih_cand" in n for n in names) else "LSTM"


def plain_name(name: str, cell: str = "LSTM") -> str:
    """A module or parameter path in words; an unknown one is returned as it is."""
    if name in ("out", "out.weight"):
        return "output layer"
    m = re.fullmatch(r"(hidden|convs|rnn)\.(\d+)(?:\.(.+))?", name)
    if not m:
        return name
    kind, index, rest = m.group(1), int(m.group(2)), m.group(3) or ""
    if kind == "rnn":
        part = rest.removesuffix(".weight").removesuffix(".v")
        words = RNN_PARTS.get(part) or PARAM_WORDS.get(part) or part or "layer"
        return f"{cell} {words}" + (f" (layer {index + 1})" if index else "")
    layer = f"{'hidden' if kind == 'hidden' else 'conv'} layer {index + 1}"
    return f"{layer} {PARAM_WORDS[rest]}" if rest in PARAM_WORDS else layer if not rest else f"{layer} {rest}"


def estimator_words(kind: str | None) -> str:
    return ESTIMATORS.get(kind or "", kind or "unknown estimator")
