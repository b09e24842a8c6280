"""float32 matrix products on the CPU through oneDNN, for the LSTM's hot path, on CPUs where MKL is slow.

torch's CPU `mm` for float32 calls MKL, and MKL takes its generic code path on non-Intel CPUs: on this
project's AMD EPYC machines oneDNN's inner product, which torch ships and uses for its own `nn.LSTM`, ran
the LSTM's products 2.1–2.5× faster (32×256 · 256×1024: 51 vs 108 µs; 2048×256 · 256×1024: 2.3 vs 5.7 ms,
2 threads). On an Intel Xeon (AVX-512) it is the other way round: MKL won every product of the LSTM
benchmark's shapes, 1 thread (2048×128 · 128×512: 1.38 vs 1.52 ms; its weight gradient 1.56 vs 1.98 ms; a
per-step 32×512 · 512×128: 24 vs 41 µs), so by default ('auto') the path is on only off Intel CPUs
(`preferred()`, read from the CPU's vendor, so a machine always takes the same path and its runs stay
bit-reproducible). The recurrence packs W_h once per call of the sequence (0.1–0.4 ms) for its per-step
products; a product used once takes the weight as it is.

Only float32 CPU tensors take this path; float64 (the engine's exactness tests) and every other dtype or
device use torch's own products. Results differ from MKL's in the last bits (another summation order)
but are bitwise the same run to run and for 1 or 2 threads (tested), so the engine stays deterministic.
NORMLAB_ONEDNN (Settings.onednn) = auto (default), true (on wherever supported) or false (off), e.g. for
A/B runs: `train()` calls `configure(settings.onednn)`; until something configures it the path follows
Settings' default. Nothing is probed at import; `available()` says whether the path is on.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from normlab.settings import Settings

_OPS = getattr(torch.ops, "mkldnn", None)
_supported: bool | None = None  # the probe's answer, once asked
_enabled: bool | None = None  # set by configure(); None: not configured yet


def supported() -> bool:
    """Whether this torch's oneDNN ops exist and run (probed once, on first call)."""
    global _supported
    if _supported is None:
        _supported = _probe()
    return _supported


def configure(enabled: bool | str) -> bool:
    """Switch the path on (True: where supported; "auto": where also `preferred()`) or off for this
    process; returns whether it is on."""
    global _enabled
    if enabled not in (True, False, "auto"):
        raise ValueError(f"onednn must be true, false or 'auto' (got {enabled!r})")
    _enabled = bool(enabled) and supported() and (enabled is True or preferred())
    return _enabled


@contextlib.contextmanager
def forced(on: bool):
    """The path on (where supported) or off inside the block, then as it was (A/B measurements, tests)."""
    global _enabled
    before = _enabled
    _enabled = on and supported()
    try:
        yield _enabled
    finally:
        _enabled = before


def cpu_vendor() -> str:
    """The CPU's vendor string (GenuineIntel, AuthenticAMD, …), or "" where /proc/cpuinfo does not say."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def preferred() -> bool:
    """Whether oneDNN is the faster of the two here: off Intel CPUs (on them MKL is; see above)."""
    return cpu_vendor() != "GenuineIntel"


def _probe() -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    try:  # the private ops exist in every torch we support; check they run before trusting them
        a, w = torch.ones(2, 3), torch.ones(4, 3)
        packed = _OPS._reorder_linear_weight(w, 2)
        out = _OPS._linear_pointwise(a, packed, None, "none", [], "")
        return bool(torch.equal(out, torch.full((2, 4), 3.0)))
    except (AttributeError, RuntimeError):
        return False


def available() -> bool:
    """Whether the path is on (configured, else Settings' default)."""
    if _enabled is None:
        return configure(Settings.model_fields["onednn"].default)
    return _enabled


def applies(*tensors: torch.Tensor) -> bool:
    """Whether these tensors take the oneDNN path (float32, CPU, oneDNN on)."""
    return available() and all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)


