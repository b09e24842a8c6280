"""The compiled Triton kernels on a real CUDA GPU (marker `gpu`; skipped cleanly without one)."""

import pytest
import torch
import torch.nn.functional as F

import kernels
from kernels.reference import layer_norm_reference, ln_gru_cell_reference, ln_lstm_cell_reference

pytestmark = pytest.mark.gpu
CUDA = "cuda"
# Against float64 on the same inputs: fp32 tight; fp16/bf16 about one rounding of the output (≤ 1 ulp).
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 2e-2)}


def _grads(fn, x, w, b, dy):
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in (x, w, b)]
    y = fn(*leaves)
    y.backward(dy)
    return [y.detach()] + [None if t is None else t.grad for t in leaves]


def _data(M, N, dtype, wdtype=None, seed=0):
    g = torch.Generator(device=CUDA).manual_seed(seed)
    wdtype = wdtype or dtype
    x = (torch.randn(M, N, device=CUDA, generator=g) * 2 + 0.5).to(dtype)
    w = (1 + 0.3 * torch.randn(N, device=CUDA, generator=g)).to(wdtype)
    b = (0.3 * torch.randn(N, device=CUDA, generator=g)).to(wdtype)
    dy = torch.randn(M, N, device=CUDA, generator=g).to(dtype)
    return x, w, b, dy


def test_cuda_tensors_take_the_measured_side_unless_forced():
    x = torch.randn(4, 64, device=CUDA, requires_grad=True)
    assert kernels.backend_for(x) == "triton" and kernels.ln_backend_for(x) == "measured"
    y = kernels.layer_norm(x, None, None, 1e-5)
    y.sum().backward()
    torch.testing.assert_close(y, F.layer_norm(x, (64,), None, None, 1e-5), atol=1e-5, rtol=1e-5)
    chosen = {k.split(" | ", 1)[1]: v for k, v in kernels.layer_norm_choices().items()}
    assert chosen["float32/train/N=64,M<=4"] in ("torch", "triton", "triton/torch", "torch/triton")
    with torch.no_grad():
        kernels.layer_norm(x, None, None, 1e-5)
    chosen = {k.split(" | ", 1)[1]: v for k, v in kernels.layer_norm_choices().items()}
    assert chosen["float32/infer/N=64,M<=4"] in ("triton", "torch")
    assert kernels.backend_for(x, "torch") == "torch" and kernels.ln_backend_for(x, "torch") == "torch"


def test_a_workers_shape_history_neither_crashes_nor_changes_bits():
    # A first backward at M = 300, N = 1001 bf16 once froze the persistent grid of every later M and broke
    # the 16-byte alignment the odd-N backward promised (a misaligned load: a sticky CUDA error).
    data = {M: _data(M, 1001, torch.bfloat16) for M in (300, 65536)}
    fresh = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), *data[65536])
    _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), *data[300])
    after = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), *data[65536])
    torch.cuda.synchronize()
    assert all(torch.equal(f, a) for f, a in zip(fresh, after, strict=True))


@pytest.mark.parametrize("N", [1, 7, 768, 1000, 4099, 8192, 20000, 65536])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_forward_backward_vs_float64(N, dtype):
    M = 4096 if N <= 8192 else 512
    x, w, b, dy = _data(M, N, dtype)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    ref = _grads(
        lambda a, c, d: layer_norm_reference(a, c, d, 1e-5), x.double(), w.double(), b.double(), dy.double()
    )
    atol, rtol = TOL[dtype]
    for name, g, r in zip(("y", "dx"), got[:2], ref[:2], strict=True):
        torch.testing.assert_close(g.double(), r, atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}")
    # dγ/dβ sum M rows: compare relative to their scale.
    for name, g, r in zip(("dw", "db"), got[2:], ref[2:], strict=True):
        scale = r.abs().max().item() + 1
        torch.testing.assert_close(
            g.double() / scale, r / scale, atol=TOL[dtype][0], rtol=0, msg=lambda m, n=name: f"{n}: {m}"
        )
    # And against torch's own kernel in the same dtype: never worse than one more rounding.
    tor = _grads(lambda a, c, d: F.layer_norm(a, (N,), c, d, 1e-5), x, w, b, dy)
    torch.testing.assert_close(got[0].float(), tor[0].float(), atol=2 * atol, rtol=2 * rtol)


