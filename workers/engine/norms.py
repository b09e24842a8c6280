"""Normalizer modules and normalized layers, as the paper defines them (eq. 2, 3/15, §4, §5.1).

Every normalized layer is a bias-free weight followed by a normalizer that acts on the *summed inputs*
a = W x and then applies its gain and bias (eq. 5: h = f(g/σ (a − μ) + b)). Class and parameter names
are part of the contract the probes rely on:

- `LayerNorm` (`gain`, `bias`): μ, σ over the hidden units of one case, population variance (eq. 3/15);
  calls `kernels.layer_norm`.
- `BatchNorm` (`gain`, `bias`): μ, σ over the mini-batch (eq. 2); running statistics at evaluation.
  With ``per_step=True`` (recurrent BN, Cooijmans et al. 2016) it keeps separate running statistics
  for every time step. **Beyond the trained length** (an evaluation step t ≥ the number of time steps
  seen in training) it reuses the statistics of the last trained step, as Cooijmans et al. do for
  t > T_max; `BEYOND_TRAINED_LENGTH` states this policy and `last_eval_beyond` counts how many steps of
  the latest evaluation forward pass used it. It never raises for a long sequence.
- `RMSNorm` (`gain`, `bias`): divide by the root mean square of the case's summed inputs (no re-centring).
- `GroupNorm` (`gain`, `bias`): LayerNorm statistics over groups of channels (ConvNet only).
- `WeightNormLinear` (`v`, `g`, `b`): w_i = g_i v_i/‖v_i‖ written by hand (μ = 0, σ = ‖v_i‖, §5.1).
- `NormLinear` (`weight`, `norm`): a bias-free weight and one of the normalizers above.
- `PlainLinear`: `nn.Linear` (norm 'none').

All linear layers offer ``summed(x)`` (the summed inputs before normalization) and
``normalize(a, step=None)``, so models can record the summed-input statistics the probes show.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from workers.engine.options import DEFAULT, EngineOptions
from workers.engine.plugin_norms import plugin_normalizer

EPS = 1e-5
BEYOND_TRAINED_LENGTH = (
    "reuse the running statistics of the last trained time step (Cooijmans et al. 2016, t > T_max)"
)


def _channel_view(p: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Per-feature parameter shaped to broadcast over `a`: last dim for (…, F), dim 1 for (B, C, …)."""
    return p.view(-1, *([1] * (a.dim() - 2))) if a.dim() > 2 else p


class _PerCaseNorm(nn.Module):
    """A normalizer whose statistics come from one case alone, with a per-feature gain and bias.

    ``channels=True`` normalizes a conv map (B, C, …) over all of C×… per case, with a gain per channel.
    """

    def __init__(self, features: int, gain_init: float = 1.0, eps: float = EPS, channels: bool = False):
        super().__init__()
        self.gain = nn.Parameter(torch.full((features,), float(gain_init)))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps, self.channels = eps, channels


