"""`lstm_sequence`: a whole LSTM / LN-LSTM recurrence as one autograd node, with a hand-written backward.

The input side has no recurrence, so the caller computes xx_t = LN(W_x x_t; α2, β2) + b for every step
in one matrix product and one LN call. What remains per step is eq. 20 (or eq. 29 / eq. 17 when an LN is
switched off):

    hh_t  = W_h h_{t-1}                              a_t = LN(hh_t; α1, β1) + xx_t   (or hh_t + xx_t)
    f, i, o, g = σ(a_f), σ(a_i), σ(a_o), tanh(a_g)   c_t = f ⊙ c_{t-1} + i ⊙ g
    h_t   = o ⊙ tanh(LN(c_t; α3, β3))               (or o ⊙ tanh(c_t))

Why a custom node: with per-step autograd a Python-loop LN-LSTM is several times slower than
`torch.nn.LSTM` on a small CPU. Two implementations of the same equations:

- float32 on the CPU with EngineOptions.c_step (training here; `workers.engine.lstm_native`): per step,
  torch's product and everything element-wise (LNs, gates, c_t, h_t, and in the backward their
  derivatives and dγ/dβ) in one call of a compiled C function (`workers.engine.native`, `lstm_step.c`)
  that works row by row while the row is in cache and splits the batch rows over the threads. dW_h is
  one large product over all steps.
- anything else (float64, which the exactness tests use; CUDA tensors; no C compiler; c_step off): torch
  ops into preallocated (T, B, ·) buffers (tanh as 2σ(2z) − 1), the backward's local gate derivatives
  formed for all steps at once before its loop, then 9 element-wise ops, LN's backward and one product
  per step.

Threads: the per-step work is small (B×H×4H multiply-adds, ~40K elements). `recurrence_threads()` is
all threads on an idle machine and one on an oversubscribed one (load average above 1.5× the cores,
e.g. a small shared box), where every fork/join waits for a descheduled thread and costs milliseconds.
In the C path the step's product and its element-wise call use it (the C library's OpenMP is torch's
own libgomp, so its threads are already awake); each batch row belongs to one thread and dγ/dβ are
summed per row, then over the rows in order, so the numbers do not depend on the count. In the torch
path only the product uses it and element-wise work stays on one thread (a fork/join costs more than a
30K-element torch op gains); MKL's products and LN's row-wise passes are bitwise the same for 1 and 2
threads. `EngineOptions.recurrence_threads` fixes it (None: automatic), e.g. for A/B measurements.

LayerNorm: population variance (eq. 15); the torch path uses torch's native kernel, so its numbers equal
the `kernels.layer_norm` torch path. Float64 tests and gradcheck pin the torch path to a hand-written
eq. 20; float32 tests pin the C path to the float64 numbers.
"""

from __future__ import annotations

import os

import torch

from workers.engine import lstm_native, native
from workers.engine.options import DEFAULT, EngineOptions

_ln = torch.native_layer_norm
_ln_backward = torch.ops.aten.native_layer_norm_backward
# Work buffers a finished backward handed back, for the next forward of the same shape: a fresh buffer
# costs a page fault per 4 KiB on its first touch, every call. Sets of the latest shape only (one per
# layer of that shape, at most 8): 12·T·B·H values each, held between calls, which the next training
# step needs anyway; `_SPARE.clear()` frees them.
_SPARE: dict = {}  # (T, B, 4H, dtype, device, LN on W_h h) -> list of buffer dicts


def machine_busy() -> bool:
    """True when the 1-minute load average exceeds 1.5× the cores this process may use."""
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return False
    return load > 1.5 * cores


def recurrence_threads(fixed: int | None = None) -> int:
    """Threads the next recurrence loop will use: `fixed`, or the automatic choice when it is None."""
    if fixed is not None:
        return fixed
    threads = torch.get_num_threads()
    return 1 if threads > 1 and machine_busy() else threads


def _steps(buf: torch.Tensor, n: int) -> tuple:
    """Per-step views of a (S, …) buffer for n steps, made once: indexing in the loop costs a dispatch."""
    rows = buf.unbind(0)
    return rows if len(rows) == n else rows * n  # one-step buffer (no backward): every step reuses row 0


