"""The Triton LayerNorm under TRITON_INTERPRET=1 on CPU: forward and backward vs float64 and F.layer_norm."""

import pytest
import torch
import torch.nn.functional as F

import kernels
from kernels.reference import layer_norm_reference

pytestmark = pytest.mark.usefixtures("interp")


def _data(gen, M, N, dtype, wdtype=None, weight=True, bias=True):
    wdtype = wdtype or dtype
    x = (torch.randn(M, N, generator=gen, dtype=torch.float64) * 2 + 0.5).to(dtype)
    w = (1 + 0.5 * torch.randn(N, generator=gen, dtype=torch.float64)).to(wdtype) if weight else None
    b = (0.5 * torch.randn(N, generator=gen, dtype=torch.float64)).to(wdtype) if bias else None
    dy = torch.randn(M, N, generator=gen, dtype=torch.float64).to(dtype)
    return x, w, b, dy


def _grads(fn, x, w, b, dy):
    """(y, dx, dw, db) of fn(x, w, b) with upstream gradient dy."""
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, w, b)]
    y = fn(*leaves)
    y.backward(dy.to(y.dtype))
    return (y.detach(), *[t.grad if t is not None else None for t in leaves])


def _f64(x, w, b, eps=1e-5):
    as64 = [None if t is None else t.double() for t in (x, w, b)]
    return layer_norm_reference(*as64, eps)


def _assert_all_close(got, want, atol, rtol):
    for g, r in zip(got, want, strict=True):
        if r is None:
            assert g is None
            continue
        torch.testing.assert_close(g.double(), r.double(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("N", [1, 7, 37, 1000])
def test_fp32_forward_backward_matches_float64_and_torch(gen, tol, N):
    x, w, b, dy = _data(gen, 6, N, torch.float32)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert got[0].dtype == torch.float32
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])
    # At N = 1, dx = 0 exactly; torch's own rounding there is amplified by rstd = 1/√ε ≈ 316.
    atol = 1e-4 if N == 1 else 1e-5
    _assert_all_close(got, _grads(lambda a, c, d: F.layer_norm(a, (N,), c, d, 1e-5), x, w, b, dy), atol, 1e-5)


@pytest.mark.parametrize("tier", ["looped", "resident"])
def test_split_row_tier_matches_float64(gen, tol, tier):
    # N = 300 forced to the long-row tiers: the forward walks 128-wide chunks with a 44-wide masked tail, the
    # backward splits rows into three 128-wide segments (the last 44 wide); the resident run is the control.
    x, w, b, dy = _data(gen, 3, 300, torch.float32)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5, tier=tier), x, w, b, dy)
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])


def test_tiers_are_chosen_by_row_length():
    from kernels import ln_triton
    from kernels.layer_norm_op import bwd_config, fwd_config

    small, mid = fwd_config(4096, 7), fwd_config(4096, 4096)
    big = fwd_config(4096, 2 * ln_triton.MAX_RESIDENT)
    assert (small["kernel"], mid["kernel"], big["kernel"]) == ("resident", "resident", "looped")
    assert small["ROWS"] > 1 and mid["ROWS"] == 1
    from kernels.ln_bwd_triton import MAX_RESIDENT_BWD

    assert bwd_config(4096, 2 * MAX_RESIDENT_BWD, torch.device("cpu"))["kernel"] == "split"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("N", [37, 1000])
def test_low_precision_activations_match_float64(gen, tol, dtype, N):
    x, w, b, dy = _data(gen, 5, N, dtype)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert all(t.dtype == dtype for t in got)
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[dtype])


def test_fp32_weights_with_bf16_activations(gen, tol):
    x, w, b, dy = _data(gen, 5, 200, torch.bfloat16, wdtype=torch.float32)
    y, dx, dw, db = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert (y.dtype, dx.dtype) == (torch.bfloat16, torch.bfloat16)
    assert (dw.dtype, db.dtype) == (torch.float32, torch.float32)
    ref = _grads(_f64, x, w, b, dy.double())
    _assert_all_close((y, dx), ref[:2], *tol[torch.bfloat16])
    # dγ/dβ accumulate in fp32 from bf16 inputs: only the inputs' rounding separates them from float64.
    _assert_all_close((dw, db), ref[2:], 2e-2, 1e-2)


