"""`build_model(spec, info, input_dim, n_outputs)`: the MLP, ConvNet or recurrent network a run trains.

Shapes: flat (B, D) -> logits (B, C); image (B, 1, H, W) -> logits (B, C); sequence (B, T, D) ->
per-step outputs (B, T, C), T free (evaluation may be longer than training). Normalization acts on the
hidden layers' summed inputs before the bias, never on the logits.

Every model has ``capture`` (default False); when True the forward pass fills ``captured``:
recurrent models {"h", "c" (LSTM), "summed_mean", "summed_std"} of the top recurrent layer, on the
step-by-step path (twice differentiable: the probes' exact products); with "fast" (the training loop's
traced steps) an LSTM that runs as one node on the CPU records its (T,) series there instead (see
`workers.engine.recurrent`), every other layer as with True; feed-forward and conv models {"layers":
[{"name", "summed_mean", "summed_std", "act_norm"}]} with floats: the batch mean of each case's mean /
std (population) of the layer's summed inputs W x before normalization, and the batch mean of each
case's ‖activation‖₂.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from normlab_client.catalog import TaskInfo
from workers.engine.norms import BatchNorm, make_linear, make_normalizer
from workers.engine.recurrent import case_mean_std, make_layer


class SplitLayer(Protocol):
    """A hidden layer in two halves: its summed inputs W x, then the normalizer (and bias) on them."""

    def summed(self, x: torch.Tensor) -> torch.Tensor: ...

    def normalize(self, a: torch.Tensor) -> torch.Tensor: ...


def _layer_stats(name: str, summed: torch.Tensor, act: torch.Tensor) -> dict:
    mean, std = case_mean_std(summed.detach().flatten(1))
    return {
        "name": name,
        "summed_mean": float(mean),
        "summed_std": float(std),
        "act_norm": float(act.detach().flatten(1).norm(dim=1).mean()),
    }


class MLP(nn.Module):
    """Hidden layers `hidden[k]` = ReLU(normalize(W x)); `out` = plain Linear to the logits."""

    def __init__(
        self, input_dim: int, hidden_size: int, layers: int, n_outputs: int, norm: str, gain_init: float = 1.0
    ):
        super().__init__()
        sizes = [input_dim] + [hidden_size] * layers
        pairs = zip(sizes[:-1], sizes[1:], strict=True)
        self.hidden = nn.ModuleList(make_linear(norm, a, b, gain_init) for a, b in pairs)
        self.out = nn.Linear(hidden_size, n_outputs)
        self.capture: bool = False
        self.captured: dict[str, Any] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        records = []
        for k, layer in enumerate(cast("Iterable[SplitLayer]", self.hidden)):
            a = layer.summed(x)
            x = torch.relu(layer.normalize(a))
            if self.capture:
                records.append(_layer_stats(f"hidden{k + 1}", a, x))
        if self.capture:
            self.captured = {"layers": records}
        return self.out(x)


WS_EPS = 1e-5


def standardize_weight(weight: torch.Tensor, eps: float = WS_EPS) -> torch.Tensor:
    """Weight Standardization (Qiao et al. 2019): each output filter W_i shifted to mean 0 and scaled to
    variance 1 over its fan-in (input channels × kernel): Ŵ_i = (W_i − μ_i) / √(σ_i² + eps), population
    variance. Differentiable: the gradient flows through μ_i and σ_i to W."""
    flat = weight.flatten(1)
    mean = flat.mean(dim=1, keepdim=True)
    var = flat.var(dim=1, unbiased=False, keepdim=True)
    return ((flat - mean) / torch.sqrt(var + eps)).view_as(weight)


class NormConv2d(nn.Module):
    """A bias-free 3×3 conv `weight` and a channel normalizer `norm` (its gain and bias per channel); with
    ``standardize`` the conv uses the standardized filters (`standardize_weight`) of `weight`."""

    def __init__(self, c_in: int, c_out: int, norm: nn.Module, standardize: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(c_out, c_in, 3, 3))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.norm = norm
        self.standardize = standardize

    def summed(self, x: torch.Tensor) -> torch.Tensor:
        weight = standardize_weight(self.weight) if self.standardize else self.weight
        return F.conv2d(x, weight, padding=1)

    def normalize(self, a: torch.Tensor) -> torch.Tensor:
        return self.norm(a)


class WeightNormConv2d(nn.Module):
    """3×3 conv with filters w_k = g_k v_k/‖v_k‖ (by hand), then bias `b`."""

    def __init__(self, c_in: int, c_out: int, gain_init: float = 1.0):
        super().__init__()
        self.v = nn.Parameter(torch.empty(c_out, c_in, 3, 3))
        nn.init.kaiming_uniform_(self.v, a=math.sqrt(5))
        self.g = nn.Parameter(torch.full((c_out,), float(gain_init)))
        self.b = nn.Parameter(torch.zeros(c_out))

    def summed(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.v, padding=1)

    def normalize(self, a: torch.Tensor) -> torch.Tensor:
        scale = self.g / self.v.flatten(1).norm(dim=1)
        return a * scale.view(1, -1, 1, 1) + self.b.view(1, -1, 1, 1)


class PlainConv2d(nn.Conv2d):
    """norm 'none': 3×3 conv with bias."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__(c_in, c_out, 3, padding=1)

    def summed(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, padding=1)

    def normalize(self, a: torch.Tensor) -> torch.Tensor:
        bias = cast(torch.Tensor, self.bias)  # built with one (nn.Conv2d's default)
        return a + bias.view(1, -1, 1, 1)


