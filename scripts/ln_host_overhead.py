"""Host (Python) time per call of the Triton LayerNorm's entry points, with every kernel launch stubbed out.

    python scripts/ln_host_overhead.py [--rows 512] [--cols 768] [--calls 2000]

The GPU run behind BENCHMARKS.md measured 78 µs of host time per forward of `triton_layer_norm`, for a
2.2 µs kernel. This script measures, on any machine (CPU tensors, no GPU, no interpreter), what our own
Python costs around the launches: each kernel object in `kernels.ln_triton` is replaced by a stub whose
`[grid](...)` does nothing, so what is left is validation, launch configuration, allocations, custom-op
dispatch and autograd. Triton's own launcher (its argument binding and specialization key; real on a
GPU) is not in these numbers, for any path.

Paths, side by side in µs per call (median of --repeats runs):
  * before:     `triton_layer_norm` as it was at commit BEFORE (the custom op on every call, launch
                configuration recomputed each time), loaded from git under another op namespace;
                skipped when git or that commit is not at hand
  * custom op:  today's `normlab::layer_norm_fwd` / `_bwd` (what torch.compile's graph calls)
  * eager:      today's `triton_layer_norm` outside torch.compile (a torch.autograd.Function; under
                no_grad no autograd at all)
Rows: forward with no_grad, forward of inputs that need gradients (builds the graph), and forward +
backward (torch.autograd.grad for x, γ, β).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "1ce4d59"  # the last commit with the custom op on every eager call
KERNELS = ("_ln_fwd_resident", "_ln_fwd_looped", "_ln_bwd_resident", "_ln_bwd_looped", "_column_sum")


class _NoLaunch:
    """Stands in for a @triton.jit kernel: `kernel[grid](*args, **kwargs)` does nothing."""

    @staticmethod
    def _launch(*args, **kwargs):
        return None

    def __getitem__(self, grid):
        return self._launch


def _before_module():
    """The layer_norm_op.py of commit BEFORE, its ops renamed to normlab_before::…, or None."""
    try:
        src = subprocess.run(["git", "show", f"{BEFORE}:kernels/layer_norm_op.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    mod = types.ModuleType("_ln_op_before")
    exec(compile(src.replace('"normlab::', '"normlab_before::'), f"{BEFORE}:layer_norm_op.py", "exec"),
         mod.__dict__)
    return mod


def _per_call_us(fn, calls: int, repeats: int) -> float:
    fn()  # warm up (first-call caches, lazy imports)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--cols", type=int, default=768)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: the kernels are stubbed out here, nothing needs interpreting")
        return 2
    sys.path.insert(0, str(ROOT))
    import torch

    from kernels import layer_norm_op as op
    from kernels import ln_triton

    for name in KERNELS:
        setattr(ln_triton, name, _NoLaunch())
    before = _before_module()

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    M, N = args.rows, args.cols
    x = torch.randn(M, N, generator=gen)
    w, b = torch.randn(N, generator=gen), torch.randn(N, generator=gen)
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    dy = torch.randn(M, N, generator=gen)

    paths = {}
    if before is not None:
        paths["before"] = before.triton_layer_norm
    paths["custom op"] = lambda x, w, b: op.layer_norm_fwd(x, w, b, 1e-5, 0)[0]
    paths["eager"] = op.triton_layer_norm

    def no_grad(f):
        def run():
            with torch.no_grad():
                f(x, w, b)
        return run

    def fwd_bwd(f):
        return lambda: torch.autograd.grad(f(xg, wg, bg), (xg, wg, bg), dy)

    rows = {
        "forward, no_grad": no_grad,
        "forward, needs grad": lambda f: lambda: f(xg, wg, bg),
        "forward + backward": fwd_bwd,
    }
    print(f"host µs per call, {M}x{N} float32 on CPU, kernel launches stubbed out "
          f"(median of {args.repeats} × {args.calls} calls)")
    head = f"{'':22s}" + "".join(f"{name:>12s}" for name in paths)
    print(head + f"{'eager/first':>13s}")
    for label, make in rows.items():
        us = [_per_call_us(make(f), args.calls, args.repeats) for f in paths.values()]
        print(f"{label:22s}" + "".join(f"{u:12.1f}" for u in us) + f"{us[-1] / us[0]:12.2f}x")
    if before is None:
        print(f"(no 'before' column: git or commit {BEFORE} not available)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