def test_fp32_weights_with_bf16_activations_and_none_params():
    x, w, b, dy = _data(2048, 5120, torch.bfloat16, torch.float32)
    y, dx, dw, db = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert (y.dtype, dx.dtype, dw.dtype, db.dtype) == (
        torch.bfloat16,
        torch.bfloat16,
        torch.float32,
        torch.float32,
    )
    ref = layer_norm_reference(x.double(), w.double(), b.double(), 1e-5)
    torch.testing.assert_close(y.double(), ref, atol=3e-2, rtol=2e-2)
    y0, dx0, dw0, db0 = _grads(
        lambda a, c, d: kernels.triton_layer_norm(a, None, None, 1e-5), x, None, None, dy
    )
    assert dw0 is None and db0 is None
    ref0 = layer_norm_reference(x.double(), None, None)
    torch.testing.assert_close(y0.double(), ref0, atol=3e-2, rtol=2e-2)


@pytest.mark.parametrize("N", [1000, 20000])
def test_parameter_gradients_bitwise_deterministic(N):
    x, w, b, dy = _data(8192 if N < 8192 else 1024, N, torch.bfloat16, torch.float32)
    first, second = (_grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy) for _ in range(2))
    for a, c in zip(first, second, strict=True):
        assert torch.equal(a, c)