def _forward(
    xx,
    w_h,
    gain_h,
    bias_h,
    gain_c,
    bias_c,
    h0,
    c0,
    eps,
    keep: bool,
    spare: dict | None = None,
    lib=None,
    threads: int = 1,
):
    """(h_t for all steps, buffers for the backward). keep=False (no backward coming): the per-step
    buffers hold one step only, so evaluation of long sequences needs memory for h_t alone. `spare`:
    buffers of the right shapes to reuse (see `_SPARE`). `lib`: the C step's library, or None (torch);
    `threads`: the recurrence's (see the module docstring)."""
    if lib is not None:
        return lstm_native.forward(
            lib, xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps, keep, spare, threads
        )
    T, B, G = xx.shape
    S = T if keep else 1  # steps the work buffers hold
    H = G // 4
    ln_h, ln_c = gain_h is not None, gain_c is not None
    w_hT = w_h.t().contiguous()  # laid out once: a product with the transposed view is slower, every step
    spare = spare or {}

    def buffer(name, *shape):
        return spare[name] if spare.get(name) is not None else xx.new_empty(*shape)

    gates = buffer("gates", S, B, G)  # activated gates σ(f), σ(i), σ(o), tanh(g)
    cells = buffer("cells", S, B, H)  # c_t
    tanh_c = buffer("tanh_c", S, B, H)  # tanh(LN(c_t)) or tanh(c_t)
    hs = xx.new_empty(T, B, H)  # h_t, the output
    hh = buffer("hh", S, B, G) if ln_h else None  # raw W_h h_{t-1}, for LN's backward
    one = xx.new_ones(())  # a Python scalar would be wrapped into a new tensor on every call
    A, C, TC, X, HS = (_steps(b, T) for b in (gates, cells, tanh_c, xx, hs))
    F_, I_, O_, TG = (_steps(gates[..., k * H : (k + 1) * H], T) for k in range(4))
    HH = _steps(hh, T) if hh is not None else ()  # hh exists exactly when ln_h
    stats_h, stats_c = [], []
    if ln_c:
        gain_c2, bias_c2 = gain_c * 2, bias_c * 2
    h, c = h0, c0
    n, before = threads, torch.get_num_threads()
    set_threads = torch.set_num_threads
    try:
        set_threads(1)  # element-wise work and LN: one thread (see the module docstring)
        for t in range(T):
            a, tg = A[t], TG[t]
            if n > 1:
                set_threads(n)
            if ln_h:
                torch.mm(h, w_hT, out=HH[t])
                if n > 1:
                    set_threads(1)
                y, mean, rstd = _ln(HH[t], (G,), gain_h, bias_h, eps)
                stats_h.append((mean, rstd))
                torch.add(y, X[t], out=a)
            else:
                torch.addmm(X[t], h, w_hT, out=a)
                if n > 1:
                    set_threads(1)
            # tanh(z) = 2σ(2z) − 1: one σ over the whole contiguous row is cheaper than σ on three
            # blocks plus torch's tanh (a slow op on the CPU); z + z = 2z exactly
            tg.add_(tg)
            a.sigmoid_()
            tg.add_(tg).sub_(one)
            c_t = C[t]
            torch.mul(F_[t], c, out=c_t)
            c_t.addcmul_(I_[t], tg)
            if ln_c:  # 2·LN(c; γ, β) = LN(c; 2γ, 2β): same statistics, the tanh's 2z for free
                y, mean, rstd = _ln(c_t, (H,), gain_c2, bias_c2, eps)
                stats_c.append((mean, rstd))
            else:
                y = torch.add(c_t, c_t)
            y.sigmoid_()
            tc = TC[t]
            torch.add(y, y, out=tc).sub_(one)
            h = torch.mul(O_[t], tc, out=HS[t])
            c = c_t
    finally:
        set_threads(before)
    return hs, (gates, cells, tanh_c, hh, stats_h, stats_c)


def _give_back(key, buffers: dict) -> None:
    """Hand a finished backward's work buffers to the next forward of the same shape (see `_SPARE`)."""
    if key not in _SPARE:
        _SPARE.clear()  # only the latest shape's sets, bounding the memory held
    sets = _SPARE.setdefault(key, [])
    if len(sets) < 8:
        sets.append(buffers)


