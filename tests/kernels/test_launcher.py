"""The LayerNorm host path without a GPU: the launcher cache (kernels/launcher.py), the backward's
co-resident grid and the size-aware dispatch of `kernels.layer_norm`."""

import itertools

import pytest
import torch

import kernels

triton = pytest.importorskip("triton")

from kernels import launcher as L  # noqa: E402  (needs triton only for its hooks, looked up lazily)


def _samples():
    base = torch.zeros(64)
    ints = [0, 1, 2, 15, 16, 17, 32, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**40, 2**63 - 1, 2**63]
    tensors = [
        base,
        base[1:],
        base[4:],
        base[4:].half(),
        torch.zeros(8, dtype=torch.bfloat16),
        torch.zeros(8, dtype=torch.bfloat16)[3:],
        torch.zeros(8, dtype=torch.int64),
    ]
    return tensors, ints + [0.5, 1.0, 1e-5, True, False, None]


def test_equal_launch_keys_mean_equal_triton_specializations():
    # A key that mapped two arguments Triton compiles differently to one cache entry would launch the wrong
    # binary: every pair of sample arguments with equal keys must have equal native specializations.
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    tensors, scalars = _samples()
    for group, n in ((tensors, 1), (scalars, 0)):
        for a, b in itertools.combinations(group, 2):
            if L.spec_key((a,), n) == L.spec_key((b,), n):
                assert native_specialize_impl(BaseBackend, a, False, True, True) == native_specialize_impl(
                    BaseBackend, b, False, True, True
                ), (a, b)
    # and it tells apart what Triton tells apart
    assert L.spec_key((1,), 0) != L.spec_key((2,), 0) != L.spec_key((16,), 0)
    assert L.spec_key((2**31 - 1,), 0) != L.spec_key((2**31,), 0)
    assert L.spec_key((tensors[0],), 1) != L.spec_key((tensors[1],), 1)


class _Compiled:
    function = "fn"
    packed_metadata = "meta"

    def __init__(self, calls):
        self.calls = calls

    def run(self, *a):
        self.calls.append(("direct", a))


class _FakeJIT:
    """kernel[grid](*args, **meta) as Triton's JIT: records the call and returns its compiled kernel."""

    arg_names = ("X", "Y", "n", "eps", "BLOCK", "FLAG")

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.calls.append(("jit", grid, args, meta))
            return _Compiled(self.calls)

        return launch


def test_launcher_calls_the_compiled_launcher_directly_after_the_first_call(monkeypatch):
    monkeypatch.setattr(L, "_stream", lambda device: 7)
    jit = _FakeJIT()
    launch = L.Launcher(jit, 2)
    x, y = torch.zeros(32), torch.zeros(32)
    meta = {"BLOCK": 32, "FLAG": True, "num_warps": 4}

    launch((3,), (x, y, 32, 1e-5), ("cfg",), **meta)
    assert [c[0] for c in jit.calls] == ["jit"]
    launch((5, 2), (y, x, 48, 1e-3), ("cfg",), **meta)  # same specialization: other values, same key
    kind, args = jit.calls[-1]
    assert kind == "direct"
    # the JIT's launch line: grid, stream, function, metadata, no hooks, then every argument in order
    # (the constexprs from meta, in signature order; num_warps is an option, not an argument)
    assert args == (5, 2, 1, 7, "fn", "meta", None, None, None, y, x, 48, 1e-3, 32, True)
    # a different specialization goes through the JIT again: an unaligned pointer, an int no longer a
    # multiple of 16, another dtype, another launch configuration
    for args, key in (
        ((x[1:], y, 32, 1e-5), ("cfg",)),
        ((x, y, 33, 1e-5), ("cfg",)),
        ((x.double(), y, 32, 1e-5), ("cfg",)),
        ((x, y, 32, 1e-5), ("other",)),
    ):
        n = len(jit.calls)
        launch((1,), args, key, **meta)
        assert jit.calls[n][0] == "jit"
    assert L.stats["direct"] >= 1 and L.stats["jit"] >= 5


