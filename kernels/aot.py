"""Ahead-of-time compilation of every kernel specialization we launch, for sm_80 and sm_90, without a GPU.

`specializations(full)` lists (kernel, signature, constexprs, num_warps) built from the real launch
heuristics (layer_norm_op.fwd_launch / bwd_launch, lstm_op), so a tier added there is compiled here.
`compile_all(...)` runs triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32)) on fresh JIT
copies of the kernel modules (the process may have imported them interpreted). `python -m kernels.aot
[--full]` prints registers and spills per kernel (ptxas -v) for the record.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
import triton

TARGETS = ((80, "sm_80"), (90, "sm_90"))
# (x dtype, parameter dtype) as the kernels see them: fp32 weights with bf16 activations included.
DTYPES = (("fp32", "fp32"), ("fp16", "fp16"), ("bf16", "bf16"), ("bf16", "fp32"))
# One N per launch configuration (see fwd_config); N a multiple of 16 compiles the 16-byte-load case
# (Triton specializes on it at run time), the others the scalar-load case of the same tier.
LN_SIZES = (7, 1000, 2041, 4096, 4099, 5120, 8192, 12289, 16384, 20001, 32768, 65536)
LSTM_HIDDEN = (256, 1024)
CPU = torch.device("cpu")  # only the persistent grid size depends on the device; it is not compiled in
MODULES = ("layer_norm_triton", "lstm_triton", "gru_triton")


@dataclass(frozen=True)
class Spec:
    kernel: str  # attribute name in one of MODULES
    signature: dict
    constexprs: dict
    num_warps: int
    label: str
    aligned: tuple = ()  # integer arguments compiled as multiples of 16 (as Triton specializes them)


def load_jit_modules() -> dict[str, ModuleType]:
    """Fresh, compilable copies of the kernel modules (TRITON_INTERPRET off while loading)."""
    here = Path(__file__).parent
    old = os.environ.pop("TRITON_INTERPRET", None)
    try:
        mods = {}
        for name in MODULES:
            spec = importlib.util.spec_from_file_location(f"_normlab_aot_{name}", here / f"{name}.py")
            if spec is None or spec.loader is None:
                raise ImportError(f"kernels/{name}.py cannot be loaded")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod  # triton resolves globals of helper functions through the module
            spec.loader.exec_module(mod)
            mods[name] = mod
        return mods
    finally:
        if old is not None:
            os.environ["TRITON_INTERPRET"] = old


def _ln_specs(x: str, w: str, N: int, has_w: bool, has_b: bool) -> list[Spec]:
    from kernels.layer_norm_op import CHUNK, bwd_launch, fwd_launch, sums_launch, warps_for

    label = f"N={N} x={x} w={w} W={int(has_w)} B={int(has_b)}"
    flags = {"HAS_W": has_w, "HAS_B": has_b}
    fwd_sig = {"X": f"*{x}", "Y": f"*{x}", "W": f"*{w}", "B": f"*{w}", "Mean": "*fp32", "Rstd": "*fp32",
               "stride_x": "i32", "M": "i32", "N": "i32", "eps": "fp32"}  # fmt: skip
    bwd_sig = {"DY": f"*{x}", "X": f"*{x}", "W": f"*{w}", "Mean": "*fp32", "Rstd": "*fp32", "C": "*fp32",
               "DX": f"*{x}", "DW": "*fp32", "DB": "*fp32", "stride_dy": "i32", "stride_x": "i32",
               "M": "i32", "N": "i32", "rows_per_program": "i32"}  # fmt: skip
    # N and the row strides compiled as multiples of 16 where N is one (Triton specializes them so)
    aligned = ("N", "stride_x", "stride_dy") if N % 16 == 0 else ()
    fwd, bwd, sums = fwd_launch(4096, N, CPU), bwd_launch(4096, N, CPU), sums_launch(N)
    specs = [
        Spec("_ln_fwd", fwd_sig, {**flags, **fwd.meta}, fwd.num_warps, label,
             tuple(a for a in aligned if a in fwd_sig)),
        Spec("_ln_bwd", bwd_sig, {**flags, **bwd.meta}, bwd.num_warps, label, aligned),
        Spec("_ln_param_sums", {"Part": "*fp32", "DW": f"*{w}", "DB": f"*{w}", "P": "i32", "N": "i32"},
             {**flags, **sums.meta}, sums.num_warps, label, tuple(a for a in aligned if a == "N")),
    ]  # fmt: skip
    if bwd.long:
        sums_sig = {
            n: bwd_sig[n] for n in ("DY", "X", "W", "Mean", "Rstd", "C", "stride_dy", "stride_x", "N")
        }
        specs.append(
            Spec("_ln_bwd_rowsums", sums_sig, {"BLOCK_N": CHUNK, "HAS_W": has_w}, warps_for(2 * CHUNK), label,
                 aligned)
        )  # fmt: skip
    return specs


def _lstm_specs(x: str, w: str, H: int) -> list[Spec]:
    from kernels.lstm_op import launch

    block, fwd_warps, _, bwd_warps = launch(1, H, CPU)
    params = {n: f"*{w}" for n in ("GH", "BH", "GX", "BX", "Bias", "GC", "BC")}
    fwd = {
        "HH": f"*{x}",
        "XX": f"*{x}",
        "C_prev": f"*{x}",
        **params,
        "H_out": f"*{x}",
        "C_out": f"*{x}",
        "Stats": "*fp32",
        "stride_hh": "i32",
        "stride_xx": "i32",
        "stride_cp": "i32",
        "H": "i32",
        "eps": "fp32",
    }
    bwd = {
        "DH": f"*{x}",
        "DC": f"*{x}",
        "HH": f"*{x}",
        "XX": f"*{x}",
        "C_prev": f"*{x}",
        **params,
        "Stats": "*fp32",
        "DHH": f"*{x}",
        "DXX": f"*{x}",
        "DC_prev": f"*{x}",
        "Part": "*fp32",
        "stride_hh": "i32",
        "stride_xx": "i32",
        "stride_cp": "i32",
        "B": "i32",
        "H": "i32",
    }
    label = f"H={H} x={x} w={w}"
    # the single cell: HOISTED=False, ACC=False; a sequence: HOISTED=True, ACC=False at its last step
    # (the first launched) and ACC=True at the others
    return [
        Spec("_ln_lstm_fwd", fwd, {"BLOCK_H": block, "HOISTED": False}, fwd_warps, label),
        Spec("_ln_lstm_fwd", fwd, {"BLOCK_H": block, "HOISTED": True}, fwd_warps, label + " HOISTED"),
        Spec("_ln_lstm_bwd", bwd, {"BLOCK_H": block, "ACC": False, "HOISTED": False}, bwd_warps, label),
        Spec(
            "_ln_lstm_bwd",
            bwd,
            {"BLOCK_H": block, "ACC": False, "HOISTED": True},
            bwd_warps,
            label + " HOISTED",
        ),
        Spec(
            "_ln_lstm_bwd",
            bwd,
            {"BLOCK_H": block, "ACC": True, "HOISTED": True},
            bwd_warps,
            label + " HOISTED ACC",
        ),
    ]


def _gru_specs(x: str, w: str, H: int) -> list[Spec]:
    from kernels.gru_op import hoisted_bwd_warps, launch

    block, fwd_warps, _, bwd_warps = launch(1, H, CPU)
    seq_warps = hoisted_bwd_warps(launch(1, H, CPU))
    acts = {"ZRH": f"*{x}", "ZRX": f"*{x}", "WX": f"*{x}", "UH": f"*{x}", "H_prev": f"*{x}"}
    params = {n: f"*{w}" for n in ("G1", "B1", "G2", "B2", "G3", "B3", "G4", "B4")}
    strides = {n: "i32" for n in ("stride_zrh", "stride_zrx", "stride_wx", "stride_uh", "stride_hp")}
    fwd = {**acts, **params, "H_out": f"*{x}", "Stats": "*fp32", **strides, "H": "i32", "eps": "fp32"}
    d_strides = {n: "i32" for n in ("stride_dzrh", "stride_dzrx", "stride_dwx", "stride_duh")}
    bwd = {
        "DH": f"*{x}",
        **acts,
        **params,
        "Stats": "*fp32",
        "DZRH": f"*{x}",
        "DZRX": f"*{x}",
        "DWX": f"*{x}",
        "DUH": f"*{x}",
        "DH_prev": f"*{x}",
        "Part": "*fp32",
        **strides,
        **d_strides,
        "B": "i32",
        "H": "i32",
    }
    label = f"H={H} x={x} w={w}"
    # as the LN-LSTM's: the single cell unhoisted; a sequence hoisted, ACC at all but its last step
    return [
        Spec("_ln_gru_fwd", fwd, {"BLOCK_H": block, "HOISTED": False}, fwd_warps, label),
        Spec("_ln_gru_fwd", fwd, {"BLOCK_H": block, "HOISTED": True}, fwd_warps, label + " HOISTED"),
        Spec("_ln_gru_bwd", bwd, {"BLOCK_H": block, "ACC": False, "HOISTED": False}, bwd_warps, label),
        Spec(
            "_ln_gru_bwd",
            bwd,
            {"BLOCK_H": block, "ACC": False, "HOISTED": True},
            seq_warps,
            label + " HOISTED",
        ),
        Spec(
            "_ln_gru_bwd",
            bwd,
            {"BLOCK_H": block, "ACC": True, "HOISTED": True},
            seq_warps,
            label + " HOISTED ACC",
        ),
    ]


def specializations(full: bool = False) -> list[Spec]:
    """Every kernel in every launch configuration; `full` also crosses every configuration with every
    dtype pair (the CI set rotates the dtype pairs over the configurations so each kernel meets each)."""
    specs: list[Spec] = []
    for k, N in enumerate(LN_SIZES):
        pairs = DTYPES if full else (DTYPES[k % len(DTYPES)],)
        for x, w in pairs:
            specs += _ln_specs(x, w, N, True, True)
    specs += _ln_specs("bf16", "bf16", 1000, False, False)  # weight/bias None
    specs += _ln_specs("fp32", "fp32", 65536, False, True)
    for k, H in enumerate(LSTM_HIDDEN):
        pairs = DTYPES if full else (DTYPES[3 * k],)  # fp32 at H = 256, bf16 + fp32 params at H = 1024
        for x, w in pairs:
            specs += _lstm_specs(x, w, H)
    for k, H in enumerate(LSTM_HIDDEN):
        for x, w in DTYPES if full else (DTYPES[3 * k],):
            specs += _gru_specs(x, w, H)
    # one compile per distinct specialization (the partial-row sum is the same kernel for most N)
    unique = {(s.kernel, repr(s.signature), repr(s.constexprs), s.num_warps, s.aligned): s for s in specs}
    return list(unique.values())


def compile_spec(spec: Spec, mods: dict[str, ModuleType], cc: int):
    """The CompiledKernel of one specialization for compute capability `cc` (80 or 90)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = next(vars(m)[spec.kernel] for m in mods.values() if spec.kernel in vars(m))
    signature = {name: spec.signature.get(name, "constexpr") for name in fn.arg_names}
    missing = [n for n, t in signature.items() if t == "constexpr" and n not in spec.constexprs]
    if missing:
        raise ValueError(f"{spec.kernel}: no type or constexpr value for {missing}")
    # Pointers are 16-byte aligned in the common case (and N, the strides where `aligned` says so).
    attrs = {
        (i,): [["tt.divisibility", 16]]
        for i, n in enumerate(fn.arg_names)
        if signature[n].startswith("*") or n in spec.aligned
    }
    src = ASTSource(fn=fn, signature=signature, constexprs=spec.constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": spec.num_warps})


def ptxas_usage(ptx: str, cc: int) -> dict:
    """{'registers', 'spill_bytes'} from the ptxas that ships with triton (`ptxas -v`)."""
    from triton.backends.nvidia.compiler import get_ptxas

    try:
        ptxas = get_ptxas(cc).path  # triton ≥ 3.4 picks ptxas per architecture
    except TypeError:
        ptxas = get_ptxas().path
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        arch = f"sm_{cc}a" if cc == 90 else f"sm_{cc}"  # triton emits sm_90a PTX for Hopper
        proc = subprocess.run(
            [ptxas, f"-arch={arch}", "-v", str(path), "-o", str(path) + ".o"], capture_output=True, text=True
        )
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed for sm_{cc}: {proc.stderr.strip()[:500]}")
    out = proc.stderr
    regs = re.search(r"Used (\d+) registers", out)
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill (?:stores|loads)", out)]
    return {"registers": int(regs.group(1)) if regs else None, "spill_bytes": max(spills, default=0)}


def main(argv: list[str] | None = None) -> int:
    """Compile every specialization for sm_80 and sm_90 and print one line each.

    --full: every configuration × every dtype pair; --check (CI): registers/spills (ptxas -v) only for
    sm_90, where the test asserts them, to keep it quick.
    """
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    print(f"triton {triton.__version__}", flush=True)  # which compiler (CI also runs the GPU workers')
    mods = load_jit_modules()
    for spec in specializations(full="--full" in argv):
        for cc, arch in TARGETS:
            t0 = time.perf_counter()
            kernel = compile_spec(spec, mods, cc)
            if not kernel.asm.get("cubin"):
                raise RuntimeError(f"{spec.kernel} {spec.label}: no cubin for {arch}")
            usage = "regs=? spill=?"
            if not check or cc == 90:
                use = ptxas_usage(kernel.asm["ptx"], cc)
                usage = f"regs={use['registers']} spill={use['spill_bytes']}B"
            print(
                f"{arch} {spec.kernel:18s} {spec.label:34s} warps={spec.num_warps:2d} {usage} "
                f"{time.perf_counter() - t0:.1f}s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