@pytest.mark.parametrize("weight,bias", [(False, False), (True, False), (False, True)])
def test_weight_or_bias_none(gen, tol, weight, bias):
    x, w, b, dy = _data(gen, 4, 37, torch.float32, weight=weight, bias=bias)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])


@pytest.mark.parametrize("tier", ["resident", "looped"])
def test_parameter_gradients_are_bitwise_deterministic(gen, tier):
    # 29 rows over 4 persistent programs: each program accumulates several rows before the column sum.
    x, w, b, dy = _data(gen, 29, 300, torch.float32)
    runs = [_grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5, tier=tier), x, w, b, dy) for _ in range(2)]
    for first, second in zip(*runs, strict=True):
        assert torch.equal(first, second)


def test_batched_and_strided_inputs(gen, tol):
    x = torch.randn(2, 3, 40, generator=gen)
    xt = torch.randn(40, 6, generator=gen).t()  # a transposed view: last dim not contiguous, copied
    w = torch.randn(40, generator=gen)
    for t in (x, xt):
        y = kernels.triton_layer_norm(t, w, None, 1e-5)
        assert y.shape == t.shape
        torch.testing.assert_close(y.double(), _f64(t, w, None), atol=2e-5, rtol=2e-5)


def test_user_errors_say_what_to_change():
    with pytest.raises(TypeError, match="float32/float16/bfloat16"):
        kernels.triton_layer_norm(torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"weight must have shape \(3,\)"):
        kernels.triton_layer_norm(torch.zeros(2, 3), torch.ones(4))
    with pytest.raises(ValueError, match="unknown tier"):
        kernels.triton_layer_norm(torch.zeros(2, 3), tier="fast")


def test_custom_op_traces_without_graph_break(gen):
    x, w, b, dy = _data(gen, 4, 37, torch.float32)

    def step(x, w, b):
        return kernels.triton_layer_norm(x * 2, w, b, 1e-5).sum()

    kernels.triton_layer_norm(x, w, b)  # first call imports the kernel module outside the graph
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")  # fullgraph: a break would raise
    got = _grads(lambda *a: compiled(*a), x, w, b, torch.tensor(1.0))
    want = _grads(lambda *a: step(*a), x, w, b, torch.tensor(1.0))
    _assert_all_close(got, want, 1e-6, 1e-6)


def test_opcheck_of_the_registered_ops(gen):
    from kernels.layer_norm_op import layer_norm_fwd

    x, w, b, _ = _data(gen, 3, 20, torch.float32)
    torch.library.opcheck(layer_norm_fwd, (x.requires_grad_(), w.requires_grad_(), b, 1e-5, 0))


# ---- the eager path (autograd.Function) against the custom ops: same launch functions, same bits ----


def _op_path(tier):
    from kernels.layer_norm_op import TIERS, layer_norm_fwd

    return lambda x, w, b: layer_norm_fwd(x, w, b, 1e-5, TIERS[tier])[0]


@pytest.mark.parametrize("tier", ["resident", "looped"])
@pytest.mark.parametrize("N", [37, 1000])
@pytest.mark.parametrize("weight,bias", [(True, True), (True, False), (False, True), (False, False)])
def test_eager_path_is_bitwise_the_custom_op_path(gen, tier, N, weight, bias):
    x, w, b, dy = _data(gen, 5, N, torch.float32, weight=weight, bias=bias)
    eager = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5, tier=tier), x, w, b, dy)
    op = _grads(_op_path(tier), x, w, b, dy)
    for e, o in zip(eager, op, strict=True):
        assert (e is None and o is None) or torch.equal(e, o)
    with torch.no_grad():  # the no-autograd shortcut of the eager path
        assert torch.equal(kernels.triton_layer_norm(x, w, b, 1e-5, tier=tier), op[0])


def test_eager_path_skips_the_custom_ops(gen, monkeypatch):
    from kernels import layer_norm_op

    def refuse(*args, **kwargs):
        raise AssertionError("the eager path called a custom op")

    x, w, b, dy = _data(gen, 4, 37, torch.float32)
    want = _grads(_op_path("auto"), x, w, b, dy)
    monkeypatch.setattr(layer_norm_op, "layer_norm_fwd", refuse)
    monkeypatch.setattr(layer_norm_op, "layer_norm_bwd", refuse)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert all(torch.equal(g, r) for g, r in zip(got, want, strict=True))
    y = kernels.triton_layer_norm(x.requires_grad_(), w, b)
    assert type(y.grad_fn).__name__ == "_LayerNormFunctionBackward"