def _local_derivatives(gates, cells, tanh_c, c0, spare: dict):
    """(K, KO, ODT) for all steps at once (no recurrence, so on all threads): K (T, B, 4H) holds
    ∂a_f = c_{t-1}σ'(f), ∂a_i = tanh(g)σ'(i), ∂a_g = σ(i)tanh'(g) per unit of ∂c_t (its o block is
    scratch), KO = tanh(·)σ'(o) per unit of ∂h_t, ODT = σ(o)tanh'(·) (∂h_t/∂ the input of the tanh)."""
    H = cells.shape[-1]
    f_, i_, o_, g_ = (gates[..., k * H : (k + 1) * H] for k in range(4))
    k = torch.mul(gates, gates).neg_().add_(gates)  # σ(1 − σ) (the g block is overwritten below)
    kf, ki, ko, kg = (k[..., j * H : (j + 1) * H] for j in range(4))
    kf[0].mul_(c0)
    kf[1:].mul_(cells[:-1])
    ki.mul_(g_)
    k_o = torch.mul(ko, tanh_c, out=spare["k_o"]) if "k_o" in spare else torch.mul(ko, tanh_c)
    torch.mul(g_, g_, out=kg).neg_().add_(1).mul_(i_)
    o_dtanh = spare["o_dtanh"] if "o_dtanh" in spare else torch.empty_like(tanh_c)
    torch.mul(tanh_c, tanh_c, out=o_dtanh).neg_().add_(1).mul_(o_)
    return k, k_o, o_dtanh


def _record_cells(record: dict | None, buffers) -> None:
    """The probes' record (see `lstm_sequence`): each step's ‖c_t‖, batch mean, before a backward reuses
    the cells buffer (buffers[1] on both paths)."""
    if record is not None:
        record["c_norms"] = torch.linalg.vector_norm(buffers[1].detach(), dim=2).mean(dim=1)


def _record_grads(record: dict | None, dhs: list) -> None:
    """‖∂ℓ/∂h_t‖ per case, batch mean, in time order, from the backward's dL/dh_t (last step first); ℓ is
    one case's loss (the training loss is the batch mean, so the gradient is scaled back by B)."""
    if record is not None and dhs:
        norms = torch.linalg.vector_norm(torch.stack(dhs[::-1]), dim=2).mean(dim=1)
        record["grad_norms"] = norms * dhs[0].shape[0]


class _LSTMSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps, record=None, lib=None, threads=1):
        ctx.key = (*xx.shape, xx.dtype, xx.device, gain_h is not None, lib is not None)
        ctx.lib, ctx.threads = lib, threads
        try:
            ctx.spare = _SPARE.get(ctx.key, []).pop()
        except IndexError:
            ctx.spare = {}
        hs, ctx.buffers = _forward(
            xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps, True, ctx.spare, lib, threads
        )
        _record_cells(record, ctx.buffers)
        ctx.record = record
        ctx.save_for_backward(xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, hs)
        ctx.eps = eps
        return hs

    @staticmethod
    def backward(ctx, d_hs):
        xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, hs = ctx.saved_tensors
        if ctx.buffers is None:  # a second backward through a retained graph: the first one used them up
            _, ctx.buffers = _forward(
                xx,
                w_h,
                gain_h,
                bias_h,
                gain_c,
                bias_c,
                h0,
                c0,
                ctx.eps,
                keep=True,
                lib=ctx.lib,
                threads=ctx.threads,
            )
        dhs: list | None = [] if ctx.record is not None else None  # dL/dh_t per step, for the probes
        if ctx.buffers[-1] == "native":
            buffers, ctx.buffers = ctx.buffers, None
            grads, spent = lstm_native.backward(
                ctx.lib,
                buffers,
                d_hs,
                xx,
                w_h,
                gain_h,
                bias_h,
                gain_c,
                bias_c,
                h0,
                c0,
                hs,
                ctx.eps,
                ctx.threads,
                dhs,
            )
            _give_back(ctx.key, spent)
            _record_grads(ctx.record, dhs)
            return (*grads, None, None, None, None)
        # The backward writes ∂L/∂(W_h h_{t-1}) over hh and h_{t-1} over cells once they are used, and
        # hands its buffers to the next forward: fresh buffers would cost page faults (see `_SPARE`)
        gates, cells, tanh_c, hh, stats_h, stats_c = ctx.buffers
        ctx.buffers = None  # used up from here on, even if this backward fails half-way
        ln_h, ln_c = gain_h is not None, gain_c is not None
        T, B, G = gates.shape
        H = G // 4
        d_hs = d_hs.contiguous()
        # ∂L/∂a_t (also ∂L/∂xx_t) is written over the local derivatives K, step by step
        k, k_o, o_dtanh = _local_derivatives(gates, cells, tanh_c, c0, ctx.spare)
        K, K4, KO, ODT = _steps(k, T), _steps(k.view(T, B, 4, H), T), _steps(k_o, T), _steps(o_dtanh, T)
        D_O, F_ = _steps(k[..., 2 * H : 3 * H], T), _steps(gates[..., :H], T)
        HH, CELLS, D_HS = (_steps(b, T) if b is not None else None for b in (hh, cells, d_hs))
        acc = [torch.zeros_like(p) if p is not None else None for p in (gain_h, bias_h, gain_c, bias_c)]
        # LN's backward also gives this step's dγ, dβ (data still in cache); it sums rows per thread, so
        # it runs on one thread, like all element-wise work here: only the products use `n`
        mask = [True, True, True]
        n, before = ctx.threads, torch.get_num_threads()
        threads = torch.set_num_threads
        dh_t = D_HS[T - 1]
        dc = torch.zeros_like(c0)
        try:
            threads(1)
            for t in range(T - 1, -1, -1):
                if dhs is not None:
                    dhs.append(dh_t)
                dy = torch.mul(dh_t, ODT[t])
                if ln_c:
                    mean, rstd = stats_c[t]
                    dy, dg, db = _ln_backward(dy, CELLS[t], (H,), mean, rstd, gain_c, bias_c, mask)
                    acc[2].add_(dg)
                    acc[3].add_(db)
                dc_t = dy.add_(dc)
                d_a = K[t]
                torch.mul(dc_t.unsqueeze(1), K4[t], out=K4[t])  # f, i, g (o overwritten next)
                torch.mul(dh_t, KO[t], out=D_O[t])
                dc = dc_t.mul_(F_[t])
                if ln_h:
                    mean, rstd = stats_h[t]
                    d_raw_t, dg, db = _ln_backward(d_a, HH[t], (G,), mean, rstd, gain_h, bias_h, mask)
                    HH[t].copy_(d_raw_t)  # ∂L/∂(W_h h_{t-1}), over the consumed W_h h_{t-1}
                    acc[0].add_(dg)
                    acc[1].add_(db)
                else:
                    d_raw_t = d_a
                # ∂L/∂h_{t-1} = output gradient + recurrent part, in one fused product
                if n > 1:
                    threads(n)
                dh_t = torch.addmm(D_HS[t - 1], d_raw_t, w_h) if t > 0 else d_raw_t.mm(w_h)
                if n > 1:
                    threads(1)
        finally:
            threads(before)
        d_raw = hh if ln_h else k
        h_prev = torch.cat([h0.unsqueeze(0), hs[:-1]], out=cells)
        d_w = d_raw.reshape(-1, G).t().mm(h_prev.reshape(-1, H))
        d_gain_h, d_bias_h, d_gain_c, d_bias_c = acc
        ctx.spare = {}
        _give_back(ctx.key, dict(gates=gates, cells=cells, tanh_c=tanh_c, hh=hh, k_o=k_o, o_dtanh=o_dtanh))
        _record_grads(ctx.record, dhs)
        return k, d_w, d_gain_h, d_bias_h, d_gain_c, d_bias_c, dh_t, dc, None, None, None, None


