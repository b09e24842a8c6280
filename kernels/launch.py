"""`Launcher`: one kernel at one grid and specialization, launched through the compiled kernel's runner.

`JITFunction.run` binds the arguments, computes the specialization key and looks the kernel up in its
cache on every call (≈ 9–12 µs of host time); calling the compiled kernel's launcher directly costs
≈ 3 µs. That is sound only while the arguments keep the specialization the kernel was compiled for:
Triton specializes pointers and integers on divisibility by 16 (and integers equal to 1), so the caller
keys each Launcher on exactly that (`spec`, `aligned`) beside the shapes and dtypes, and a misaligned view
gets a Launcher of its own. The first call of a Launcher goes through the JIT (compiling if needed);
under the interpreter, which returns no compiled kernel, every call does, with the cached meta-parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch


def spec(value: int) -> int:
    """How Triton specializes an integer argument: 1, a multiple of 16 (16), or neither (0)."""
    return 1 if value == 1 else 16 if value % 16 == 0 else 0


def aligned(t: torch.Tensor | None) -> bool:
    """True when a pointer argument is 16-byte aligned (Triton's pointer specialization)."""
    return t is None or t.data_ptr() % 16 == 0


class Launcher:
    """`launcher(*args)` runs `kernel[grid](*args, **meta)`; after the first call, through the compiled
    kernel's runner with the same (positional args, then constexprs in signature order) argument list."""

    def __init__(self, kernel, grid: tuple, meta: dict) -> None:
        self.kernel, self.grid, self.meta = kernel, grid, meta
        self.runner: Callable | None = None
        self.compiled = None  # the compiled kernel (registers, shared memory: occupancy) once launched
        self.tail: tuple = ()

    def __call__(self, *args) -> None:
        if self.runner is not None:
            self.runner(*args, *self.tail)
            return
        compiled = self.kernel[self.grid](*args, **self.meta)
        names = getattr(self.kernel, "arg_names", None)
        if compiled is not None and hasattr(compiled, "run") and names is not None:
            self.compiled = compiled
            self.tail = tuple(self.meta[name] for name in names[len(args) :])
            self.runner = compiled[self.grid]


class PlanCache:
    """Plans by key, built on first use; bounded (a worker sees few shapes; a sweep must not grow it)."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self.plans: dict[Hashable, object] = {}

    def get(self, key: Hashable, build: Callable[[], object]):
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) >= self.limit:
                self.plans.clear()  # rebuilding costs a dict lookup per kernel; nothing is recompiled
            plan = self.plans[key] = build()
        return plan

    def clear(self) -> None:
        self.plans.clear()