def test_compiled_graph_holds_the_custom_op(gen):
    from kernels.layer_norm_op import layer_norm_fwd

    targets = []

    def recording_backend(gm, example_inputs):
        targets.extend(node.target for node in gm.graph.nodes)
        return gm.forward

    x, w, b, _ = _data(gen, 4, 37, torch.float32)
    compiled = torch.compile(
        lambda x, w, b: kernels.triton_layer_norm(x, w, b, 1e-5), fullgraph=True, backend=recording_backend
    )
    torch._dynamo.reset()
    y = compiled(x, w, b)
    assert torch.ops.normlab.layer_norm_fwd.default in targets, targets
    assert torch.equal(y, layer_norm_fwd(x, w, b, 1e-5, 0)[0])


def test_eager_path_on_batched_and_strided_inputs(gen):
    # (2, 3, 40) goes through reshape; a transposed (40, 6)ᵀ view is copied to rows; dy non-contiguous too.
    w, b = torch.randn(40, generator=gen), torch.randn(40, generator=gen)
    for x in (torch.randn(2, 3, 40, generator=gen), torch.randn(40, 6, generator=gen).t()):
        dy = torch.randn(x.shape[::-1], generator=gen).transpose(0, -1)
        eager = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
        op = _grads(_op_path("auto"), x, w, b, dy)
        assert eager[0].shape == eager[1].shape == x.shape and eager[0].is_contiguous()
        assert all(torch.equal(e, o) for e, o in zip(eager, op, strict=True))
        torch.testing.assert_close(eager[0].double(), _f64(x, w, b), atol=2e-5, rtol=2e-5)


# ---- the backward's partial buffers: never zero-filled, so nothing may depend on what they held ----


@pytest.mark.parametrize("tier", ["looped", "resident"])
@pytest.mark.parametrize("weight,bias", [(True, True), (True, False), (False, True)])
def test_gradients_do_not_depend_on_uninitialised_buffers(gen, tol, monkeypatch, tier, weight, bias):
    # 29 rows over 4 persistent programs: every program's partial row takes a first write, then sums.
    x, w, b, dy = _data(gen, 29, 300, torch.float32, weight=weight, bias=bias)
    clean = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5, tier=tier), x, w, b, dy)
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):  # every torch.empty of the LayerNorm path comes back full of NaN
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    def no_zeros(*args, **kwargs):
        raise AssertionError("torch.zeros on the LayerNorm hot path")

    monkeypatch.setattr(torch, "empty", nan_empty)
    monkeypatch.setattr(torch, "zeros", no_zeros)
    for fn in (lambda *a: kernels.triton_layer_norm(*a, 1e-5, tier=tier), _op_path(tier)):
        dirty = _grads(fn, x, w, b, dy)
        for c, d in zip(clean, dirty, strict=True):
            assert (c is None and d is None) or torch.equal(c, d)
    monkeypatch.undo()
    _assert_all_close(clean, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])


@pytest.mark.parametrize("P,N", [(37, 200), (4, 7), (1, 1000)])
def test_column_sum_is_exact_on_integers_and_bitwise_repeatable(gen, P, N):
    from kernels.layer_norm_op import column_sum

    # Small integers sum exactly in any order, and |Σ| ≤ 185 < 2⁸ is exact in bf16 too (so no rounding
    # mode is tested; the interpreter's bf16 cast truncates): a missed or doubled row/column tile shows.
    part = torch.randint(-5, 6, (P, N), generator=gen).float()
    assert torch.equal(column_sum(part, torch.float32), part.sum(0))
    assert torch.equal(column_sum(part, torch.bfloat16), part.sum(0).to(torch.bfloat16))
    noisy = torch.randn(P, N, generator=gen)
    first = column_sum(noisy, torch.float32)
    assert torch.equal(first, column_sum(noisy.clone(), torch.float32))
    torch.testing.assert_close(first.double(), noisy.double().sum(0), atol=1e-5, rtol=1e-5)