def lstm_sequence(
    xx: torch.Tensor,
    w_h: torch.Tensor,
    gain_h: torch.Tensor | None,
    bias_h: torch.Tensor | None,
    gain_c: torch.Tensor | None,
    bias_c: torch.Tensor | None,
    h0: torch.Tensor,
    c0: torch.Tensor,
    eps: float = 1e-5,
    record: dict | None = None,
    options: EngineOptions = DEFAULT,
) -> torch.Tensor:
    """Hidden states (T, B, H) of an LSTM over gate inputs xx (T, B, 4H), gate order (f, i, o, g).

    `options.c_step`: float32 CPU tensors take the compiled C step (where it builds), else torch's ops;
    `options.recurrence_threads`: the loop's threads (None: automatic, see the module docstring).

    gain_h/bias_h None: no LN on W_h h (eq. 17 / eq. 29); gain_c/bias_c None: no LN on c_t.
    `record` (the probes' hidden-state trace, on this same fast path): gets "c_norms" ((T,) batch means of
    ‖c_t‖) now and, once a backward has run through this call, "grad_norms" ((T,) batch means of
    ‖∂ℓ/∂h_t‖ for one case's loss ℓ, i.e. B × those of dL/dh_t).
    """
    if (gain_h is None) != (bias_h is None) or (gain_c is None) != (bias_c is None):
        raise ValueError("pass both the gain and the bias of an LN, or neither")
    args = (xx.contiguous(), w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps)
    lib = native.library(options) if native.applies(options, *args[:-1]) else None
    threads = recurrence_threads(options.recurrence_threads)
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return _LSTMSequence.apply(*args, record, lib, threads)
    with torch.no_grad():  # evaluation: no buffers kept for a backward (unless recording: every c_t)
        hs, buffers = _forward(*args, keep=record is not None, lib=lib, threads=threads)
        _record_cells(record, buffers)
        return hs
