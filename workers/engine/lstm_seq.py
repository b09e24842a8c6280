"""`lstm_sequence`: a whole LSTM / LN-LSTM recurrence as one autograd node, with a hand-written backward.

The input side has no recurrence, so the caller computes xx_t = LN(W_x x_t; α2, β2) + b for every step
in one matrix product and one LN call. What remains per step is eq. 20 (or eq. 29 / eq. 17 when an LN is
switched off):

    hh_t  = W_h h_{t-1}                              a_t = LN(hh_t; α1, β1) + xx_t   (or hh_t + xx_t)
    f, i, o, g = σ(a_f), σ(a_i), σ(a_o), tanh(a_g)   c_t = f ⊙ c_{t-1} + i ⊙ g
    h_t   = o ⊙ tanh(LN(c_t; α3, β3))               (or o ⊙ tanh(c_t))

Why a custom node: per-step autograd made a Python-loop LN-LSTM 4–5× slower than `torch.nn.LSTM` on a
2-core CPU. Here the forward writes into preallocated (T, B, ·) buffers (tanh computed as 2σ(2z) − 1,
cheaper than torch's tanh on this CPU); the backward runs about a dozen fused ops per step, forming the
local gate derivatives and LN's dγ/dβ per step while the step's data is in cache, and dW_h once, as one
large matrix product over all steps.

Threads: the per-step work is small (B×H×4H multiply-adds and ~30K-element element-wise ops). On an idle
machine the step's matrix product gains from all cores; on an oversubscribed one (load average above 1.5×
the cores, e.g. a shared 2-core box), every OpenMP fork/join waits for a descheduled thread and costs
milliseconds, so the recurrence then runs on one thread (bulk products outside the loop keep all
threads). MKL's products and LN's row-wise passes are bitwise the same for 1 and 2 threads, and LN's
backward (which sums dγ/dβ per thread) always runs on one, so this choice never changes the numbers.
`set_recurrence_threads(n)` fixes it (None: automatic), e.g. for A/B measurements.

LayerNorm here is torch's native kernel (population variance, eq. 15), so the numbers equal the
`kernels.layer_norm` torch path; the float64 tests check them against a hand-written eq. 20 and gradcheck.
"""

from __future__ import annotations

import os

import torch

_ln = torch.native_layer_norm
_ln_backward = torch.ops.aten.native_layer_norm_backward
_FIXED_THREADS: int | None = None


def set_recurrence_threads(n: int | None) -> None:
    """Threads for the per-step loop: a fixed count, or None for automatic (see the module docstring)."""
    global _FIXED_THREADS
    if n is not None and n < 1:
        raise ValueError(f"recurrence threads must be ≥ 1 (got {n}); use None for automatic")
    _FIXED_THREADS = n


def machine_busy() -> bool:
    """True when the 1-minute load average exceeds 1.5× the cores this process may use."""
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return False
    return load > 1.5 * cores


def recurrence_threads() -> int:
    """Threads the next recurrence loop will use."""
    if _FIXED_THREADS is not None:
        return _FIXED_THREADS
    threads = torch.get_num_threads()
    return 1 if threads > 1 and machine_busy() else threads


class _Threads:
    """Run a block with `n` intra-op threads, restoring the previous count afterwards."""

    def __init__(self, n: int):
        self.n, self.before = n, torch.get_num_threads()

    def __enter__(self):
        if self.n != self.before:
            torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        if self.n != self.before:
            torch.set_num_threads(self.before)