def test_two_slab_sum_writes_each_output_in_its_own_dtype(gen):
    from kernels.layer_norm_op import _sum_into

    part = torch.randint(-5, 6, (2, 45, 130), generator=gen).float()  # exact sums, as above
    out, out2 = torch.full((130,), float("nan")), torch.full((130,), float("nan"), dtype=torch.bfloat16)
    _sum_into(part, 2, 45, 130, out, out2)  # one launch: grid (column strips, 2 slabs)
    assert torch.equal(out, part[0].sum(0))
    assert torch.equal(out2, part[1].sum(0).to(torch.bfloat16))


class _Counting:
    """Wraps a Triton kernel object: counts `kernel[grid](...)` launches, then launches it."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


def _count_shifted(monkeypatch):
    """Counting wrappers around the shifted kernels, where the launch functions launch them (their
    Launchers)."""
    from kernels.layer_norm_op import LAUNCHERS

    fwd = _Counting(LAUNCHERS["_ln_fwd_shifted"].kernel)
    bwd = _Counting(LAUNCHERS["_ln_bwd_shifted"].kernel)
    monkeypatch.setattr(LAUNCHERS["_ln_fwd_shifted"], "kernel", fwd)
    monkeypatch.setattr(LAUNCHERS["_ln_bwd_shifted"], "kernel", bwd)
    return fwd, bwd


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("N", [517, 1001, 2041])
@pytest.mark.parametrize("affine", [True, False])
def test_odd_rows_take_the_shifted_kernels_and_match_float64(gen, tol, monkeypatch, dtype, N, affine):
    # 19 rows of an N that is no multiple of 16 (nor of 4 or 8): rows start at every offset from a
    # 16-byte boundary, so heads and tails of every length 0..VEC-1 occur; the backward's 8 programs own
    # 2-3 rows each, all at one offset, and accumulate dγ/dβ over them.
    fwd, bwd = _count_shifted(monkeypatch)
    x, w, b, dy = _data(gen, 19, N, dtype, weight=affine, bias=affine)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert (fwd.launches, bwd.launches) == (1, 1)
    want = _grads(_f64, x, w, b, dy.double())
    atol, rtol = tol[dtype]
    _assert_all_close(got[:2], want[:2], atol, rtol)
    for g, r in zip(got[2:], want[2:], strict=True):  # dγ/dβ sum 19 rows: relative to their scale
        if r is not None:
            scale = r.abs().max().item() + 1
            torch.testing.assert_close(g.double() / scale, r.double() / scale, atol=atol, rtol=0)
    resident = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5, tier="resident"), x, w, b, dy)
    assert (fwd.launches, bwd.launches) == (1, 1)  # the forced tier takes the resident kernels
    for g, r in zip(got, resident, strict=True):  # same sums in another order
        if r is not None:
            torch.testing.assert_close(g.double(), r.double(), atol=4 * atol, rtol=4 * rtol)
    again = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert all(a is None or torch.equal(a, c) for a, c in zip(got, again, strict=True))  # deterministic


def test_shifted_kernels_fall_back_when_rows_do_not_share_alignment(gen, tol, monkeypatch):
    fwd, bwd = _count_shifted(monkeypatch)
    base, w, b, dy = _data(gen, 6, 1002, torch.float32)
    w, b = w[1:], b[1:]
    views = [  # (x from the leaf, dy): neither lets x, dy and the dense y / dx share one alignment
        (lambda t: t[:, 1:], dy[:, 1:]),  # rows strided by 1002 elements (dy too)
        (lambda t: t.reshape(-1)[1 : 1 + 5 * 1001].view(5, 1001), dy[:5, 1:].contiguous()),  # 4 bytes off
    ]
    for view, d in views:
        leaf = base.detach().clone().requires_grad_()
        x = view(leaf)
        y = kernels.triton_layer_norm(x, w, b, 1e-5)
        y.backward(d)
        want_y, want_dx = _grads(_f64, view(base), w, b, d.double())[:2]
        _assert_all_close([y.detach(), view(leaf.grad)], [want_y, want_dx], *tol[torch.float32])
    assert (fwd.launches, bwd.launches) == (0, 0)


@pytest.mark.parametrize(
    "N,dtype",
    [
        (517, torch.bfloat16),
        (768, torch.float32),
        (4099, torch.bfloat16),
        (5120, torch.float16),
        (12289, torch.float32),
    ],
)
def test_forward_rows_in_unpadded_tiles_match_float64(gen, tol, monkeypatch, N, dtype):
    # 7 rows: with odd N every row starts at another offset from a 16-byte boundary. The body's tiles:
    # 517 → 512 + 16, 768 → 512 + 256, 4099 → 4096, 5120 → 4096 + 1024, 12289 → 8192 + 4096.
    from kernels.layer_norm_op import fwd_config

    fwd, _ = _count_shifted(monkeypatch)
    x, w, b, _ = _data(gen, 7, N, dtype)
    with torch.no_grad():
        y = kernels.triton_layer_norm(x, w, b, 1e-5)
    assert fwd.launches == 1
    assert N - N % 4 <= sum(fwd_config(7, N)["TILES"]) < fwd_config(7, N)["BLOCK_N"]
    torch.testing.assert_close(y.double(), _f64(x, w, b), atol=tol[dtype][0], rtol=tol[dtype][1])


def test_backward_in_three_tiles_accumulates_every_column(gen, tol, monkeypatch):
    # N = 3000: body tiles 2048 + 512 + 512 (the last 440 wide), 19 rows over 8 programs of the shifted
    # backward; dγ/dβ summed over the rows column by column against float64.
    from kernels.layer_norm_op import bwd_config

    assert bwd_config(19, 3000, torch.device("cpu"))["TILES"] == (2048, 512, 512)
    fwd, bwd = _count_shifted(monkeypatch)
    x, w, b, dy = _data(gen, 19, 3000, torch.float32)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert (fwd.launches, bwd.launches) == (1, 1)
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), 1e-4, 1e-4)


@pytest.mark.parametrize("N", [4099, 2041, 1000, 5120])
def test_odd_and_unpadded_rows_match_float64_and_torch(gen, tol, N):
    # M = 2 keeps CI time short; the strided-alignment fallbacks are tested above.
    x, w, b, dy = _data(gen, 2, N, torch.float32)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])
    # fp32 rounding in torch's and our reduction orders differ by ~1e-5·√N.
    _assert_all_close(got, _grads(lambda a, c, d: F.layer_norm(a, (N,), c, d, 1e-5), x, w, b, dy), 1e-4, 1e-4)


# ---- rows longer than the resident backward holds: the split-row backward ----


def _count_split(monkeypatch):
    from kernels.layer_norm_op import LAUNCHERS

    counters = []
    for name in ("_ln_bwd_split_stats", "_ln_bwd_split_dx"):
        counters.append(_Counting(LAUNCHERS[name].kernel))
        monkeypatch.setattr(LAUNCHERS[name], "kernel", counters[-1])
    return counters


@pytest.mark.parametrize(
    "N,dtype",
    [(8193, torch.float32), (12288, torch.float32), (12288, torch.bfloat16), (16411, torch.float32)],
)
def test_long_rows_take_the_split_backward_and_match_float64_and_torch(gen, tol, monkeypatch, N, dtype):
    # 8193: three 4096-wide segments, the last one column; 12288: three full ones; 16411 (odd, past the
    # forward's resident limit too): five, the last 27 columns with unaligned loads.
    stats, dx = _count_split(monkeypatch)
    x, w, b, dy = _data(gen, 2, N, dtype)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert (stats.launches, dx.launches) == (1, 1)
    want = _grads(_f64, x, w, b, dy.double())
    atol, rtol = tol[dtype]
    _assert_all_close(got, want, atol, rtol)
    if dtype == torch.float32:  # and torch's own fp32 LayerNorm (its sums in another order)
        torch_grads = _grads(lambda a, c, d: F.layer_norm(a, (N,), c, d, 1e-5), x, w, b, dy)
        _assert_all_close(got, torch_grads, 1e-4, 1e-4)


def test_split_backward_is_bitwise_deterministic_and_independent_of_its_buffers(gen, monkeypatch):
    # 3 rows over 2 programs per segment: one program's partial sums 2 rows before the column sum, and
    # each row's 3 segment pairs combine in the dx kernel. Buffers full of NaN must not change a bit.
    x, w, b, dy = _data(gen, 3, 8200, torch.float32)
    first = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan")))  # all float
    second = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    monkeypatch.undo()
    assert all(torch.equal(f, s) for f, s in zip(first, second, strict=True))