def test_launcher_keeps_the_jit_path_while_a_launch_hook_is_registered(monkeypatch):
    from triton import knobs

    monkeypatch.setattr(L, "_stream", lambda device: 0)
    jit = _FakeJIT()
    launch = L.Launcher(jit, 2)
    x = torch.zeros(16)
    meta = {"BLOCK": 16, "FLAG": False}
    launch((1,), (x, x, 16, 0.1), "k", **meta)
    hooks = knobs.runtime.launch_enter_hook

    def hook(metadata):
        return None

    if hasattr(hooks, "add"):
        hooks.add(hook)
        try:
            launch((1,), (x, x, 16, 0.1), "k", **meta)
        finally:
            hooks.remove(hook)
    else:  # an older triton: the hook is a plain attribute
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", hook)
        launch((1,), (x, x, 16, 0.1), "k", **meta)
        monkeypatch.undo()
        monkeypatch.setattr(L, "_stream", lambda device: 0)
    assert [c[0] for c in jit.calls] == ["jit", "jit"]  # the profiler's hook sees the launch
    launch((1,), (x, x, 16, 0.1), "k", **meta)
    assert jit.calls[-1][0] == "direct"


def test_a_kernel_the_jit_does_not_return_is_never_cached():
    class Interpreted:  # TRITON_INTERPRET=1: the launch returns nothing
        arg_names = ("X",)

        def __init__(self):
            self.n = 0

        def __getitem__(self, grid):
            def launch(*a, **k):
                self.n += 1

            return launch

    k = Interpreted()
    launch = L.Launcher(k, 1)
    for _ in range(3):
        launch((1,), (torch.zeros(4),), None)
    assert k.n == 3 and not launch.cache


def test_co_resident_blocks_follow_registers_threads_and_shared_memory():
    from kernels.layer_norm_op import SM, co_resident

    h200 = SM(132)
    assert co_resident(64, 8, 0, h200) == 4  # 64 regs × 256 threads: 16K registers a block
    assert co_resident(32, 4, 0, h200) == 16  # threads allow 16 blocks of 128, registers too
    assert co_resident(255, 32, 0, h200) == 1  # does not fit twice (and never fewer than 1)
    assert co_resident(40, 8, 0, h200) == 6  # 40 → 1280 registers a warp: 51 warps → 6 blocks of 8
    assert co_resident(32, 4, 100 * 1024, h200) == 2  # shared memory (+1 KiB reserved each) decides
    assert co_resident(16, 1, 0, h200) == 32  # the per-SM block limit


def test_backward_grid_is_one_wave_of_co_resident_programs():
    from kernels.layer_norm_op import Launch, resident_grid

    resident = Launch("resident", 1024, 4, 8, 0)
    assert resident_grid(resident, 65536, 3, 132) == 396
    assert resident_grid(resident, 40, 3, 132) == 10  # one program per 4-row group, no idle ones
    split = Launch("split", 4096, 1, 16, 0, SEGMENTS=4)
    assert resident_grid(split, 65536, 2, 132) == 66  # one wave over all segments: 264 / 4 per segment
    assert resident_grid(split, 50, 2, 132) == 50  # no program without a row
    shifted = Launch("shifted", 8192, 1, 16, 0)
    assert resident_grid(shifted, 4096, 1, 132) == 128  # a multiple of 8
    assert resident_grid(shifted, 5, 1, 132) == 5


class _RecordingOp:
    def __init__(self):
        self.calls = 0

    def triton_layer_norm(self, x, w, b, eps):
        self.calls += 1
        return x


