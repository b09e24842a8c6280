"""`kernels.layer_norm` / `ln_lstm_cell` dispatch: torch for CPU tensors, the backend setting, no triton."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kernels


def test_cpu_tensors_use_torch_and_match_f_layer_norm(gen):
    x = torch.randn(4, 33, generator=gen)
    w, b = torch.randn(33, generator=gen), torch.randn(33, generator=gen)
    assert kernels.backend_for(x) == "torch"
    torch.testing.assert_close(
        kernels.layer_norm(x, w, b, 1e-5), F.layer_norm(x, (33,), w, b, 1e-5), atol=0, rtol=0
    )


def test_ln_lstm_cell_on_cpu_is_the_differentiable_reference(gen):
    B, H = 3, 5
    hh, xx = torch.randn(B, 4 * H, generator=gen), torch.randn(B, 4 * H, generator=gen)
    cp = torch.randn(B, H, generator=gen)
    params = [torch.randn(4 * H, generator=gen).requires_grad_() for _ in range(5)]
    params += [torch.randn(H, generator=gen).requires_grad_() for _ in range(2)]
    h, c = kernels.ln_lstm_cell(hh, xx, cp, *params, 1e-5)
    hr, cr = kernels.ln_lstm_cell_reference(hh, xx, cp, *params, 1e-5)
    assert torch.equal(h, hr) and torch.equal(c, cr)
    (h.sum() + c.sum()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)


def test_reference_cell_follows_eq_20_written_out(gen):
    # The oracle itself, against the equations in float64: gates (f, i, o, g), LN with population variance.
    B, H, eps = 2, 3, 1e-5
    hh, xx = torch.randn(B, 4 * H, generator=gen).double(), torch.randn(B, 4 * H, generator=gen).double()
    cp = torch.randn(B, H, generator=gen).double()
    gh, bh, gx, bx, b = (torch.randn(4 * H, generator=gen).double() for _ in range(5))
    gc, bc = (torch.randn(H, generator=gen).double() for _ in range(2))

    def ln(a, g, s):
        mu = a.sum(-1, keepdim=True) / a.shape[-1]
        sigma = (((a - mu) ** 2).sum(-1, keepdim=True) / a.shape[-1] + eps).sqrt()
        return g * (a - mu) / sigma + s

    a = ln(hh, gh, bh) + ln(xx, gx, bx) + b
    f, i, o, g = (
        a[:, :H].sigmoid(),
        a[:, H : 2 * H].sigmoid(),
        a[:, 2 * H : 3 * H].sigmoid(),
        a[:, 3 * H :].tanh(),
    )
    c = f * cp + i * g
    h = o * ln(c, gc, bc).tanh()
    hr, cr = kernels.ln_lstm_cell_reference(hh, xx, cp, gh, bh, gx, bx, b, gc, bc, eps)
    torch.testing.assert_close(hr, h, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(cr, c, atol=1e-12, rtol=1e-12)


def test_gru_reference_follows_eq_26_written_out(gen):
    B, H, eps = 2, 3, 1e-5
    zr_h, zr_x = (torch.randn(B, 2 * H, generator=gen).double() for _ in range(2))
    wx, uh, hp = (torch.randn(B, H, generator=gen).double() for _ in range(3))
    g1, b1, g2, b2 = (torch.randn(2 * H, generator=gen).double() for _ in range(4))
    g3, b3, g4, b4 = (torch.randn(H, generator=gen).double() for _ in range(4))

    def ln(a, g, s):
        mu = a.mean(-1, keepdim=True)
        return g * (a - mu) / (((a - mu) ** 2).mean(-1, keepdim=True) + eps).sqrt() + s

    zr = ln(zr_h, g1, b1) + ln(zr_x, g2, b2)
    z, r = zr[:, :H].sigmoid(), zr[:, H:].sigmoid()
    h = (1 - z) * hp + z * (ln(wx, g3, b3) + r * ln(uh, g4, b4)).tanh()
    args = (zr_h, zr_x, wx, uh, hp, g1, b1, g2, b2, g3, b3, g4, b4, eps)
    torch.testing.assert_close(kernels.ln_gru_cell_reference(*args), h, atol=1e-12, rtol=1e-12)
    assert torch.equal(kernels.ln_gru_cell(*args), kernels.ln_gru_cell_reference(*args))  # CPU ⇒ torch


def test_check_backend_validates_and_torch_forces_torch(gen):
    with pytest.raises(ValueError, match="use 'auto', 'torch' or 'triton'"):
        kernels.check_backend("cuda")
    assert kernels.check_backend("torch") == "torch"
    assert kernels.backend_for(torch.zeros(2), "torch") == "torch"
    if torch.cuda.is_available():
        assert kernels.backend_for(torch.zeros(2, device="cuda"), "torch") == "torch"
    assert kernels.backend_for(torch.zeros(2)) == "torch"  # CPU tensors always get torch


def test_package_imports_and_falls_back_without_triton():
    # A CPU-only install may lack triton: import kernels with triton blocked and use both entry points.
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, kernels\n"
        "assert not kernels.triton_available()\n"
        "x = torch.randn(2, 8)\n"
        "assert kernels.backend_for(x) == 'torch'\n"
        "y = kernels.layer_norm(x, None, None, 1e-5)\n"
        "h, c = kernels.ln_lstm_cell(torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 2),"
        " *[torch.ones(8)] * 5, torch.ones(2), torch.zeros(2), 1e-5)\n"
        "try:\n    kernels.check_backend('triton')\nexcept ValueError as e:\n    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "refused: kernel backend 'triton' needs the triton package" in out.stdout


# ---- the measured LayerNorm dispatch (kernels/dispatch.py), driven by a fake timer ----


class _FakeTimer:
    """Seconds per call by candidate name; records the order candidates were timed in."""

    def __init__(self, **seconds):
        self.seconds, self.timed = seconds, []

    def __call__(self, fn):
        self.timed.append(fn.name)
        return self.seconds[fn.name]


def _sides(*names):
    """Candidates that a timer may time but that must never run here."""

    def side(name):
        def never_called():
            raise AssertionError("a timer measures, it does not need to run the side here")

        never_called.name = name
        return never_called

    return {name: side(name) for name in names}


def test_the_faster_side_is_chosen_and_measured_once_per_key(tmp_path):
    from kernels.dispatch import Calibrator

    timer = _FakeTimer(triton=2e-6, torch=5e-6)
    cal = Calibrator(timer=timer, cache_dir=tmp_path)
    assert cal.choose("H200", "bfloat16/infer/N=4096,M<=8192", _sides("torch", "triton")) == "triton"
    assert cal.choose("H200", "bfloat16/infer/N=4096,M<=8192", _sides("torch", "triton")) == "triton"
    assert timer.timed == ["torch", "triton"]  # the second call is a cache hit
    timer.seconds = {"triton": 9e-6, "torch": 5e-6}
    assert cal.choose("H200", "bfloat16/train/N=4096,M<=8192", _sides("torch", "triton")) == "torch"
    measured = cal.measured["bfloat16/train/N=4096,M<=8192"]
    assert (measured["triton"], measured["torch"]) == (9e-6, 5e-6) and measured["first_use_s"] >= 0
    assert cal.record() == {
        "H200 | bfloat16/infer/N=4096,M<=8192": "triton",
        "H200 | bfloat16/train/N=4096,M<=8192": "torch",
    }


@pytest.mark.parametrize(
    "triton_s,chosen",
    [(100e-6, "torch"), (96e-6, "torch"), (95.5e-6, "torch"), (94e-6, "triton"), (50e-6, "triton")],
)
def test_a_challenger_must_beat_torch_by_the_margin(triton_s, chosen):
    # N = 2041's backward once froze 159 vs 155 µs: a tie within the timer's noise keeps torch.
    from kernels.dispatch import Calibrator

    cal = Calibrator(timer=_FakeTimer(torch=100e-6, triton=triton_s), margin=0.05)
    assert cal.choose("H200", "k", _sides("torch", "triton")) == chosen


def test_the_fastest_of_several_challengers_is_weighed_against_torch():
    from kernels.dispatch import Calibrator

    timer = _FakeTimer(**{"torch": 10.0, "triton": 9.8, "triton/torch": 8.0, "torch/triton": 9.0})
    cal = Calibrator(timer=timer, margin=0.05)
    assert cal.choose("H200", "k", _sides(*timer.seconds)) == "triton/torch"
    tie = _FakeTimer(**{"torch": 10.0, "triton": 9.7, "triton/torch": 9.9, "torch/triton": 9.6})
    assert Calibrator(timer=tie, margin=0.05).choose("H200", "k", _sides(*tie.seconds)) == "torch"


def test_choices_persist_per_device_model_and_a_new_process_does_not_measure(tmp_path):
    from kernels.dispatch import Calibrator

    Calibrator(timer=_FakeTimer(triton=1.0, torch=2.0), cache_dir=tmp_path).choose(
        "NVIDIA H200", "k", _sides("torch", "triton")
    )
    later = _FakeTimer(triton=2.0, torch=1.0)
    again = Calibrator(timer=later, cache_dir=tmp_path)
    assert again.choose("NVIDIA H200", "k", _sides("torch", "triton")) == "triton"  # read from the file
    assert later.timed == []
    assert again.choose("NVIDIA A100", "k", _sides("torch", "triton")) == "torch"  # another GPU measures
    assert len(later.timed) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "layer_norm_NVIDIA_A100.json",
        "layer_norm_NVIDIA_H200.json",
    ]


def test_a_new_kernel_source_or_toolchain_measures_again(tmp_path):
    # The cache key carries a hash of the kernel sources and the Triton/torch versions: an improved kernel
    # must not inherit the 'torch' choices its predecessor earned.
    from kernels.dispatch import Calibrator, fingerprint

    old = fingerprint("def _ln_fwd(): v1", "triton 3.6.0", "torch 2.11")
    assert old == fingerprint("def _ln_fwd(): v1", "triton 3.6.0", "torch 2.11")
    changed = [
        fingerprint("def _ln_fwd(): v2", "triton 3.6.0", "torch 2.11"),
        fingerprint("def _ln_fwd(): v1", "triton 3.7.0", "torch 2.11"),
        fingerprint("def _ln_fwd(): v1", "triton 3.6.0", "torch 2.12"),
    ]
    assert len({old, *changed}) == 4
    Calibrator(timer=_FakeTimer(triton=2.0, torch=1.0), cache_dir=tmp_path, fingerprint=old).choose(
        "H200", "k", _sides("torch", "triton")
    )
    same = _FakeTimer(triton=1.0, torch=2.0)
    assert (
        Calibrator(timer=same, cache_dir=tmp_path, fingerprint=old).choose(
            "H200", "k", _sides("torch", "triton")
        )
        == "torch"
        and same.timed == []
    )
    for new in changed:
        timer = _FakeTimer(triton=1.0, torch=2.0)
        cal = Calibrator(timer=timer, cache_dir=tmp_path, fingerprint=new)
        assert cal.choose("H200", "k", _sides("torch", "triton")) == "triton" and len(timer.timed) == 2


def test_the_layer_norm_fingerprint_hashes_its_sources_and_versions(monkeypatch):
    pytest.importorskip("triton")
    import triton

    from kernels import layer_norm_autograd

    before = layer_norm_autograd.source_fingerprint()
    monkeypatch.setattr(triton, "__version__", triton.__version__ + ".post1")
    assert layer_norm_autograd.source_fingerprint() != before
    monkeypatch.setattr(layer_norm_autograd.inspect, "getsource", lambda m: f"{m.__name__} edited")
    assert layer_norm_autograd.source_fingerprint() != before


def test_a_stored_choice_that_is_no_longer_a_candidate_is_measured_again(tmp_path):
    from kernels.dispatch import Calibrator

    (tmp_path / "layer_norm_H200.json").write_text('{"k": "fastest"}')
    timer = _FakeTimer(triton=3.0, torch=1.0)
    cal = Calibrator(timer=timer, cache_dir=tmp_path)
    assert cal.choose("H200", "k", _sides("torch", "triton")) == "torch"
    assert len(timer.timed) == 2


def test_a_corrupt_cache_file_is_measured_again_not_trusted(tmp_path):
    from kernels.dispatch import Calibrator

    (tmp_path / "layer_norm_H200.json").write_text('{"k": "triton", "j": "fastest"')  # torn write
    timer = _FakeTimer(triton=3.0, torch=1.0)
    cal = Calibrator(timer=timer, cache_dir=tmp_path)
    assert cal.choose("H200", "k", _sides("torch", "triton")) == "torch" and len(timer.timed) == 2
    assert Calibrator(timer=_FakeTimer(), cache_dir=tmp_path)._known("H200") == {"k": "torch"}


def test_nothing_is_read_or_written_at_import_or_without_a_cache_dir(tmp_path, monkeypatch):
    # The calibrator is built at the edge with its folder; the module reads no environment variable.
    from kernels.dispatch import Calibrator

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    Calibrator(timer=_FakeTimer(triton=1.0, torch=2.0)).choose("H200", "k", _sides("torch", "triton"))
    assert list(tmp_path.iterdir()) == []


def test_shape_classes_keep_n_exact_and_bucket_m():
    from kernels.dispatch import shape_class

    assert shape_class(1000, 4099) == "N=4099,M<=1024"
    assert shape_class(1024, 4099) == shape_class(513, 4099) != shape_class(1025, 4099)
    assert shape_class(1, 7) == "N=7,M<=1"