@pytest.mark.parametrize("H", [256, 1000, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_lstm_cell_vs_reference(H, dtype):
    B = 64
    g = torch.Generator(device=CUDA).manual_seed(1)

    def r(*shape, s=1.0, m=0.0):
        return torch.randn(*shape, device=CUDA, generator=g, dtype=torch.float64) * s + m

    inputs = [r(B, 4 * H, s=3, m=1).to(dtype), r(B, 4 * H).to(dtype), r(B, H).to(dtype)]
    inputs += [
        r(4 * H, s=0.3, m=1),
        r(4 * H, s=0.2),
        r(4 * H, s=0.3, m=1),
        r(4 * H, s=0.2),
        r(4 * H, s=0.5),
        r(H, s=0.3, m=1),
        r(H, s=0.2),
    ]
    inputs = inputs[:3] + [p.float() for p in inputs[3:]]
    dh, dc = r(B, H), r(B, H)

    def run(cell, ins):
        leaves = [t.detach().clone().requires_grad_() for t in ins]
        h, c = cell(*leaves, 1e-5)
        ((h.double() * dh).sum() + (c.double() * dc).sum()).backward()
        return [h, c] + [t.grad for t in leaves]

    got = run(kernels.ln_lstm_cell, inputs)  # CUDA ⇒ the fused kernel
    ref = run(ln_lstm_cell_reference, [t.double() for t in inputs])
    atol = 1e-4 if dtype == torch.float32 else 5e-2
    for k, (a, c) in enumerate(zip(got, ref, strict=True)):
        scale = 1 + (c.abs().max().item() if k >= 5 else 0)  # parameter grads sum B rows
        torch.testing.assert_close(
            a.double() / scale, c / scale, atol=atol, rtol=atol, msg=lambda m, k=k: f"output/grad #{k}: {m}"
        )
    again = run(kernels.ln_lstm_cell, inputs)
    assert all(torch.equal(a, c) for a, c in zip(got, again, strict=True))


@pytest.mark.parametrize("H", [256, 1000])
def test_fused_gru_cell_vs_reference(H):
    B = 64
    g = torch.Generator(device=CUDA).manual_seed(2)

    def r(*shape, s=1.0, m=0.0):
        return torch.randn(*shape, device=CUDA, generator=g, dtype=torch.float64) * s + m

    inputs = [r(B, 2 * H, s=2, m=1), r(B, 2 * H), r(B, H, s=3), r(B, H, m=-1), r(B, H)]
    inputs = [t.float() for t in inputs] + [
        p.float()
        for p in (
            r(2 * H, s=0.3, m=1),
            r(2 * H, s=0.2),
            r(2 * H, s=0.3, m=1),
            r(2 * H, s=0.2),
            r(H, s=0.3, m=1),
            r(H, s=0.2),
            r(H, s=0.3, m=1),
            r(H, s=0.2),
        )
    ]
    dh = r(B, H)

    def run(cell, ins):
        leaves = [t.detach().clone().requires_grad_() for t in ins]
        (cell(*leaves, 1e-5).double() * dh).sum().backward()
        return [t.grad for t in leaves]

    got = run(kernels.ln_gru_cell, inputs)  # CUDA ⇒ the fused kernel
    ref = run(ln_gru_cell_reference, [t.double() for t in inputs])
    for k, (a, c) in enumerate(zip(got, ref, strict=True)):
        scale = 1 + c.abs().max().item()
        torch.testing.assert_close(
            a.double() / scale, c / scale, atol=1e-4, rtol=1e-4, msg=lambda m, k=k: f"grad #{k}: {m}"
        )


def test_torch_compile_keeps_one_graph_with_both_ops():
    x = torch.randn(64, 1000, device=CUDA, requires_grad=True)
    w = torch.ones(1000, device=CUDA, requires_grad=True)
    H = 128
    hh, xx = torch.randn(8, 4 * H, device=CUDA), torch.randn(8, 4 * H, device=CUDA)
    cp = torch.randn(8, H, device=CUDA)
    ps = [torch.ones(4 * H, device=CUDA, requires_grad=True) for _ in range(5)]
    ps += [torch.ones(H, device=CUDA, requires_grad=True) for _ in range(2)]

    def f(x, w):
        y = kernels.layer_norm(torch.relu(x), w, None, 1e-5)
        h, c = kernels.ln_lstm_cell(hh, xx, cp, *ps, 1e-5)
        return y.sum() + h.sum() + c.sum()

    explanation = torch._dynamo.explain(f)(x, w)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(f, fullgraph=True)  # inductor around our custom ops
    out = compiled(x, w)
    out.backward()
    torch.testing.assert_close(out, f(x, w), atol=1e-3, rtol=1e-4)


def _sequence_inputs(T, B, H, dtype, seed=3):
    g = torch.Generator(device=CUDA).manual_seed(seed)

    def r(*shape, s=1.0, m=0.0):
        return torch.randn(*shape, device=CUDA, generator=g, dtype=torch.float64) * s + m

    acts = [r(T, B, 4 * H, s=2, m=0.5), r(4 * H, H, s=H**-0.5)]
    params = [
        r(4 * H, s=0.3, m=1),
        r(4 * H, s=0.2),
        r(4 * H, s=0.3, m=1),
        r(4 * H, s=0.2),
        r(4 * H, s=0.5),
        r(H, s=0.3, m=1),
        r(H, s=0.2),
    ]
    state = [r(B, H, s=0.5), r(B, H)]
    return [t.to(dtype) for t in acts] + [p.float() for p in params] + [t.to(dtype) for t in state]


@pytest.mark.parametrize("T,B,H", [(16, 32, 256), (5, 7, 1000)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_lstm_sequence_vs_float64_reference(T, B, H, dtype):
    inputs = _sequence_inputs(T, B, H, dtype)
    d_out = torch.randn(T, B, H, device=CUDA, dtype=torch.float64)

    def ref_seq(ax, w_h, *rest):
        *ps, h, c = rest[:-1]
        hs = []
        for t in range(ax.shape[0]):
            h, c = ln_lstm_cell_reference(h @ w_h.t(), ax[t], c, *ps, rest[-1])
            hs.append(h)
        return torch.stack(hs)

    def run(fn, ins):
        leaves = [t.detach().clone().requires_grad_() for t in ins]
        hs = fn(*leaves, 1e-5)
        (hs.double() * d_out).sum().backward()
        return [hs] + [t.grad for t in leaves]

    got = run(kernels.triton_ln_lstm_sequence, inputs)
    ref = run(ref_seq, [t.double() for t in inputs])
    # bf16: the products W_h h run in bf16 too and the error compounds over the steps
    atol = 2e-4 if dtype == torch.float32 else 1e-1
    for k, (a, c) in enumerate(zip(got, ref, strict=True)):
        scale = 1 + c.abs().max().item()
        torch.testing.assert_close(
            a.double() / scale, c / scale, atol=atol, rtol=atol, msg=lambda m, k=k: f"output/grad #{k}: {m}"
        )
    # Calls 2 and 3 of one shape capture and replay its CUDA graphs (kernels.graphs): the same bits each
    # time, and the eager call's to rounding (cuBLAS may pick another algorithm on the capture stream).
    again = run(kernels.triton_ln_lstm_sequence, inputs)
    third = run(kernels.triton_ln_lstm_sequence, inputs)
    assert all(torch.equal(a, c) for a, c in zip(again, third, strict=True))
    for a, c in zip(got, again, strict=True):
        scale = 1 + c.abs().max().item()
        torch.testing.assert_close(a / scale, c / scale, atol=atol, rtol=atol)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("H", [128, 1000])
def test_engine_layers_take_the_fused_sequences_on_cuda(cell, H, fused_vs_torch):
    # four training steps: eager, CUDA-graph capture, replay, replay (kernels.graphs)
    runs, ref, calls = fused_vs_torch(cell, torch.randn(12, 16, 64, device=CUDA), H, repeats=4)
    assert calls == 4
    assert all(torch.equal(a, b) for a, b in zip(runs[2], runs[3], strict=True))  # deterministic
    for run in runs:
        for a, b in zip(run, ref, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def _gru_sequence_inputs(T, B, H, seed=5):
    g = torch.Generator(device=CUDA).manual_seed(seed)

    def r(*shape, s=1.0, m=0.0):
        return torch.randn(*shape, device=CUDA, generator=g) * s + m

    return [
        r(T, B, 3 * H, s=2, m=0.5),
        r(3 * H, H, s=H**-0.5),
        r(2 * H, s=0.3, m=1),
        r(2 * H, s=0.2),
        r(2 * H, s=0.3, m=1),
        r(2 * H, s=0.2),
        r(H, s=0.3, m=1),
        r(H, s=0.2),
        r(H, s=0.3, m=1),
        r(H, s=0.2),
        r(B, H, s=0.5),
    ]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_sequences_replay_cuda_graphs_equal_to_eager_launches(cell):
    # Calls 1-7 with new data each: 1 runs eagerly, 2 captures the forward and backward graphs, 3-7 replay
    # (4 and 5, then 6 and 7, both forward before either backward, backwards in either order: each keeps
    # its own saved tensors, lent from the graph's buffers or cloned out when evicted). Every output and
    # gradient must match the eager launches: the same kernels, though cuBLAS on the capture stream may
    # pick another algorithm, so to fp32 rounding; replaying the same inputs again gives the same bits.
    from kernels import graphs

    fn = kernels.triton_ln_lstm_sequence if cell == "lstm" else kernels.triton_ln_gru_sequence
    make = (
        (lambda s: _sequence_inputs(24, 16, 256, torch.float32, seed=s))
        if cell == "lstm"
        else (lambda s: _gru_sequence_inputs(24, 16, 256, seed=s))
    )
    d = torch.randn(24, 16, 256, device=CUDA)
    calls = [make(s) for s in range(7)]

    def leaves(ins):
        return [t.detach().clone().requires_grad_() for t in ins]

    def eager(ins):
        ls = leaves(ins)
        hs = fn(*ls, 1e-5, cuda_graphs=False)
        (hs * d).sum().backward()
        return [hs.detach()] + [t.grad for t in ls]

    graphs.clear()
    before = dict(graphs.stats)
    got = []
    for ins in calls[:3]:
        ls = leaves(ins)
        hs = fn(*ls, 1e-5)
        (hs * d).sum().backward()
        got.append([hs.detach()] + [t.grad for t in ls])
    for a, b, b_first in ((3, 4, True), (5, 6, False)):
        la, lb = leaves(calls[a]), leaves(calls[b])
        ha, hb = fn(*la, 1e-5), fn(*lb, 1e-5)
        for h in (hb, ha) if b_first else (ha, hb):
            (h * d).sum().backward()
        got += [[ha.detach()] + [t.grad for t in la], [hb.detach()] + [t.grad for t in lb]]
    ls = leaves(calls[2])
    hs = fn(*ls, 1e-5)
    (hs * d).sum().backward()
    again = [hs.detach()] + [t.grad for t in ls]
    torch.cuda.synchronize()
    assert graphs.stats["captures"] - before["captures"] == 2
    assert graphs.stats["replays"] - before["replays"] == 14
    # every forward replay lent its saved outputs; the second forward of each pair evicted the first's,
    # and restoring call 6's data for its backward evicted call 7's
    assert graphs.stats["lent"] - before["lent"] == 7 and graphs.stats["evicted"] - before["evicted"] == 3
    assert all(torch.equal(a, b) for a, b in zip(got[2], again, strict=True))  # replays are deterministic
    for k, (ins, g) in enumerate(zip(calls, got, strict=True)):
        for j, (a, b) in enumerate(zip(g, eager(ins), strict=True)):
            scale = 1 + b.abs().max().item()
            torch.testing.assert_close(
                a / scale,
                b / scale,
                atol=1e-5,
                rtol=1e-5,
                msg=lambda m, k=k, j=j: f"call {k + 1}, output/grad #{j}: {m}",
            )
    graphs.clear()