def _forward(xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps, keep: bool):
    """(h_t for all steps, buffers for the backward). keep=False (no backward coming): the per-step
    buffers hold one step only, so evaluation of long sequences needs memory for h_t alone."""
    T, B, G = xx.shape
    S = T if keep else 1  # steps the work buffers hold
    H = G // 4
    ln_h, ln_c = gain_h is not None, gain_c is not None
    w_hT = w_h.t()
    gates = xx.new_empty(S, B, G)  # activated gates σ(f), σ(i), σ(o), tanh(g)
    cells = xx.new_empty(S, B, H)  # c_t
    tanh_c = xx.new_empty(S, B, H)  # tanh(LN(c_t)) or tanh(c_t)
    hs = xx.new_empty(T, B, H)  # h_t, the output
    hh = xx.new_empty(S, B, G) if ln_h else None  # raw W_h h_{t-1}, for LN's backward
    # views made once: slicing inside the loop costs as much as a small kernel
    tng = gates[..., 3 * H:]
    f_, i_, o_ = gates[..., :H], gates[..., H: 2 * H], gates[..., 2 * H: 3 * H]
    stats_h, stats_c = [], []
    if ln_c:
        gain_c2, bias_c2 = gain_c * 2, bias_c * 2
    h, c = h0, c0
    with _Threads(recurrence_threads()):
        for t in range(T):
            r = t if keep else 0  # the work buffers' row for this step
            a = gates[r]
            if ln_h:
                torch.mm(h, w_hT, out=hh[r])
                y, mean, rstd = _ln(hh[r], (G,), gain_h, bias_h, eps)
                stats_h.append((mean, rstd))
                torch.add(y, xx[t], out=a)
            else:
                torch.addmm(xx[t], h, w_hT, out=a)
            # tanh(z) = 2σ(2z) − 1: one σ over the whole contiguous row is cheaper here than σ on
            # three blocks plus torch's tanh (≈ 3 ns per element on this CPU)
            tng[r].mul_(2)
            a.sigmoid_()
            tng[r].mul_(2).sub_(1)
            c_t = cells[r]
            torch.mul(f_[r], c, out=c_t)
            c_t.addcmul_(i_[r], tng[r])
            if ln_c:  # 2·LN(c; γ, β) = LN(c; 2γ, 2β): same statistics, the tanh's 2z for free
                y, mean, rstd = _ln(c_t, (H,), gain_c2, bias_c2, eps)
                stats_c.append((mean, rstd))
            else:
                y = c_t * 2
            torch.mul(y.sigmoid_(), 2, out=tanh_c[r]).sub_(1)
            h = torch.mul(o_[r], tanh_c[r], out=hs[t])
            c = c_t
    return hs, (gates, cells, tanh_c, hh, stats_h, stats_c)


