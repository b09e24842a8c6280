"""The Triton LayerNorm under TRITON_INTERPRET=1 on CPU: forward and backward vs float64 and F.layer_norm."""

import pytest
import torch
import torch.nn.functional as F

import kernels
from kernels.reference import layer_norm_reference

pytestmark = pytest.mark.usefixtures("interp", "fresh_plans")


@pytest.fixture
def fresh_plans():
    """No launch plan outlives a test: some tests swap a kernel or the grid heuristic under the plans."""
    from kernels import layer_norm_op

    layer_norm_op.PLANS.clear()
    yield
    layer_norm_op.PLANS.clear()


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


@pytest.fixture(params=["resident", "long"])
def rows(request, monkeypatch):
    """Both shapes of row: 'long' narrows the register limit so N = 300 is walked in 32-wide chunks (a
    12-wide masked tail) and the backward runs in column segments after its row sums."""
    from kernels import layer_norm_op

    if request.param == "long":
        monkeypatch.setattr(layer_norm_op, "MAX_RESIDENT", 64)
        monkeypatch.setattr(layer_norm_op, "MAX_RESIDENT_FWD", 64)
        monkeypatch.setattr(layer_norm_op, "CHUNK", 32)
    return request.param


@pytest.mark.parametrize("N", [1, 7, 37, 1000])
def test_fp32_forward_backward_matches_float64_and_torch(gen, tol, N):
    x, w, b, dy = _data(gen, 6, N, torch.float32)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    assert got[0].dtype == torch.float32
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])
    # At N = 1, dx = 0 exactly; torch's own rounding there is amplified by rstd = 1/√ε ≈ 316.
    atol = 1e-4 if N == 1 else 1e-5
    _assert_all_close(got, _grads(lambda a, c, d: F.layer_norm(a, (N,), c, d, 1e-5), x, w, b, dy), atol, 1e-5)


def test_long_rows_match_float64(gen, tol, rows):
    x, w, b, dy = _data(gen, 7, 300, torch.float32)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])


@pytest.mark.parametrize("N", [300, 4099])
def test_two_tile_rows_match_float64(gen, tol, N):
    # N = 300: tiles of 256 + 64 lanes; N = 4099: 4096 + 4 (not one 8192-wide padded block)
    from kernels.layer_norm_op import fwd_launch

    cfg = fwd_launch(3, N, torch.device("cpu"))
    assert (cfg.meta["BLOCK_A"], cfg.meta["BLOCK_B"]) == {300: (256, 64), 4099: (4096, 4)}[N]
    x, w, b, dy = _data(gen, 3, N, torch.float32)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])


@pytest.mark.parametrize("N", [32, 37])
def test_persistent_forward_walks_several_blocks_per_program(gen, tol, monkeypatch, N):
    # 2 programs over 13 one-row blocks: each program prefetches its next block before reducing this one;
    # the last prefetch runs past M (masked).
    from kernels import layer_norm_op

    monkeypatch.setattr(layer_norm_op, "persistent_programs", lambda device, per_sm=2: 2)
    monkeypatch.setattr(layer_norm_op, "SMALL_ROW_ELEMS", 32)
    cfg = layer_norm_op.fwd_launch(13, N, torch.device("cpu"))
    assert cfg.grid == (2,) and cfg.meta["ROWS"] == 1 and not cfg.long
    x, w, b, dy = _data(gen, 13, N, torch.float32)
    got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])


@pytest.mark.parametrize("weight,bias", [(True, True), (False, True)])
def test_backward_takes_several_rows_per_step(gen, tol, monkeypatch, weight, bias):
    # N = 37: 64-lane rows, 4 a step (BWD_TILE_ELEMS = 256); 4 programs over 30 rows: 8, 8, 8, 6 rows,
    # the last step of each program partly masked; 2-D partial ∂γ/∂β reduced once at the end.
    from kernels import layer_norm_op

    monkeypatch.setattr(layer_norm_op, "BWD_TILE_ELEMS", 256)
    cfg = layer_norm_op.bwd_launch(30, 37, torch.device("cpu"))
    assert cfg.meta["ROWS"] == 4 and cfg.grid == (4, 1) and cfg.rows_per_program == 8
    x, w, b, dy = _data(gen, 30, 37, torch.float32, weight=weight, bias=bias)
    runs = [_grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy) for _ in range(2)]
    _assert_all_close(runs[0], _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])
    for first, second in zip(*runs, strict=True):  # the fixed-order partial sums: same bits each run
        assert (first is None and second is None) or torch.equal(first, second)


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


@pytest.mark.usefixtures("rows")
def test_parameter_gradients_are_bitwise_deterministic(gen):
    # 29 rows over 4 persistent programs: each program accumulates several rows before the column sum.
    x, w, b, dy = _data(gen, 29, 300, torch.float32)
    runs = [_grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy) for _ in range(2)]
    for first, second in zip(*runs, strict=True):
        assert torch.equal(first, second)


