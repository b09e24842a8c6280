"""Kernel test kit: where the Triton kernels can run here, seeded data, stated tolerances.

TRITON_INTERPRET=1 must be set before triton itself is imported (triton's own `tl.sum` & co. are
`@triton.jit` functions, and triton imports more of itself lazily later), so this process never sets
it: on a CPU machine `test_interpreter_suite.py` and `test_interpreter_suite_seq.py` run the
interpreter tests in child pytests with the variable set, and the rest of the suite keeps an unchanged
environment. Running
`TRITON_INTERPRET=1 pytest tests/kernels` directly runs them in-process too. With CUDA nothing is
interpreted: the `gpu` tests use the compiled kernels and the interpreter tests skip.
"""

import importlib
import importlib.util
import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
HAS_TRITON = importlib.util.find_spec("triton") is not None
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1" and HAS_TRITON and not HAS_CUDA
# Not interpreted here: the child pytests of test_interpreter_suite*.py run these files (on CPU), or the gpu
# tests cover the compiled kernels (on CUDA). Left out of this collection instead of skip lines.
INTERP_FILES = [
    "test_layer_norm_interp.py",
    "test_lstm_interp.py",
    "test_lstm_seq_interp.py",
    "test_gru_interp.py",
    "test_gru_seq_interp.py",
    "test_graphs_interp.py",
]
collect_ignore = [] if INTERPRETED else INTERP_FILES


def pytest_collection_modifyitems(config, items):
    """Our tests marked `gpu` skip cleanly on machines without CUDA."""
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    here = os.path.dirname(__file__)
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA and str(item.path).startswith(here):
            item.add_marker(skip)


@pytest.fixture
def interp():
    """Skips unless the Triton kernels run under the interpreter in this process."""
    if HAS_CUDA:
        pytest.skip("CUDA is available: the gpu tests cover the compiled kernels")
    if not INTERPRETED:
        pytest.skip("runs in the TRITON_INTERPRET=1 child pytests of test_interpreter_suite*.py")
    kernel = importlib.import_module("kernels.layer_norm_triton")._ln_fwd
    assert type(kernel).__name__ == "InterpretedFunction", "kernels imported before TRITON_INTERPRET was set"


@pytest.fixture
def tol():
    """Stated tolerances (atol, rtol) per activation dtype, against a float64 oracle on the same inputs."""
    return {torch.float32: (2e-5, 2e-5), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)}


@pytest.fixture
def gen():
    """A seeded CPU generator: every test draws its own reproducible data."""
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def fused_vs_torch(monkeypatch):
    """run(cell, x, hidden, force=False, repeats=1) -> (fused runs, torch run, fused calls).

    Builds the engine's LN-LSTM or LN-GRU layer ('lstm' / 'gru') for x (T, B, D) on x's device, its
    parameters moved off their initial values by a seeded 0.1·N(0, 1), runs it once with the kernels
    forced to torch and `repeats` times with the default backend, counting calls of the fused sequence
    (`kernels.<cell>_seq_op.triton_ln_<cell>_sequence`); each run is [output, every parameter's grad] for a
    fixed non-uniform upstream gradient. `force`: CPU tensors under the interpreter, where the fused path
    is taken only if `backend_for` is made to say 'triton'.
    """
    import importlib

    import kernels

    def run_both(cell, x, hidden, force=False, repeats=1):
        recurrent = pytest.importorskip("workers.engine.recurrent")
        EngineOptions = pytest.importorskip("workers.engine.options").EngineOptions
        seq_op = importlib.import_module(f"kernels.{cell}_seq_op")
        torch.manual_seed(0)
        layer = {"lstm": recurrent.LSTMLayer, "gru": recurrent.GRULayer}[cell](
            x.shape[-1], hidden, norm="layer"
        ).to(x.device)
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(0.1 * torch.randn(p.shape).to(x.device))

        def once(backend):
            layer.engine_options = EngineOptions(kernel_backend=backend)
            layer.zero_grad()
            out = layer(x)
            (out * torch.linspace(-1, 1, out.numel(), device=x.device).view_as(out)).sum().backward()
            return [out.detach()] + [p.grad.clone() for p in layer.parameters()]

        ref = once("torch")
        calls = []
        name = f"triton_ln_{cell}_sequence"
        real = getattr(seq_op, name)
        monkeypatch.setattr(seq_op, name, lambda *a, **k: calls.append(1) or real(*a, **k))
        if force:
            monkeypatch.setattr(kernels, "backend_for", lambda t, backend="auto": "triton")
        return [once("auto") for _ in range(repeats)], ref, len(calls)

    return run_both


@pytest.fixture
def sequence_inputs(gen):
    """make(cell, T, B, H, dtype=float64) -> the inputs of `triton_ln_<cell>_sequence`, drawn from `gen` in
    float64 (off-centre, scaled like trained values), then cast to dtype:
    'lstm': ax (T, B, 4H), w_h (4H, H), its seven parameters, h0, c0;
    'gru': ax (T, B, 3H) = [zr_x | wx], w_rec = [W_h; U] (3H, H), its eight parameters, h0."""

    def draw(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift

    def make(cell, T, B, H, dtype=torch.float64):
        if cell == "lstm":
            ins = [
                draw(T, B, 4 * H, scale=2, shift=0.5),
                draw(4 * H, H, scale=H**-0.5),
                draw(4 * H, scale=0.3, shift=1),
                draw(4 * H, scale=0.2),
                draw(4 * H, scale=0.3, shift=1),
                draw(4 * H, scale=0.2),
                draw(4 * H, scale=0.5),
                draw(H, scale=0.3, shift=1),
                draw(H, scale=0.2),
                draw(B, H, scale=0.5),
                draw(B, H),
            ]
        else:
            ins = [
                draw(T, B, 3 * H, scale=2, shift=0.5),
                draw(3 * H, H, scale=H**-0.5),
                draw(2 * H, scale=0.3, shift=1),
                draw(2 * H, scale=0.2),
                draw(2 * H, scale=0.3, shift=1),
                draw(2 * H, scale=0.2),
                draw(H, scale=0.3, shift=1),
                draw(H, scale=0.2),
                draw(H, scale=0.3, shift=1),
                draw(H, scale=0.2),
                draw(B, H, scale=0.5),
            ]
        return [t.to(dtype) for t in ins]

    return make


@pytest.fixture
def emulated_graphs():
    """kernels.graphs with emulated replays on CPU tensors and no entries; yields counts() -> the change in
    graphs.stats (captures, replays, eager, failed) since the test began. Cleared and switched off after."""
    from kernels import graphs

    graphs.clear()
    graphs.emulate(True)
    before = dict(graphs.stats)
    yield lambda: {k: graphs.stats[k] - before[k] for k in before}
    graphs.emulate(False)
    graphs.clear()