def make_conv(
    norm: str, c_in: int, c_out: int, gain_init: float = 1.0, standardize: bool = False
) -> nn.Module:
    if norm in ("none", "weight") and standardize:
        raise ValueError(
            "Weight Standardization needs a normalizer after the conv: batch, layer, rms or group"
        )
    if norm == "none":
        return PlainConv2d(c_in, c_out)
    if norm == "weight":
        return WeightNormConv2d(c_in, c_out, gain_init)
    return NormConv2d(c_in, c_out, make_normalizer(norm, c_out, gain_init, channels=True), standardize)


class ConvNet(nn.Module):
    """`convs[k]` = ReLU(normalize(conv3×3(x))) with `channels` maps each, a 2×2 max-pool after the first,
    then an adaptive average pool to 4×4 and a plain Linear `out` to the logits (``standardize``: every
    conv's filters weight-standardized)."""

    def __init__(
        self,
        channels: int,
        layers: int,
        n_outputs: int,
        norm: str,
        gain_init: float = 1.0,
        in_channels: int = 1,
        standardize: bool = False,
    ):
        super().__init__()
        sizes = [in_channels] + [channels] * layers
        pairs = zip(sizes[:-1], sizes[1:], strict=True)
        self.convs = nn.ModuleList(make_conv(norm, a, b, gain_init, standardize) for a, b in pairs)
        self.out = nn.Linear(channels * 16, n_outputs)
        self.capture: bool = False
        self.captured: dict[str, Any] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        records = []
        for k, conv in enumerate(cast("Iterable[SplitLayer]", self.convs)):
            a = conv.summed(x)
            x = torch.relu(conv.normalize(a))
            if self.capture:
                records.append(_layer_stats(f"conv{k + 1}", a, x))
            if k == 0 and x.shape[-1] >= 8:
                x = F.max_pool2d(x, 2)
        if self.capture:
            self.captured = {"layers": records}
        return self.out(F.adaptive_avg_pool2d(x, 4).flatten(1))


class RecurrentNet(nn.Module):
    """`rnn[k]` recurrent layers (cell × normalizer) and a plain Linear `out` applied at every step."""

    def __init__(
        self,
        input_dim: int,
        hidden_size: int,
        layers: int,
        n_outputs: int,
        cell: str,
        norm: str,
        gain_init: float = 1.0,
        placement: str = "full",
        max_steps: int = 1,
    ):
        super().__init__()
        sizes = [input_dim] + [hidden_size] * layers
        self.cell = cell
        self.rnn = nn.ModuleList(
            make_layer(cell, a, hidden_size, norm, gain_init, placement, max_steps) for a in sizes[:-1]
        )
        self.out = nn.Linear(hidden_size, n_outputs)
        self.capture: bool | str = False  # True, or "fast"
        self.captured: dict[str, Any] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.transpose(0, 1)  # time-major inside: each step's slice is contiguous
        # "fast": record without leaving a layer's one-node path (see the module docstring)
        record: dict[str, Any] | None = (
            ({"fast": True} if self.capture == "fast" else {}) if self.capture else None
        )
        for k, layer in enumerate(self.rnn):
            h = layer(h, record if k == len(self.rnn) - 1 else None)
        if record is not None:
            self.captured = record
        return self.out(h).transpose(0, 1)

    def batchnorm_report(self) -> dict | None:
        """Recurrent BN only: the policy beyond the trained length and how often the last eval used it."""
        bns = [m for m in self.modules() if isinstance(m, BatchNorm) and m.per_step]
        if not bns:
            return None
        report = bns[0].beyond_report()
        report["eval_steps_beyond"] = max(m.last_eval_beyond for m in bns)
        report["trained_steps"] = min(int(m.trained_steps) for m in bns)
        return report


def build_model(spec, info: TaskInfo, input_dim: int, n_outputs: int) -> nn.Module:
    """The network for a resolved spec: MLP (flat), ConvNet (image) or RecurrentNet (sequence)."""
    hidden, layers = spec.hidden_size, spec.layers
    if hidden is None or layers is None:
        raise ValueError("build_model needs a resolved spec (call spec.resolved() first)")
    model: nn.Module
    if info.kind == "flat":
        model = MLP(input_dim, hidden, layers, n_outputs, spec.norm, spec.gain_init)
    elif info.kind == "image":
        model = ConvNet(
            hidden, layers, n_outputs, spec.norm, spec.gain_init, standardize=spec.weight_standardization
        )
    elif info.kind == "sequence":
        model = RecurrentNet(
            input_dim,
            hidden,
            layers,
            n_outputs,
            spec.cell or "lstm",
            spec.norm,
            spec.gain_init,
            spec.ln_placement,
            max_steps=spec.seq_len or 1,
        )
    else:
        raise ValueError(f"unknown task kind {info.kind!r}")
    if getattr(spec, "bn_variance", "biased") == "unbiased":
        for module in model.modules():
            if isinstance(module, BatchNorm):
                module.unbiased = True
    return model