# A recurrence's per-step products x (B, K) · Wᵀ (K, N) go through oneDNN only from B ≥ 8 rows and K ≥ 256:
# below, a oneDNN call's fixed cost (≈ 25 µs here, 1 thread, AVX2 VM) exceeds what its kernel saves, and
# torch.mm is faster. Measured per product, 1 thread: B=1 K=128 (W 512×128) 34 µs vs 8 µs for torch.mm,
# B=8 K=128 35 vs 20, B=32 K=128 65 vs 52, B=1 K=256 49 vs 22; B=8 K=256 66 vs 92, B=32 K=256 197 vs 251.
# (Equal multiply-adds, B=32 K=128 and B=8 K=256, fall on opposite sides: rows and depth, not their
# product, decide.) Whole LN-LSTM fwd+bwd at B=1 H=128: 5.7 → 3.2 ms (`normlab bench lstm`).
MIN_STEP_ROWS, MIN_STEP_DEPTH = 8, 256


def per_step(rows: int, weight: torch.Tensor) -> bool:
    """Whether a per-step product of `rows` rows with `weight` (N, K) is large enough for oneDNN."""
    return rows >= MIN_STEP_ROWS and weight.shape[1] >= MIN_STEP_DEPTH


def pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """`weight` (N, K; any strides) packed for products x (rows, K) → x·weightᵀ (rows, N)."""
    return _OPS._reorder_linear_weight(weight.detach(), rows)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x · weightᵀ, with `weight` packed by `pack` or a plain (N, K) tensor. No autograd."""
    return _OPS._linear_pointwise(x, weight, None, "none", [], "")


def linear_add(x: torch.Tensor, other: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x · weightᵀ + other, the addition fused into the product. No autograd."""
    return _OPS._linear_pointwise.binary(x, other, weight, None, "add")


def weight_grad(d_out: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """d_outᵀ · inputs for d_out (M, N) and inputs (M, K): the (N, K) gradient of a weight.

    Computed as (inputsᵀ · d_out)ᵀ with d_out read in place as the product's (N, M) weight: a transposed
    copy of the large d_out (2048×1024 here) cost 1.9–4.6 ms, more than the product itself.
    """
    return linear(inputs.t().contiguous(), d_out.t()).t().contiguous()


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        x2 = x.reshape(-1, x.shape[-1])
        out = linear(x2, weight)  # used once: packing would cost more than it saves
        if bias is not None:
            out.add_(bias)
        return out.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, d_out):
        x, weight = ctx.saved_tensors
        d2 = d_out.reshape(-1, weight.shape[0])
        x2 = x.reshape(-1, x.shape[-1])
        d_x = d_w = d_b = None
        # With create_graph (the probes' Fisher- and Hessian-vector products) this backward is itself
        # differentiated: torch's products then, since oneDNN's ops have no derivatives
        twice = torch.is_grad_enabled()
        if ctx.needs_input_grad[0]:
            d_x = (d2.mm(weight) if twice else linear(d2, weight.t())).view(x.shape)
        if ctx.needs_input_grad[1]:
            d_w = d2.t().mm(x2) if twice else weight_grad(d2, x2)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            d_b = d2.sum(0)
        return d_x, d_w, d_b


# Products with fewer rows than this go through F.linear: a oneDNN call costs ≈ 10 µs of fixed overhead
# (torch.mm 1.7 µs) and this autograd Function more, which a batch of 32 rows does not earn back
# (digits' MLP: 1,624 steps/s through F.linear, 1,243 through oneDNN); the LSTMs' products over all time
# steps (T·B rows) gain 1.2-2.5x, even adding's 2-wide input (62 vs 49 steps/s), where a threshold on
# multiply-adds would have sent it to F.linear.
MIN_ROWS = 256


def fast_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, through oneDNN (forward and backward) for large float32 CPU products."""
    if (
        not applies(x, weight)
        or (bias is not None and not applies(bias))
        or x.numel() < MIN_ROWS * x.shape[-1]
    ):
        return F.linear(x, weight, bias)
    return _Linear.apply(x, weight, bias)