@pytest.mark.parametrize("forced", ["auto", "triton"])
def test_layer_norm_dispatches_to_torch_below_the_size_line(monkeypatch, forced):
    # CPU tensors stand in for CUDA ones: backend_for says 'triton', the Triton op is a recorder.
    op = _RecordingOp()
    monkeypatch.setattr(kernels, "backend_for", lambda x: "triton")
    monkeypatch.setattr(kernels, "_ln_op", lambda: op)
    kernels.set_backend(forced)
    n = kernels.LN_TRITON_MIN_ELEMS
    small = torch.randn(n // 512 - 1, 512)  # just below the line
    w, b = torch.randn(512), torch.randn(512)
    y = kernels.layer_norm(small, w, b, 1e-5)
    if forced == "auto":
        assert op.calls == 0 and kernels.ln_backend_for(small) == "torch"
        want = torch.nn.functional.layer_norm(small, (512,), w, b, 1e-5)
        torch.testing.assert_close(y, want, atol=0, rtol=0)
    else:  # a forced backend is what it says, at any size (the tests and the benchmark use it)
        assert op.calls == 1 and kernels.ln_backend_for(small) == "triton"
    big = torch.empty(n // 512, 512)  # exactly on the line: Triton
    kernels.layer_norm(big, w, b, 1e-5)
    assert op.calls == (1 if forced == "auto" else 2) and kernels.ln_backend_for(big) == "triton"


def test_the_size_line_is_where_host_time_stops_hiding_gpu_time():
    # The constant's reasoning (kernels/__init__.py): a bf16 forward at the line moves ≥ 16 MB, ≥ 3 µs at
    # the H200's 4.8 TB/s, as much GPU time as an eager torch call's host time; far below, host time rules.
    assert 2**20 <= kernels.LN_TRITON_MIN_ELEMS <= 2**26
    assert 4 * kernels.LN_TRITON_MIN_ELEMS / 4.8e12 >= 3e-6


@pytest.mark.gpu
def test_on_a_gpu_repeat_calls_take_the_direct_launch_and_give_the_same_bits():
    from kernels import layer_norm_op as op

    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    first = torch.autograd.grad(kernels.triton_layer_norm(x, w, b), (x, w, b), dy)
    before = dict(L.stats)
    again = torch.autograd.grad(kernels.triton_layer_norm(x, w, b), (x, w, b), dy)
    assert L.stats["jit"] == before["jit"] and L.stats["direct"] >= before["direct"] + 3  # fwd, bwd, sum
    assert all(torch.equal(a, c) for a, c in zip(first, again, strict=True))  # deterministic
    # the backward's grid: one wave of co-resident programs
    cfg = op._bwd_launch(4096, 1024, x.device)
    P = op._GRIDS[("_ln_bwd_resident", (cfg, True, True), torch.bfloat16, torch.bfloat16, x.device)]
    assert 1 <= P <= 32 * torch.cuda.get_device_properties(0).multi_processor_count
    # below the size line, kernels.layer_norm is F.layer_norm itself
    small = torch.randn(64, 768, device="cuda", dtype=torch.bfloat16)
    w2, b2 = (
        torch.randn(768, device="cuda", dtype=torch.bfloat16),
        torch.randn(768, device="cuda", dtype=torch.bfloat16),
    )
    assert kernels.ln_backend_for(small) == "torch"
    assert torch.equal(
        kernels.layer_norm(small, w2, b2, 1e-5), torch.nn.functional.layer_norm(small, (768,), w2, b2, 1e-5)
    )


@pytest.mark.gpu
def test_on_a_gpu_the_long_row_forward_is_persistent_and_matches_torch():
    from kernels import layer_norm_op as op

    x = torch.randn(3000, 32768, device="cuda", dtype=torch.bfloat16)
    w, b = torch.ones(32768, device="cuda"), torch.zeros(32768, device="cuda")
    y = kernels.triton_layer_norm(x, w, b)
    cfg = op._fwd_launch(3000, 32768, 0)
    P = op._GRIDS[("_ln_fwd_looped", (cfg, True, True), torch.bfloat16, torch.float32, x.device)]
    assert P < 3000  # fewer programs than rows: each walks several
    ref = torch.nn.functional.layer_norm(x.float(), (32768,), w, b, 1e-5)
    torch.testing.assert_close(y.float(), ref, atol=3e-2, rtol=3e-2)