def test_batched_and_strided_inputs(gen, tol):
    x = torch.randn(2, 3, 40, generator=gen)
    xt = torch.randn(40, 6, generator=gen).t()  # a transposed view: last dim not contiguous, copied
    w, b = torch.randn(40, generator=gen), torch.randn(40, generator=gen)
    for t in (x, xt):
        dy = torch.randn(t.shape[::-1], generator=gen).transpose(0, -1)  # a non-contiguous upstream grad
        got = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), t, w, b, dy)
        assert got[0].shape == got[1].shape == t.shape and got[0].is_contiguous()
        _assert_all_close(got, _grads(_f64, t, w, b, dy.double()), 2e-5, 2e-5)


def test_user_errors_say_what_to_change():
    with pytest.raises(TypeError, match="float32/float16/bfloat16"):
        kernels.triton_layer_norm(torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"weight must have shape \(3,\)"):
        kernels.triton_layer_norm(torch.zeros(2, 3), torch.ones(4))
    with pytest.raises(ValueError, match="non-empty last dimension"):
        kernels.triton_layer_norm(torch.zeros(2, 0))


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
    torch.library.opcheck(layer_norm_fwd, (x.requires_grad_(), w.requires_grad_(), b, 1e-5))


@pytest.mark.usefixtures("rows")
@pytest.mark.parametrize("weight,bias", [(True, True), (True, False), (False, True), (False, False)])
def test_eager_path_is_bitwise_the_custom_op_path(gen, weight, bias):
    from kernels.layer_norm_op import layer_norm_fwd

    x, w, b, dy = _data(gen, 5, 300, torch.float32, weight=weight, bias=bias)
    eager = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    op = _grads(lambda *a: layer_norm_fwd(*a, 1e-5)[0], x, w, b, dy)
    for e, o in zip(eager, op, strict=True):
        assert (e is None and o is None) or torch.equal(e, o)
    y = kernels.triton_layer_norm(x.requires_grad_(), w, b)
    assert type(y.grad_fn).__name__ == "_LayerNormBackward"  # no custom-op dispatch on the eager path


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
    assert torch.equal(y, layer_norm_fwd(x, w, b, 1e-5)[0])


# ---- the backward's partial buffers: never zero-filled, so nothing may depend on what they held ----


@pytest.mark.usefixtures("rows")
@pytest.mark.parametrize("weight,bias", [(True, True), (True, False), (False, True)])
def test_gradients_do_not_depend_on_uninitialised_buffers(gen, tol, monkeypatch, weight, bias):
    # 29 rows over 4 persistent programs: every program's partial row takes a first write, then sums.
    x, w, b, dy = _data(gen, 29, 300, torch.float32, weight=weight, bias=bias)
    clean = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):  # every torch.empty of the LayerNorm path comes back full of NaN
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", nan_empty)
    dirty = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), x, w, b, dy)
    for c, d in zip(clean, dirty, strict=True):
        assert (c is None and d is None) or torch.equal(c, d)
    monkeypatch.undo()
    _assert_all_close(clean, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])


# ---- a long-lived worker: launches and bits never depend on the shapes it saw before ----


class _Recording:
    def __init__(self, kernel):
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]


def test_a_workers_shape_history_changes_neither_launch_nor_bits(gen, monkeypatch):
    # The shape history that once froze a persistent grid at the first M seen (and, for odd N, promised a
    # 16-byte alignment that later rows did not have): a first backward at M = 300, N = 1001 bf16 on a
    # 264-program grid, then a larger M; here a quarter of it (66 programs, M = 75 then 150) so the
    # interpreter stays quick. The second call must launch what a fresh worker launches, same bits.
    from kernels import layer_norm_op, layer_norm_triton

    monkeypatch.setattr(layer_norm_op, "persistent_programs", lambda device, per_sm=2: 66)
    layer_norm_op.PLANS.clear()
    data = {M: _data(gen, M, 1001, torch.bfloat16) for M in (75, 150)}
    fresh = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), *data[150])
    recorded = _Recording(layer_norm_triton._ln_bwd)
    monkeypatch.setattr(layer_norm_triton, "_ln_bwd", recorded)
    layer_norm_op.PLANS.clear()  # plans hold the kernel they were built with
    _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), *data[75])
    after = _grads(lambda *a: kernels.triton_layer_norm(*a, 1e-5), *data[150])
    cfg = layer_norm_op.bwd_launch(150, 1001, torch.device("cpu"))
    assert recorded.grids == [layer_norm_op.bwd_launch(75, 1001, torch.device("cpu")).grid, cfg.grid]
    rows = cfg.rows_per_program
    assert cfg.grid[0] * rows >= 150 and (cfg.grid[0] - 1) * rows < 150  # every row, no idle program
    assert all(torch.equal(f, a) for f, a in zip(fresh, after, strict=True))


# ---- the host path: one cached plan per (dtype, M, N, weight, bias, alignment) ----


class _Compiled:
    """A compiled kernel as the JIT returns it on a GPU: its runner takes every argument positionally."""

    def __init__(self, owner):
        self.owner = owner

    def run(self, *args):
        raise AssertionError("the Launcher calls the runner, not run")

    def __getitem__(self, grid):
        def runner(*args):
            self.owner.direct.append(args[0].data_ptr() % 16 == 0)
            self.owner.kernel[grid](*args)

        return runner


