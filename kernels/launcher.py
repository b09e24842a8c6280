"""`Launcher(kernel)`: launches a @triton.jit kernel through its compiled launcher, kept per specialization.

`kernel[grid](*args, **meta)` goes through Triton's JIT on every call: it binds the arguments, builds the
specialization key (each tensor's dtype and 16-byte alignment, each integer's width, divisibility by 16
and equality to 1), hashes it with the options and looks the compiled kernel up. Published measurements
put that at 9–12 µs a launch (triton, vLLM and tritonbench issues), several times a LayerNorm kernel's GPU
time at small shapes; the H200 run measured 78 µs of host time around a 2.2 µs kernel. Here the first
call of a specialization goes through the JIT (which compiles it and returns the `CompiledKernel`); later
calls with the same key call that kernel's launcher directly (`CompiledKernel.run`, the C launcher), as
the JIT itself does after its lookup.

The key refines Triton's own specialization rules (`native_specialize_impl`, the same in triton 3.6 and
3.9; tests/kernels/test_launcher.py checks that equal keys mean equal specializations): a tensor →
(dtype, data_ptr % 16); an int → (== 1, its value % 16, fits 32 bits, fits 63 bits); a float, bool or None
→ its type. `meta` (constexprs, num_warps,
num_stages) is keyed by the caller's hashable `meta_key` (a cached launch tuple), not rebuilt per call.

The JIT path is kept whenever the shortcut could differ from it: under TRITON_INTERPRET=1 (nothing is
compiled), while Triton's launch hooks are set (the profiler's), and for a kernel object the JIT does not
return (a stub). `stats` counts both paths (for tests and the benchmark).
"""

from __future__ import annotations

import torch

stats = {"jit": 0, "direct": 0}
_Tensor = torch.Tensor
_I32_MIN, _I32_MAX, _U64_MIN = -(2**31), 2**31 - 1, 2**63


def spec_key(args: tuple, tensors: int) -> tuple:
    """The part of Triton's specialization key the arguments determine (see the module docstring), for a
    kernel whose first `tensors` arguments are tensors and the rest scalars. Finer than Triton's (low
    address bits and low bits of ints, not just "multiple of 16"): a few more keys, never a wrong one.
    Two comprehensions with no per-argument type test on the tensors: this runs on every launch."""
    return (
        *[(a.dtype, a.data_ptr() & 15) for a in args[:tensors]],
        *[
            (a == 1, a & 15, _I32_MIN <= a <= _I32_MAX, a < _U64_MIN)
            if type(a) is int
            else type(a)  # a float: fp32 whatever its value; a bool: u1; None: a constexpr
            for a in args[tensors:]
        ],
    )


_RUNTIME: list = []  # triton.knobs.runtime, looked up on first use


def _hooks_set() -> bool:
    """Whether a launch enter/exit hook is registered (the profiler's): the launch metadata must then be
    built, so the JIT path runs. Triton ≥ 3.5 keeps them as (usually empty) HookChains."""
    if not _RUNTIME:
        from triton import knobs

        _RUNTIME.append(knobs.runtime)
    rt = _RUNTIME[0]
    enter, leave = rt.launch_enter_hook, rt.launch_exit_hook
    return bool(getattr(enter, "calls", enter)) or bool(getattr(leave, "calls", leave))


class Launcher:
    """Launches `kernel` (a @triton.jit function) through the compiled launcher of each specialization.

    `launcher(grid, args, meta_key, **meta)` ≡ `kernel[grid](*args, **meta)`; `args` are the positional
    (non-constexpr) arguments, tensors first (`tensors` of them), `meta` the constexprs and options
    (num_warps, num_stages), `meta_key` any hashable that determines `meta`.
    """

    def __init__(self, kernel, tensors: int, name: str = ""):
        self.kernel = kernel
        self.tensors = tensors  # the leading tensor (pointer) arguments; the rest are scalars
        self.name = name or getattr(kernel, "__name__", repr(kernel))
        self.cache: dict = {}
        names = getattr(kernel, "arg_names", None)
        self._arg_names = tuple(names) if names is not None else None

    def __call__(self, grid: tuple, args: tuple, meta_key, **meta) -> None:
        key = (meta_key, spec_key(args, self.tensors), _device(args))
        entry = self.cache.get(key)
        if entry is not None and not _hooks_set():
            ck, tail = entry
            g1 = grid[1] if len(grid) > 1 else 1
            g2 = grid[2] if len(grid) > 2 else 1
            stats["direct"] += 1
            # The JIT's own launch line (runtime/jit.py, triton 3.6 and 3.9), minus the hooks' metadata.
            ck.run(
                grid[0],
                g1,
                g2,
                _stream(key[-1]),
                ck.function,
                ck.packed_metadata,
                None,
                None,
                None,
                *args,
                *tail,
            )
            return
        stats["jit"] += 1
        ck = self.kernel[grid](*args, **meta)
        self._keep(key, ck, args, meta)

    def warmup(self, args: tuple, meta_key, **meta):
        """Compiles (no launch) the kernel for these arguments and keeps it; returns the CompiledKernel (None
        under the interpreter). Its `n_regs` / `metadata.shared` size a persistent grid."""
        key = (meta_key, spec_key(args, self.tensors), _device(args))
        entry = self.cache.get(key)
        if entry is not None:
            return entry[0]
        ck = self.kernel.warmup(*args, grid=(1,), **meta)
        self._keep(key, ck, args, meta)
        if key not in self.cache:
            return None
        ck._init_handles()  # loads the binary: n_regs is known from then on
        return ck

    def _keep(self, key, ck, args, meta) -> None:
        names = self._arg_names
        if (
            key in self.cache
            or names is None
            or not all(hasattr(ck, a) for a in ("run", "function", "packed_metadata"))
        ):
            return
        # The constexprs follow the positional arguments in the kernel's signature: the launcher takes every
        # argument in order (it skips the constexpr ones itself).
        if all(n in meta for n in names[len(args) :]):
            self.cache[key] = (ck, tuple(meta[n] for n in names[len(args) :]))


def _device(args) -> int:
    """The device the JIT would launch on: the current CUDA device (as Triton's driver asks torch); -1 for
    CPU tensors (the interpreter). The first argument of every kernel here is a tensor."""
    return torch._C._cuda_getDevice() if args[0].is_cuda else -1


def _stream(device: int) -> int:
    """The raw current CUDA stream of `device` (what Triton's driver asks torch for)."""
    return torch._C._cuda_getCurrentRawStream(device)