class _LSTMSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps):
        hs, ctx.buffers = _forward(xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps, keep=True)
        ctx.save_for_backward(w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, hs)
        return hs

    @staticmethod
    def backward(ctx, d_hs):
        w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, hs = ctx.saved_tensors
        gates, cells, tanh_c, hh, stats_h, stats_c = ctx.buffers
        ln_h, ln_c = gain_h is not None, gain_c is not None
        T, B, G = gates.shape
        H = G // 4
        d_hs = d_hs.contiguous()
        f_, i_, o_, g_ = (gates[..., k * H: (k + 1) * H] for k in range(4))
        d_gates = torch.empty_like(gates)  # ∂L/∂a_t: also ∂L/∂xx_t
        d_g4 = d_gates.view(T, B, 4, H)
        d_o = d_gates[..., 2 * H: 3 * H]
        d_hh = torch.empty_like(gates) if ln_h else None  # ∂L/∂(W_h h_{t-1})
        k = gates.new_empty(B, G)  # one step's local derivatives (see below)
        k4 = k.view(B, 4, H)
        kf, ki, ko, kg = (k[:, j * H: (j + 1) * H] for j in range(4))
        o_dtanh = gates.new_empty(B, H)
        acc = [torch.zeros_like(p) if p is not None else None for p in (gain_h, bias_h, gain_c, bias_c)]
        # LN's backward also gives this step's dγ, dβ (data still in cache); it sums rows per thread, so
        # it always runs on one thread: the gradients must not depend on the thread choice
        mask = [True, True, True]
        threads = recurrence_threads()

        def ln_backward(*args):
            if threads == 1:
                return _ln_backward(*args, mask)
            torch.set_num_threads(1)
            try:
                return _ln_backward(*args, mask)
            finally:
                torch.set_num_threads(threads)

        dh_t = d_hs[T - 1]
        dc = torch.zeros_like(c0)
        # Everything per step, while the step's tensors sit in cache: bulk passes over (T, B, 4H) cost
        # more than the same arithmetic done step by step here.
        with _Threads(threads):
            for t in range(T - 1, -1, -1):
                a, tc = gates[t], tanh_c[t]
                c_prev = cells[t - 1] if t > 0 else c0
                # ∂a_f = dc·c_{t-1}σ'(f), ∂a_i = dc·tanh(g)σ'(i), ∂a_g = dc·σ(i)tanh'(g),
                # ∂a_o = dh·tanh(·)σ'(o)
                torch.mul(a, a, out=k).neg_().add_(a)  # σ(1 − σ) (the g block is overwritten below)
                kf.mul_(c_prev)
                ki.mul_(g_[t])
                ko.mul_(tc)
                torch.mul(g_[t], g_[t], out=kg).neg_().add_(1).mul_(i_[t])
                torch.mul(tc, tc, out=o_dtanh).neg_().add_(1).mul_(o_[t])  # ∂h/∂(input of tanh)
                dy = dh_t * o_dtanh
                if ln_c:
                    mean, rstd = stats_c[t]
                    dy, dg, db = ln_backward(dy, cells[t], (H,), mean, rstd, gain_c, bias_c)
                    acc[2].add_(dg)
                    acc[3].add_(db)
                dc_t = dy.add_(dc)
                torch.mul(dc_t.unsqueeze(1), k4, out=d_g4[t])  # f, i, g (o overwritten next)
                torch.mul(dh_t, ko, out=d_o[t])
                dc = dc_t.mul_(f_[t])
                if ln_h:
                    mean, rstd = stats_h[t]
                    d_raw_t, dg, db = ln_backward(d_gates[t], hh[t], (G,), mean, rstd, gain_h, bias_h)
                    d_hh[t] = d_raw_t
                    acc[0].add_(dg)
                    acc[1].add_(db)
                else:
                    d_raw_t = d_gates[t]
                # ∂L/∂h_{t-1} = output gradient + recurrent part, in one fused product
                dh_t = torch.addmm(d_hs[t - 1], d_raw_t, w_h) if t > 0 else d_raw_t.mm(w_h)
        d_raw = d_hh if ln_h else d_gates
        h_prev = torch.cat([h0.unsqueeze(0), hs[:-1]])
        d_w = d_raw.reshape(-1, G).t().mm(h_prev.reshape(-1, H))
        d_gain_h, d_bias_h, d_gain_c, d_bias_c = acc
        return d_gates, d_w, d_gain_h, d_bias_h, d_gain_c, d_bias_c, dh_t, dc, None


def lstm_sequence(xx: torch.Tensor, w_h: torch.Tensor, gain_h: torch.Tensor | None,
                  bias_h: torch.Tensor | None, gain_c: torch.Tensor | None, bias_c: torch.Tensor | None,
                  h0: torch.Tensor, c0: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Hidden states (T, B, H) of an LSTM over gate inputs xx (T, B, 4H), gate order (f, i, o, g).

    gain_h/bias_h None: no LN on W_h h (eq. 17 / eq. 29); gain_c/bias_c None: no LN on c_t.
    """
    if (gain_h is None) != (bias_h is None) or (gain_c is None) != (bias_c is None):
        raise ValueError("pass both the gain and the bias of an LN, or neither")
    args = (xx.contiguous(), w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps)
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return _LSTMSequence.apply(*args)
    with torch.no_grad():  # evaluation: no buffers kept for a backward
        return _forward(*args, keep=False)[0]
