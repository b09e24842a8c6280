"""Recurrent layers (LSTM eq. 17/20/29, GRU eq. 23/26, tanh RNN eq. 4) with any normalizer.

Each layer maps a time-major sequence (T, B, D) to its hidden states (T, B, H). Gate order is
(f, i, o, g) for the LSTM (eq. 20) and (z, r) for the GRU (eq. 26). Per normalizer:

- 'layer': LN(W_h h) + LN(W_x x) + b on the gates, tanh(LN(c_t)) for the output (eq. 20); with
  placement 'cell' only LN(c_t) (eq. 29). GRU: eq. 26. tanh RNN: h = tanh(LN(W_h h + W_x x)) (eq. 4).
- 'batch': recurrent BN (Cooijmans et al. 2016): BN(W_h h) + BN(W_x x) + b and BN(c_t), separate running
  statistics per time step (see `workers.engine.norms.BatchNorm` for evaluation beyond the trained
  length).
- 'rms': as 'layer' with RMSNorm. 'weight': W_h, W_x weight-normalized rows (no data statistics, so
  nothing on c_t). 'none': eq. 17 / eq. 23 / a plain tanh RNN.

On CUDA with the Triton kernels, the LN-LSTM ('layer', placement 'full') and the LN-GRU run their whole
recurrence as one autograd node over the fused cell kernels (`kernels.ln_lstm_sequence` /
`kernels.ln_gru_sequence`), unless the probes record this pass (then the per-step path below).

The LSTM's forget-gate bias starts at 1 (common practice; the paper does not say), for every normalizer.
A layer given a ``record`` dict fills it for the probes: "h" / "c" (lists of (B, H), h with
``retain_grad``), "summed_mean" / "summed_std" ((T,) batch means of each case's mean / std of the summed
inputs W_h h_{t-1} + W_x x_t before normalization; the GRU's are those of its z, r gates, and with
WeightNorm they are v·x, before the division by ‖v‖). Given {"fast": True}, an LSTM on its one-node
CPU path records there instead of stepping: (T,) series "h_norms", "c_norms", "summed_mean" /
"summed_std" and, after backward, "grad_norms" (`lstm_sequence`), so a traced step costs little more
than a plain one.
"""

from __future__ import annotations

from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from normlab_client.norms import declaration
from workers.engine.lstm_seq import lstm_sequence
from workers.engine.norms import EPS, NormLinear, make_linear, make_normalizer
from workers.engine.options import DEFAULT, EngineOptions


