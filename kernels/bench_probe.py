"""Reference rows of `normlab bench kernel`: the copy ceiling, a profiler breakdown of three backward shapes,
the measured dispatch boundary, and Liger-Kernel's LayerNorm as an optional baseline.

- copy ceiling: a 1 GiB bf16 device-to-device copy (read + write counted), the bandwidth the LN kernels
  can approach at best on this GPU (≈ 4.3 TB/s measured once on the H200, 90 % of its 4.8 TB/s).
- profile: one backward of each of three bf16 shapes under torch.profiler, per implementation: GPU
  microseconds per CUDA kernel name (so the dx kernel, the partial sums and anything torch adds show
  apart), and the number of launches.
- boundary: from the measured rows, the smallest M·N from which the forced Triton kernel is faster than
  the faster of eager and torch.compile in every measured shape (timed with host time, `do_bench`),
  per mode, beside kernels.LN_TRITON_MIN_ELEMS (the constant `kernels.layer_norm` dispatches on).
"""

import torch
import torch.nn.functional as F

PROFILE_SHAPES = ((4096, 4096), (4096, 4099), (4096, 32768))  # (M, N): resident, odd, long rows
BASELINES = ("torch", "torch.compile", "torch.compile/mixed", "liger")


def liger_layer_norm():
    """Liger-Kernel's LayerNorm as fn(x, w, b), or None when the package is not installed (it travels to
    the GPU machine as a wheel: scripts/gpu_wheels.sh). Imported here only, never by the product."""
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    except Exception:  # noqa: BLE001 - absent or broken: the benchmark leaves that baseline out
        return None
    return lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5)


def copy_ceiling(timer, device: str, gib: float = 1.0) -> dict:
    """GB/s of a device-to-device copy of `gib` GiB of bf16 (2 bytes moved per byte copied)."""
    n = int(gib * 2**30) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src))
    gbs = 2 * n * 2 / ms / 1e6
    return {"bytes": 2 * n, "ms": round(ms, 4), "GBps": round(gbs, 1)}


def profile_backward(impls: dict, device: str, shapes=PROFILE_SHAPES) -> list[dict]:
    """One row per (shape, impl): GPU µs of each CUDA kernel in one backward (after a warm-up)."""
    from torch.profiler import ProfilerActivity, profile

    out = []
    for M, N in shapes:
        x = torch.randn(M, N, device=device, dtype=torch.bfloat16)
        w = torch.randn(N, device=device, dtype=torch.bfloat16)
        b = torch.randn(N, device=device, dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        for name, fn in impls.items():
            xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
            try:
                y = fn(xg, wg, bg)
                for _ in range(2):
                    y.backward(dy, retain_graph=True)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    y.backward(dy, retain_graph=True)
                    torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - a baseline that cannot run this shape is a row
                out.append({"M": M, "N": N, "impl": name, "error": str(exc)[:200]})
                continue
            kernels = {}
            for e in prof.key_averages():
                us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
                if us:
                    kernels[e.key[:80]] = {"us": round(us, 1), "launches": e.count}
            total = round(sum(k["us"] for k in kernels.values()), 1)
            out.append({"M": M, "N": N, "impl": name, "gpu_us": total, "kernels": kernels})
            del y, xg, wg, bg
    return out


def dispatch_boundary(ln_rows: list[dict], dtype: str = "bf16") -> dict:
    """Per mode: the smallest M·N at and above which the forced Triton kernel beat every baseline in every
    measured shape of `dtype` (None: it never does throughout), and the shapes it lost below that."""
    import kernels

    best: dict = {}
    for r in ln_rows:
        if r.get("dtype") != dtype or "ms" not in r:
            continue
        key = (r["mode"], r["M"] * r["N"], r["M"], r["N"])
        slot = best.setdefault(key, {"triton": None, "base": None})
        if r["impl"] == "triton":
            slot["triton"] = r["ms"]
        elif r["impl"] in BASELINES[:3]:  # torch's own: what the dispatch falls back to, compiled or not
            slot["base"] = r["ms"] if slot["base"] is None else min(slot["base"], r["ms"])
    result: dict = {"LN_TRITON_MIN_ELEMS": kernels.LN_TRITON_MIN_ELEMS}
    for mode in ("fwd", "bwd", "fwd+bwd"):
        cases = sorted(
            (k[1], k[2], k[3], v)
            for k, v in best.items()
            if k[0] == mode and v["triton"] is not None and v["base"] is not None
        )
        line = None
        for elems, _, _, v in reversed(cases):  # from the largest down, while Triton keeps winning
            if v["triton"] > v["base"]:
                break
            line = elems
        result[mode] = {
            "measured_elems": line,
            "shapes": len(cases),
            "lost_at": [[M, N] for e, M, N, v in cases if v["triton"] > v["base"]][:12],
        }
    return result


def eager_ln(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
