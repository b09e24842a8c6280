"""The LSTM recurrence's C path: each step's element-wise work in one call of `lstm_step.c`.

`forward` / `backward` are `lstm_seq`'s float32 CPU implementation of eq. 20 (and eq. 29 / 17 with an LN
switched off), chosen there when `native.applies`. Per step: torch's product, then
one C call that does the LNs, the gates, c_t and h_t for every batch row (rows split over `threads`
OpenMP threads; see `workers.engine.native`); the backward likewise, with dγ/dβ summed per row and then
over the rows in order, so the numbers do not depend on the thread count. dW_h is one large product
over all steps.
"""

from __future__ import annotations

import ctypes

import torch

from workers.engine import native


def forward(
    lib, xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps, keep: bool, spare: dict | None, threads: int
):
    """(h_t for all steps, buffers for `backward`). keep=False (no backward coming): the buffers hold one
    step. Buffers: (gates, cells, tanh_c, hh, stats, "native"), stats the (4, S, B) LN means and inverse
    deviations of W_h h and c_t; `spare` offers buffers of the right shapes to reuse."""
    T, B, G = xx.shape
    S, H = (T if keep else 1), G // 4
    spare = spare or {}

    def buffer(name, *shape):
        return spare[name] if spare.get(name) is not None else xx.new_empty(*shape)

    gates, cells, tanh_c = buffer("gates", S, B, G), buffer("cells", S, B, H), buffer("tanh_c", S, B, H)
    hh = buffer("hh", S, B, G) if gain_h is not None else None
    stats = buffer("stats", 4, S, B)
    hs = xx.new_empty(T, B, H)
    params = [p.detach() if p is not None else None for p in (gain_h, bias_h, gain_c, bias_c)]
    ctx = native.context(
        T,
        B,
        H,
        S,
        threads,
        eps,
        xx=xx,
        gh=params[0],
        bh=params[1],
        gc=params[2],
        bc=params[3],
        c0=c0,
        gates=gates,
        cells=cells,
        tanh_c=tanh_c,
        hs=hs,
        hh=hh,
        mean_h=stats[0],
        rstd_h=stats[1],
        mean_c=stats[2],
        rstd_c=stats[3],
    )
    step, ref = lib.lstm_fwd_step, ctypes.byref(ctx)
    # W_hᵀ laid out once per call: a product with the transposed view is slower, every step
    w_hT = w_h.detach().t().contiguous()
    HS = hs.unbind(0)
    h, before = h0, torch.get_num_threads()
    try:
        torch.set_num_threads(threads)  # the products and the C step (over batch rows) use them
        for t in range(T):
            raw = torch.mm(h, w_hT)
            step(ref, t, raw.data_ptr())
            h = HS[t]
    finally:
        torch.set_num_threads(before)
    return hs, (gates, cells, tanh_c, hh, stats, "native")


def backward(
    lib, buffers, d_hs, xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, hs, eps, threads: int, dhs=None
):
    """((dxx, dW_h, dγ_h, dβ_h, dγ_c, dβ_c, dh0, dc0), the work buffers, free for the next forward).
    d_hs may have any strides (`out.sum()`'s is a broadcast view: no (T, B, H) copy is made for it).
    `dhs` (a list): gets each step's dL/dh_t, last step first (the probes)."""
    gates, cells, tanh_c, hh, stats, _ = buffers
    T, B, G = gates.shape
    H = G // 4
    d_a = torch.empty_like(gates)  # dL/da_t, also returned as dL/dxx_t
    dc = torch.zeros_like(c0)
    every = (gain_h, bias_h, gain_c, bias_c)
    acc = [p.new_zeros(B, p.shape[0]) if p is not None else None for p in every]  # per batch row
    params = [p.detach() if p is not None else None for p in every]
    scratch = xx.new_empty(B, H)  # a name of its own: the context holds only its address
    ctx = native.context(
        T,
        B,
        H,
        T,
        threads,
        eps,
        xx=xx,
        gh=params[0],
        bh=params[1],
        gc=params[2],
        bc=params[3],
        c0=c0,
        gates=gates,
        cells=cells,
        tanh_c=tanh_c,
        hs=hs,
        hh=hh,
        mean_h=stats[0],
        rstd_h=stats[1],
        mean_c=stats[2],
        rstd_c=stats[3],
        d_a=d_a,
        dc=dc,
        d_gh=acc[0],
        d_bh=acc[1],
        d_gc=acc[2],
        d_bc=acc[3],
        scratch=scratch,
    )
    step, ref = lib.lstm_bwd_step, ctypes.byref(ctx)
    w = w_h.detach()
    D_HS, RAW = d_hs.unbind(0), (hh if hh is not None else d_a).unbind(0)
    # the C step reads dL/dh_t as dense rows: a copy of the last step's only if it is not (the others
    # come out of the products)
    dh, before = D_HS[T - 1].contiguous(), torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        for t in range(T - 1, -1, -1):
            if dhs is not None:
                dhs.append(dh)  # a tensor of its own each step (read, never written, by the C step)
            step(ref, t, dh.data_ptr())
            # dL/dh_{t-1} = the output's gradient + the recurrent part, in one fused product
            dh = torch.addmm(D_HS[t - 1], RAW[t], w) if t > 0 else RAW[t].mm(w)
    finally:
        torch.set_num_threads(before)
    d_raw = hh if hh is not None else d_a
    h_prev = torch.cat([h0.unsqueeze(0), hs[:-1]], out=cells)  # cells are used up: h_{t-1} over them
    d_w = d_raw.reshape(-1, G).t().mm(h_prev.reshape(-1, H))
    sums = []
    for rows in acc:  # over the batch rows in order: the same numbers for any thread count
        if rows is not None:
            total = rows.new_empty(rows.shape[1])
            lib.lstm_sum_rows(rows.data_ptr(), B, rows.shape[1], total.data_ptr())
            rows = total
        sums.append(rows)
    spent = dict(gates=gates, cells=cells, tanh_c=tanh_c, hh=hh, stats=stats)
    return (d_a, d_w, *sums, dh, dc), spent