class LayerNorm(_PerCaseNorm):
    """LN over one case's summed inputs (eq. 3/15), then per-unit gain and bias."""

    # which kernel computes it (`workers.engine.options`); `build_model` sets it per model
    engine_options: EngineOptions = DEFAULT

    def forward(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor:
        options = self.engine_options
        backend, calibrator = options.kernel_backend, options.ln_calibrator(a)
        if self.channels:
            flat = kernels.layer_norm(a.flatten(1), None, None, self.eps, backend, calibrator).view_as(a)
            return flat * _channel_view(self.gain, a) + _channel_view(self.bias, a)
        return kernels.layer_norm(a, self.gain, self.bias, self.eps, backend, calibrator)


class RMSNorm(_PerCaseNorm):
    """a / sqrt(mean(a²) + eps) over one case's summed inputs, then gain and bias (no re-centring)."""

    def forward(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor:
        dims = tuple(range(1, a.dim())) if self.channels else (-1,)
        y = a * torch.rsqrt(a.pow(2).mean(dim=dims, keepdim=True) + self.eps)
        if self.channels:
            return y * _channel_view(self.gain, a) + _channel_view(self.bias, a)
        return y * self.gain + self.bias


class GroupNorm(nn.Module):
    """LN statistics over groups of channels of a conv map (B, C, …); gain and bias per channel."""

    def __init__(self, features: int, gain_init: float = 1.0, eps: float = EPS, groups: int = 8):
        super().__init__()
        self.groups = math.gcd(features, groups)  # a divisor of C, so any channel count works
        self.gain = nn.Parameter(torch.full((features,), float(gain_init)))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor:
        return F.group_norm(a, self.groups, self.gain, self.bias, self.eps)


class BatchNorm(nn.Module):
    """BN (eq. 2): mini-batch statistics in training, running statistics in evaluation.

    Features are the last dim of (B, F), or dim 1 of a conv map (B, C, …). With ``per_step=True`` the
    caller passes ``step=t`` and each time step has its own running statistics (recurrent BN); the
    buffers grow as training meets longer sequences. `trained_steps` holds how many time steps have
    statistics; see the module docstring for evaluation beyond it.
    """

    beyond_trained_length = BEYOND_TRAINED_LENGTH
    # buffers (register_buffer): their types, which nn.Module's attribute lookup does not know
    running_mean: torch.Tensor
    running_var: torch.Tensor
    trained_steps: torch.Tensor

    def __init__(
        self,
        features: int,
        gain_init: float = 1.0,
        eps: float = EPS,
        momentum: float = 0.1,
        per_step: bool = False,
        max_steps: int = 1,
    ):
        super().__init__()
        self.gain = nn.Parameter(torch.full((features,), float(gain_init)))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps, self.momentum, self.per_step = eps, momentum, per_step
        rows = max(1, max_steps) if per_step else 1
        self.register_buffer("running_mean", torch.zeros(rows, features))
        self.register_buffer("running_var", torch.ones(rows, features))
        self.register_buffer("trained_steps", torch.zeros((), dtype=torch.long))
        self.last_eval_beyond = 0  # steps of the latest eval pass that reused the last step's statistics
        # §6.6: at small batch sizes the paper normalizes with the unbiased variance (÷ (B − 1)); the
        # running variance is the unbiased one either way (as in F.batch_norm)
        self.unbiased = False

    def _grow(self, rows: int) -> None:
        extra = rows - self.running_mean.shape[0]
        if extra > 0:
            f = self.running_mean.shape[1]
            rm, rv = self.running_mean, self.running_var
            self.running_mean = torch.cat([rm, rm.new_zeros(extra, f)])
            self.running_var = torch.cat([rv, rv.new_ones(extra, f)])

    def forward(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor:
        # (B, F) and conv maps (B, C, …) go to F.batch_norm as they are; (B, T, F) pools all steps
        x = a.reshape(-1, a.shape[-1]) if a.dim() == 3 else a
        t = 0 if not self.per_step else int(step or 0)
        if self.training:
            if x.shape[0] < 2:
                raise ValueError(
                    "BatchNorm needs batch size ≥ 2 in training: its statistics come from "
                    "the mini-batch. Use norm 'layer' for online learning."
                )
            self._grow(t + 1)
            if t + 1 > int(self.trained_steps):
                self.trained_steps.fill_(t + 1)
            row = t
        else:
            trained = max(1, int(self.trained_steps))
            row = min(t, trained - 1)
            if t == 0:
                self.last_eval_beyond = 0
            if t >= trained and self.per_step:
                self.last_eval_beyond += 1
        if self.training and self.unbiased:
            return self._unbiased(x, row).view_as(a)
        y = F.batch_norm(
            x,
            self.running_mean[row],
            self.running_var[row],
            self.gain,
            self.bias,
            self.training,
            self.momentum,
            self.eps,
        )
        return y.view_as(a)

    def _unbiased(self, x: torch.Tensor, row: int) -> torch.Tensor:
        """Training-mode BN with σ² = Σ (a − μ)² / (n − 1) over the batch (and positions of conv maps)."""
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        mean = x.mean(dims)
        var = x.var(dims, unbiased=True)
        with torch.no_grad():
            self.running_mean[row].mul_(1 - self.momentum).add_(self.momentum * mean.detach())
            self.running_var[row].mul_(1 - self.momentum).add_(self.momentum * var.detach())
        xhat = (x - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
        return xhat * self.gain.view(shape) + self.bias.view(shape)

    def beyond_report(self) -> dict:
        """What evaluation does past the trained length, and how often the latest pass needed it."""
        return {
            "policy": self.beyond_trained_length,
            "trained_steps": int(self.trained_steps),
            "eval_steps_beyond": self.last_eval_beyond,
        }


class PlainLinear(nn.Linear):
    """norm 'none': a = W x, then the bias."""

    def summed(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)

    def normalize(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor:
        return a if self.bias is None else a + self.bias

    def forward(self, x: torch.Tensor, step: int | None = None) -> torch.Tensor:
        return self.normalize(self.summed(x), step)  # via summed(): the probes hook it


class NormLinear(nn.Module):
    """A bias-free `weight` (out, in) and a normalizer `norm` on the summed inputs (with its gain, bias)."""

    def __init__(self, in_features: int, out_features: int, norm: nn.Module):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # nn.Linear's default
        self.norm = norm

    def summed(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)

    def normalize(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor:
        return self.norm(a, step)

    def forward(self, x: torch.Tensor, step: int | None = None) -> torch.Tensor:
        return self.normalize(self.summed(x), step)


class WeightNormLinear(nn.Module):
    """w_i = g_i v_i / ‖v_i‖ by hand (Salimans & Kingma 2016), then bias `b` (None if bias=False)."""

    def __init__(self, in_features: int, out_features: int, gain_init: float = 1.0, bias: bool = True):
        super().__init__()
        self.v = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.kaiming_uniform_(self.v, a=math.sqrt(5))
        self.g = nn.Parameter(torch.full((out_features,), float(gain_init)))
        self.b = nn.Parameter(torch.zeros(out_features)) if bias else None

    def effective_weight(self) -> torch.Tensor:
        """w = g · v/‖v‖ (row-wise)."""
        return self.v * (self.g / self.v.norm(dim=1)).unsqueeze(1)

    def summed(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.v)

    def normalize(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor:
        # σ_i = ‖v_i‖, μ_i = 0 (§5.1): scaling the summed inputs v_i·x equals using w_i = g_i v_i/‖v_i‖
        y = a * (self.g / self.v.norm(dim=1))
        return y if self.b is None else y + self.b

    def forward(self, x: torch.Tensor, step: int | None = None) -> torch.Tensor:
        return self.normalize(self.summed(x), step)


def make_normalizer(
    norm: str,
    features: int,
    gain_init: float = 1.0,
    *,
    per_step: bool = False,
    max_steps: int = 1,
    channels: bool = False,
) -> nn.Module:
    """The normalizer module for 'layer' | 'batch' | 'rms' | 'group' over `features` units."""
    if norm == "layer":
        return LayerNorm(features, gain_init, channels=channels)
    if norm == "rms":
        return RMSNorm(features, gain_init, channels=channels)
    if norm == "batch":
        return BatchNorm(features, gain_init, per_step=per_step, max_steps=max_steps)
    if norm == "group":
        return GroupNorm(features, gain_init)
    plugin = None if channels else plugin_normalizer(norm, features, gain_init)
    if plugin is not None:
        return plugin
    raise ValueError(
        f"no normalizer module for norm {norm!r}; use layer, batch, rms, group or a registered one"
    )


def make_linear(
    norm: str,
    in_features: int,
    out_features: int,
    gain_init: float = 1.0,
    *,
    bias: bool = True,
    per_step: bool = False,
    max_steps: int = 1,
) -> nn.Module:
    """A layer computing normalize(W x): PlainLinear ('none'), WeightNormLinear ('weight') or NormLinear.

    ``bias`` only matters for 'none' and 'weight' (the other normalizers carry their own bias).
    """
    if norm == "none":
        return PlainLinear(in_features, out_features, bias=bias)
    if norm == "weight":
        return WeightNormLinear(in_features, out_features, gain_init, bias=bias)
    return NormLinear(
        in_features,
        out_features,
        make_normalizer(norm, out_features, gain_init, per_step=per_step, max_steps=max_steps),
    )