class Normalizer(Protocol):
    """A `make_normalizer` result as the layers use it; `gain` and `bias` are read only where it is a
    LayerNorm (the fused paths)."""

    gain: torch.Tensor
    bias: torch.Tensor

    def __call__(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor: ...


class Projection(Protocol):
    """A `make_linear` result (PlainLinear, WeightNormLinear or NormLinear) as the layers use it. `weight`
    is read only where the layer has one (a WeightNormLinear has `v`: `_raw_weight`), `norm` (NormLinear's)
    only where the layer is LayerNorm'ed."""

    weight: torch.Tensor
    norm: Normalizer

    def summed(self, x: torch.Tensor) -> torch.Tensor: ...

    def normalize(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor: ...

    def __call__(self, x: torch.Tensor, step: int | None = None) -> torch.Tensor: ...


def _raw_weight(layer: Projection) -> torch.Tensor:
    """The bias-free weight whose product with the input gives the summed inputs (v for WeightNorm)."""
    return cast(torch.Tensor, layer.v) if hasattr(layer, "v") else layer.weight


def _normalize_all(layer: Projection, a: torch.Tensor, per_step: bool) -> torch.Tensor:
    """Normalize summed inputs (T, B, F) of every step: at once, or step by step for recurrent BN."""
    if per_step:
        return torch.stack([layer.normalize(a[t], t) for t in range(a.shape[0])])
    return layer.normalize(a)


def case_mean_std(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each case's mean and population std over the last dim, averaged over the cases (dim -2). Written
    out: on the CPU torch's `std(dim=…)` over a small last dim is many times slower than these two passes,
    a visible share of a recurrent model's training step."""
    mean = s.mean(dim=-1, keepdim=True)
    std = (s - mean).square_().mean(dim=-1).sqrt_()
    return mean.squeeze(-1).mean(dim=-1), std.mean(dim=-1)


def _record_summed(record: dict | None, summed: torch.Tensor) -> None:
    if record is not None:
        mean, std = case_mean_std(summed.detach())
        record["_mean"].append(mean)
        record["_std"].append(std)


def _start_record(record: dict | None, lstm: bool) -> None:
    if record is not None:
        record.clear()
        record.update({"h": [], "_mean": [], "_std": []})
        if lstm:
            record["c"] = []


def _finish_record(record: dict | None) -> None:
    if record is not None:
        record["summed_mean"] = torch.stack(record.pop("_mean"))
        record["summed_std"] = torch.stack(record.pop("_std"))


def _keep_h(record: dict | None, h: torch.Tensor, c: torch.Tensor | None = None) -> None:
    if record is not None:
        if h.requires_grad:
            h.retain_grad()  # so the probes read ∂L/∂h_t after backward
        record["h"].append(h)
        if c is not None:
            record["c"].append(c)


@torch.no_grad()
def _record_sequence(
    record: dict | None, layer: LSTMLayer, x: torch.Tensor, ax: torch.Tensor | None, h0, hs: torch.Tensor
):
    """The probes' record of a recurrence run as one node (`lstm_sequence`), as (T,) series: "h_norms"
    (batch means of ‖h_t‖), "summed_mean" / "summed_std" of W_h h_{t-1} + W_x x_t (one product over all
    steps, from the outputs), beside the node's own "c_norms" and, after backward, "grad_norms". Its own
    products (W_x x when the layer did not form it) run without a graph: a Fisher estimate recording the
    same forward pass (workers.probes) sees only the layer's own calls."""
    if record is None:
        return
    if ax is None:
        ax = layer.ih.summed(x)
    summed = layer.hh.summed(torch.cat([h0.unsqueeze(0), hs[:-1]])).add_(ax)
    record["summed_mean"], record["summed_std"] = case_mean_std(summed)
    record["h_norms"] = torch.linalg.vector_norm(hs, dim=2).mean(dim=1)


class _RecurrentBase(nn.Module):
    # which path computes the recurrence (`workers.engine.options`); `build_model` sets it per model
    engine_options: EngineOptions = DEFAULT

    def __init__(self, norm: str):
        super().__init__()
        self.norm_name = norm
        self.per_step = norm == "batch"


class LSTMLayer(_RecurrentBase):
    """One LSTM layer: `ih` (W_x), `hh` (W_h) projections, gate `bias` (4H) and `norm_c` on c_t (or None)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        norm: str = "layer",
        gain_init: float = 1.0,
        placement: str = "full",
        max_steps: int = 1,
    ):
        super().__init__(norm)
        H, G = hidden_size, 4 * hidden_size
        self.hidden_size, self.placement = H, placement
        proj_norm = "none" if norm == "layer" and placement == "cell" else norm
        ps = self.per_step
        self.ih = cast(
            Projection,
            make_linear(proj_norm, input_size, G, gain_init, bias=False, per_step=ps, max_steps=max_steps),
        )
        self.hh = cast(
            Projection, make_linear(proj_norm, H, G, gain_init, bias=False, per_step=ps, max_steps=max_steps)
        )
        self.bias = nn.Parameter(torch.zeros(G))
        with torch.no_grad():
            self.bias[:H] = 1.0  # forget gate
        self.norm_c = (
            cast(Normalizer, make_normalizer(norm, H, gain_init, per_step=self.per_step, max_steps=max_steps))
            if norm in ("layer", "batch", "rms")
            else None
        )

    def _fused_ok(self) -> bool:
        """Whether the sequence-level LSTM (one autograd node for all steps) computes this layer."""
        plain_proj = self.norm_name == "none" or (self.norm_name == "layer" and self.placement == "cell")
        full_ln = self.norm_name == "layer" and self.placement == "full"
        return plain_proj or full_ln

    def forward(self, x: torch.Tensor, record: dict | None = None) -> torch.Tensor:
        T, B, _ = x.shape
        h = x.new_zeros(B, self.hidden_size)
        c = x.new_zeros(B, self.hidden_size)
        opts = self.engine_options
        backend = opts.kernel_backend
        use_kernel = (
            self.norm_name == "layer"
            and self.placement == "full"
            and kernels.backend_for(x, backend) == "triton"
        )
        fast = record is None or record.get("fast", False)  # a record asked for on the one-node path
        if fast and not use_kernel and self._fused_ok():
            # every step's W_x x_t in one product (no recurrence on the input side); the gate bias b is
            # folded into LN's β2 (or the product's bias) to save a pass over (T, B, 4H)
            ln_h = isinstance(self.hh, NormLinear)
            ax = None
            if ln_h:
                ax = self.ih.summed(x)
                beta = self.ih.norm.bias + self.bias
                calibrator = self.engine_options.ln_calibrator(ax)
                xx = kernels.layer_norm(ax, self.ih.norm.gain, beta, EPS, backend, calibrator)
            else:
                xx = F.linear(x, self.ih.weight, self.bias)
            gain_h, bias_h = (self.hh.norm.gain, self.hh.norm.bias) if ln_h else (None, None)
            gain_c, bias_c = (self.norm_c.gain, self.norm_c.bias) if self.norm_c is not None else (None, None)
            if record is not None:
                record.clear()
            hs = lstm_sequence(
                xx, self.hh.weight, gain_h, bias_h, gain_c, bias_c, h, c, EPS, record, options=opts
            )
            _record_sequence(record, self, x, ax, h, hs)
            return hs
        ax = self.ih.summed(x)  # (T, B, 4H)
        norm_c = cast(Normalizer, self.norm_c)  # a LayerNorm wherever the kernels below run
        if use_kernel and record is None:
            # the whole recurrence as one autograd node over the fused CUDA kernels: one product and one
            # launch per step each way (the per-step cell below costs a custom-op dispatch per step)
            return kernels.ln_lstm_sequence(
                ax,
                self.hh.weight,
                self.hh.norm.gain,
                self.hh.norm.bias,
                self.ih.norm.gain,
                self.ih.norm.bias,
                self.bias,
                norm_c.gain,
                norm_c.bias,
                h,
                c,
                EPS,
                backend=backend,
                cuda_graphs=opts.cuda_graphs,
            )
        xs = None if use_kernel else _normalize_all(self.ih, ax, self.per_step) + self.bias
        _start_record(record, lstm=True)
        outs = []
        for t in range(T):
            ah = self.hh.summed(h)
            _record_summed(record, ah + ax[t])
            if use_kernel:  # fused CUDA cell: LN(hh) + LN(xx) + b, gates, c_t, LN(c_t), h_t
                h, c = kernels.ln_lstm_cell(
                    ah,
                    ax[t],
                    c,
                    self.hh.norm.gain,
                    self.hh.norm.bias,
                    self.ih.norm.gain,
                    self.ih.norm.bias,
                    self.bias,
                    norm_c.gain,
                    norm_c.bias,
                    EPS,
                    backend,
                )
            else:
                gates = self.hh.normalize(ah, t) + cast(torch.Tensor, xs)[t]  # set off the kernel path
                f, i, o, g = gates.chunk(4, dim=1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                cn = c if self.norm_c is None else self.norm_c(c, t)
                h = torch.sigmoid(o) * torch.tanh(cn)
            _keep_h(record, h, c)
            outs.append(h)
        _finish_record(record)
        return torch.stack(outs)


class GRULayer(_RecurrentBase):
    """One GRU layer (eq. 23/26): `ih_gates`, `hh_gates` (z, r) and `ih_cand` (W), `hh_cand` (U)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        norm: str = "layer",
        gain_init: float = 1.0,
        max_steps: int = 1,
    ):
        super().__init__(norm)
        H = self.hidden_size = hidden_size
        ps, ms = self.per_step, max_steps
        self.ih_gates = cast(
            Projection, make_linear(norm, input_size, 2 * H, gain_init, bias=True, per_step=ps, max_steps=ms)
        )
        self.hh_gates = cast(
            Projection, make_linear(norm, H, 2 * H, gain_init, bias=False, per_step=ps, max_steps=ms)
        )
        self.ih_cand = cast(
            Projection, make_linear(norm, input_size, H, gain_init, bias=True, per_step=ps, max_steps=ms)
        )
        self.hh_cand = cast(
            Projection, make_linear(norm, H, H, gain_init, bias=False, per_step=ps, max_steps=ms)
        )

    def forward(self, x: torch.Tensor, record: dict | None = None) -> torch.Tensor:
        T, B, _ = x.shape
        opts = self.engine_options
        if (
            record is None
            and self.norm_name == "layer"
            and kernels.backend_for(x, opts.kernel_backend) == "triton"
        ):
            # CUDA: the whole recurrence as one autograd node over the fused kernels (eq. 26), with the
            # input products [W_x; W] x_t of every step in one product and the recurrent [W_h; U] h_{t-1}
            # in one product per step
            ax = F.linear(x, torch.cat([self.ih_gates.weight, self.ih_cand.weight]))
            w_rec = torch.cat([self.hh_gates.weight, self.hh_cand.weight])
            return kernels.ln_gru_sequence(
                ax,
                w_rec,
                self.hh_gates.norm.gain,
                self.hh_gates.norm.bias,
                self.ih_gates.norm.gain,
                self.ih_gates.norm.bias,
                self.ih_cand.norm.gain,
                self.ih_cand.norm.bias,
                self.hh_cand.norm.gain,
                self.hh_cand.norm.bias,
                x.new_zeros(B, self.hidden_size),
                EPS,
                backend=opts.kernel_backend,
                cuda_graphs=opts.cuda_graphs,
            )
        ax_g = self.ih_gates.summed(x)
        xg = _normalize_all(self.ih_gates, ax_g, self.per_step)
        xc = _normalize_all(self.ih_cand, self.ih_cand.summed(x), self.per_step)
        h = x.new_zeros(B, self.hidden_size)
        _start_record(record, lstm=False)
        outs = []
        for t in range(T):
            ah = self.hh_gates.summed(h)
            _record_summed(record, ah + ax_g[t])
            z, r = torch.sigmoid(self.hh_gates.normalize(ah, t) + xg[t]).chunk(2, dim=1)
            cand = torch.tanh(xc[t] + r * self.hh_cand(h, t))
            h = (1 - z) * h + z * cand
            _keep_h(record, h)
            outs.append(h)
        _finish_record(record)
        return torch.stack(outs)


class TanhRNNLayer(_RecurrentBase):
    """h_t = tanh(normalize(W [x_t; h_{t-1}])) — eq. 4 with LN; `proj` holds [W_xh W_hh] as one matrix."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        norm: str = "layer",
        gain_init: float = 1.0,
        max_steps: int = 1,
    ):
        super().__init__(norm)
        self.hidden_size, self.input_size = hidden_size, input_size
        self.proj = cast(
            Projection,
            make_linear(
                norm,
                input_size + hidden_size,
                hidden_size,
                gain_init,
                bias=True,
                per_step=self.per_step,
                max_steps=max_steps,
            ),
        )

    def forward(self, x: torch.Tensor, record: dict | None = None) -> torch.Tensor:
        T, B, D = x.shape
        w = _raw_weight(self.proj)
        ax = F.linear(x, w[:, :D])  # W_xh x_t for every step at once
        w_h = w[:, D:]
        h = x.new_zeros(B, self.hidden_size)
        _start_record(record, lstm=False)
        outs = []
        for t in range(T):
            if record is None:
                a = ax[t] + h @ w_h.t()  # the summed inputs a_t of eq. 4
            else:  # probes: through the layer's summed(), which they may hook
                a = self.proj.summed(torch.cat([x[t], h], dim=1))
            _record_summed(record, a)
            h = torch.tanh(self.proj.normalize(a, t))
            _keep_h(record, h)
            outs.append(h)
        _finish_record(record)
        return torch.stack(outs)


CELL_LAYERS = {"lstm": LSTMLayer, "gru": GRULayer, "tanh": TanhRNNLayer}


def make_layer(
    cell: str,
    input_size: int,
    hidden_size: int,
    norm: str,
    gain_init: float,
    placement: str = "full",
    max_steps: int = 1,
) -> nn.Module:
    """One recurrent layer of the given cell and normalizer."""
    if cell not in CELL_LAYERS:
        raise ValueError(f"unknown cell {cell!r}; use one of {', '.join(CELL_LAYERS)}")
    plugin = declaration(norm)
    if norm not in ("none", "layer", "batch", "weight", "rms") and not (plugin and plugin.recurrent):
        raise ValueError(
            f"norm {norm!r} is not available in recurrent networks; use none, layer, batch, weight or rms"
        )
    if cell == "lstm":
        return LSTMLayer(input_size, hidden_size, norm, gain_init, placement, max_steps)
    return CELL_LAYERS[cell](input_size, hidden_size, norm, gain_init, max_steps)