class _JitWithLauncher:
    """Stands in for a JITFunction on a GPU: each JIT launch returns a compiled kernel (interpreted here)."""

    def __init__(self, kernel):
        self.kernel, self.arg_names, self.jit, self.direct = kernel, kernel.arg_names, [], []

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.jit.append(args[0].data_ptr() % 16 == 0)
            self.kernel[grid](*args, **meta)
            return _Compiled(self)

        return launch


def test_a_misaligned_view_never_reuses_an_aligned_plan(gen, tol, monkeypatch):
    # Triton compiles a kernel for 16-byte-aligned pointers; the compiled kernel's runner must not be
    # handed a view 4 bytes off. Aligned, misaligned, aligned: two plans, each JIT-launched once.
    from kernels import layer_norm_op, layer_norm_triton

    fake = _JitWithLauncher(layer_norm_triton._ln_fwd)
    monkeypatch.setattr(layer_norm_triton, "_ln_fwd", fake)
    M, N = 5, 36
    buf = torch.randn(M * N + 4, generator=gen)
    views = {"aligned": buf[: M * N].view(M, N), "misaligned": buf[1 : M * N + 1].view(M, N)}
    assert views["aligned"].data_ptr() % 16 == 0 and views["misaligned"].data_ptr() % 16 == 4
    w, b = torch.randn(N, generator=gen), torch.randn(N, generator=gen)
    for name in ("aligned", "aligned", "misaligned", "misaligned", "aligned"):
        y = kernels.triton_layer_norm(views[name], w, b, 1e-5)
        want = _f64(views[name], w, b)
        torch.testing.assert_close(y.double(), want, atol=tol[torch.float32][0], rtol=tol[torch.float32][1])
    assert fake.jit == [True, False]  # one JIT launch (compile) per plan
    assert fake.direct == [True, False, True]  # then the plan's runner, never across alignments
    assert len([k for k in layer_norm_op.PLANS.plans if k[0] == "fwd"]) == 2


def test_without_grad_no_autograd_node_is_built(gen, tol):
    x, w, b, _ = _data(gen, 4, 37, torch.float32)
    y = kernels.triton_layer_norm(x, w.requires_grad_(), b, 1e-5)
    assert y.grad_fn is not None
    with torch.no_grad():
        y = kernels.triton_layer_norm(x, w, b, 1e-5)
    assert y.grad_fn is None and not y.requires_grad
    _assert_all_close([y], [_f64(x, w, b)], *tol[torch.float32])


# ---- measured dispatch: each side as its calibration chose ----


def _calibrated(monkeypatch, times):
    """A Calibrator whose fake timer returns `times` in the order the candidates are timed."""
    from kernels import dispatch, layer_norm_autograd

    clock = iter(times)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "test GPU")
    monkeypatch.setattr(layer_norm_autograd, "_DEVICE_NAMES", {})
    return dispatch.Calibrator(timer=lambda fn: next(clock), margin=0.05)


# candidates are timed torch, triton, triton/torch, torch/triton
TRAIN = [((2, 1, 3, 3), "triton"), ((2, 3, 1, 3), "triton/torch"), ((2, 3, 3, 1), "torch/triton"),
         ((1, 2, 2, 2), "torch"), ((1.0, 0.97, 2, 2), "torch")]  # fmt: skip


@pytest.mark.parametrize("times,side", TRAIN)
def test_dispatched_layer_norm_takes_the_measured_side_and_matches_float64(
    gen, tol, monkeypatch, times, side
):
    from kernels import layer_norm_autograd

    calibrator = _calibrated(monkeypatch, times)
    x, w, b, dy = _data(gen, 6, 37, torch.float32)
    got = _grads(lambda *a: layer_norm_autograd.dispatched_layer_norm(*a, 1e-5, calibrator), x, w, b, dy)
    _assert_all_close(got, _grads(_f64, x, w, b, dy.double()), *tol[torch.float32])
    assert calibrator.record() == {"test GPU | float32/train/N=37,M<=8": side}
    y = layer_norm_autograd.dispatched_layer_norm(x.requires_grad_(), w, b, 1e-5, calibrator)
    wrapped = type(y.grad_fn).__name__ == "_LayerNormBackward"
    assert wrapped == (side != "torch")  # torch chosen: F.layer_norm itself, no wrapper


@pytest.mark.parametrize("times,side", [((2, 1), "triton"), ((1, 2), "torch"), ((1.0, 0.99), "torch")])
def test_a_call_without_grad_uses_the_forward_choice_alone(gen, tol, monkeypatch, times, side):
    from kernels import layer_norm_autograd

    calibrator = _calibrated(monkeypatch, times)
    x, w, b, _ = _data(gen, 6, 37, torch.float32)
    with torch.no_grad():
        y = layer_norm_autograd.dispatched_layer_norm(x, w.requires_grad_(), b, 1e-5, calibrator)
    assert y.grad_fn is None
    _assert_all_close([y], [_f64(x, w, b)], *tol[torch.float32])
    assert calibrator.record() == {"test GPU | float32/infer/N=37,M<=8": side}  # no training path timed
