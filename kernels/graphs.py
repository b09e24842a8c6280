"""CUDA graphs for the fused recurrences: a T-step loop of small launches replayed as one.

The LN-LSTM / LN-GRU sequences launch, per time step, one product and one fused-cell kernel each way.
Each kernel takes microseconds on a GPU, but every launch from Python costs host time of the same order
(a Triton launch more than a torch op), so an eager 64-step recurrence is bound by the host, not the GPU. Here
such a loop is captured once per shape into a `torch.cuda.CUDAGraph` and replayed with one call.

`run(key, fn, inputs, keep)`:
- `fn(*static_inputs) -> tuple of tensors` is the loop itself (kernel launches, torch ops; no host
  syncs, no data-dependent control flow). It runs on fixed "static" copies of the inputs, so the graph's
  pointers never change: every call copies `inputs` into them (one `_foreach_copy_`) and clones the
  outputs it returns (those listed in `keep`), since the next replay overwrites the graph's own.
  Nothing is keyed on tensor addresses, so a parameter updated or replaced between calls is simply
  copied in again; the copies are memory-bound and small next to the loop they replace.
- The first call for a key runs `fn` eagerly (a shape used once, such as a last short batch, costs no
  capture; it also compiles the Triton kernels). The second runs it once more on a side stream (cuBLAS
  creates its per-stream handle there, which a capture could not), captures it on that stream and
  replays. A capture that fails marks the key eager for good (with a warning) and the call runs
  eagerly: a graph never costs a result.
- Entries hold their static tensors and graph memory: at most `MAX_ENTRIES`, and static tensors up to a
  total (least recently used go first) and a per-entry limit (a bigger loop runs eagerly), both a
  share of the GPU's memory with floors of `MAX_TOTAL_BYTES` and `MAX_STATIC_BYTES`.

Lending (`sequence_forward` / `sequence_backward`): a forward replay that saves for a backward does not
clone what it saves. Its outputs stay in the forward entry's buffers, lent to that call's autograd node
(a `_Lease`), and the backward graph is captured reading those buffers directly, so while the lease holds
only ∂L/∂hs is copied in. Anything about to write the buffers (the entry's next replay, a backward
restoring other data into them) first "evicts" the lease: clones the outputs for it if its backward may
still run (its node is alive and has not released its saved tensors), and otherwise drops it. So a
training step (forward, backward, forward, ...) copies no saved tensor at all, and two forwards before
either backward still each get their own data. One re-entrant lock orders every copy-in, eviction and
replay (replays only enqueue work, so serializing them across threads costs little).

Off for a call with `enabled=False` (the engine passes EngineOptions.cuda_graphs, from
NORMLAB_CUDA_GRAPHS): the same launches from Python, the same results. On a CPU there is no
graph: `emulate(True)` (for tests under TRITON_INTERPRET=1) replays by running `fn` again on the static
inputs and copying its results into the first call's outputs, so the copy-in / clone-out bookkeeping
is tested without a GPU.
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch

from kernels.graph_entry import _Entry, _Lease, _nbytes, stats

MAX_ENTRIES = 8
# Static inputs and outputs kept: per entry and for all entries together (least recently used go first).
# On a GPU the larger of these and a share of its memory (GPU_SHARE: on a large GPU tens of GB, so even
# a T=512, B=128, H=1024 fp32 LN-LSTM — 1 GiB of ax alone — keeps its graphs).
MAX_STATIC_BYTES = 1 << 30
MAX_TOTAL_BYTES = 4 << 30
GPU_SHARE = (0.10, 0.25)
_EMULATE = False
# One re-entrant lock for lookups, captures, copy-ins, evictions and replays: a backward reading a forward
# entry's buffers holds it so that no replay on another thread overwrites them in between.
_LOCK = threading.RLock()
_ENTRIES: OrderedDict = OrderedDict()
_SEEN: set = set()  # keys called before (the second call captures)
_FAILED: set = set()


def emulate(on: bool) -> None:
    """Tests only: on CPU tensors, replay by re-running the loop on the static copies (no CUDA graph)."""
    global _EMULATE
    _EMULATE = bool(on)


def clear() -> None:
    """Forget every captured graph (frees their memory) and every key's history."""
    with _LOCK:
        _ENTRIES.clear()
        _SEEN.clear()
        _FAILED.clear()


def applies(device: torch.device, enabled: bool = True) -> bool:
    """Whether `run` would replay a graph for tensors on this device (else the caller runs eagerly);
    `enabled` False: never (the caller asked for eager launches)."""
    if not enabled:
        return False
    if device.type == "cuda":
        return not torch.cuda.is_current_stream_capturing()
    return _EMULATE and device.type == "cpu"


def run(key, fn: Callable, inputs: Sequence[torch.Tensor], keep: Sequence[int] | None = None) -> tuple:
    """fn(*inputs), by a replayed CUDA graph when this key was seen before (see the module docstring).

    Returns fresh tensors for the outputs listed in `keep` (all by default) and None for the others.
    Call only when `applies(device)` holds; `key` must determine every shape, dtype and constant of `fn`.
    """
    return _run(key, fn, inputs, keep)[0]


def _run(
    key,
    fn: Callable,
    inputs: Sequence[torch.Tensor],
    keep: Sequence[int] | None = None,
    lend_to=None,
    partner: _Entry | None = None,
) -> tuple[tuple, _Lease | None]:
    """`run`, and: with `lend_to` (an autograd node), a replay lends its outputs to it (a `_Lease`, see the
    module docstring) instead of cloning those not in `keep`; a new entry reads inputs that are
    `partner`'s buffers in place."""
    key = (key, _math_mode())
    with _LOCK:
        entry = _ENTRIES.get(key)
        if entry is not None:
            _ENTRIES.move_to_end(key)
        elif key not in _SEEN or key in _FAILED or _nbytes(inputs) > _limits(inputs[0].device)[0]:
            _SEEN.add(key)  # seen once: eager (a shape used once, e.g. a last short batch, costs no capture)
            entry = None
        else:
            entry = _capture(key, fn, inputs, partner)  # one capture at a time
        if entry is None:  # eager: fresh outputs (all of them when lending, for the caller to save)
            stats["eager"] += 1
            outs = tuple(fn(*inputs))
            return (outs if lend_to is not None else _select(outs, keep)), None
        entry.evict()  # its outputs (and static inputs) are about to be overwritten
        entry.copy_in(inputs)
        entry.replay()
        stats["replays"] += 1
        outs = _select(entry.outs, keep, clone=True)
        stats["copied_bytes"] += _nbytes([o for o in outs if o is not None])
        if lend_to is None:
            return outs, None
        lease = _Lease(entry, lend_to)
        entry.lease = weakref.ref(lease)
        stats["lent"] += 1
        return outs, lease


def _capture(
    key, fn: Callable, inputs: Sequence[torch.Tensor], partner: _Entry | None = None
) -> _Entry | None:
    entry = _Entry(fn, inputs, partner)
    try:
        entry.capture()
    except Exception as exc:  # noqa: BLE001 - any capture problem: this key runs eagerly from now on
        _FAILED.add(key)
        stats["failed"] += 1
        warnings.warn(
            f"CUDA graph capture failed for {key!r} ({type(exc).__name__}: {exc}); this shape runs "
            "its launches eagerly",
            RuntimeWarning,
            stacklevel=3,
        )
        if entry.statics[0].is_cuda:
            torch.cuda.synchronize()
        return None
    stats["captures"] += 1
    own = [t for i, t in enumerate(entry.statics) if i not in entry.shared]  # a partner's are counted there
    entry.nbytes = _nbytes(own) + _nbytes(entry.outs)
    per_entry, total = _limits(entry.statics[0].device)
    if entry.nbytes > per_entry:
        _FAILED.add(key)  # too big to keep: eager from now on (this capture is dropped)
        return None
    _ENTRIES[key] = entry
    while len(_ENTRIES) > MAX_ENTRIES or sum(e.nbytes for e in _ENTRIES.values()) > total:
        _, gone = _ENTRIES.popitem(last=False)
        for k in [k for k, e in _ENTRIES.items() if e.partner is gone]:  # they hold its buffers
            del _ENTRIES[k]
    return entry


def _limits(device: torch.device) -> tuple[int, int]:
    """(bytes one entry may keep, bytes all entries may keep) for graphs on this device."""
    if device.type != "cuda":
        return MAX_STATIC_BYTES, MAX_TOTAL_BYTES
    memory = torch.cuda.get_device_properties(device).total_memory
    return max(MAX_STATIC_BYTES, int(GPU_SHARE[0] * memory)), max(MAX_TOTAL_BYTES, int(GPU_SHARE[1] * memory))


def call(
    name: str,
    fn: Callable,
    inputs: Sequence[torch.Tensor],
    *consts,
    keep: Sequence[int] | None = None,
    enabled: bool = True,
):
    """fn(*inputs) as a tuple: replayed from a CUDA graph keyed on (name, consts, the inputs' shapes, dtypes
    and device) where `applies(device, enabled)`, else run directly. `consts` must hold every constant fn
    closes over."""
    if not applies(inputs[0].device, enabled):
        return tuple(fn(*inputs))
    return run(graph_key(name, inputs, *consts), fn, inputs, keep)


def sequence_forward(
    ctx,
    name: str,
    fn: Callable,
    inputs: Sequence[torch.Tensor],
    eps: float,
    saving: bool,
    out: int,
    enabled: bool = True,
) -> tuple:
    """A fused sequence's autograd forward: fn(*inputs, eps=eps) as `call` runs it; returns its outputs with
    output `out` (the hidden states returned) a fresh tensor. When `saving`, the inputs are saved on ctx,
    and the outputs too when they are fresh (eager); a replay lends them to ctx instead (`ctx.lease`).
    `enabled` False: eager launches, forward and backward."""
    ctx.lease = None
    ctx.graphs_enabled = enabled
    f = functools.partial(fn, eps=eps)
    if not applies(inputs[0].device, enabled):
        outs = tuple(f(*inputs))
    else:
        outs, ctx.lease = _run(
            graph_key(name, inputs, eps), f, inputs, keep=(out,), lend_to=ctx if saving else None
        )
    if saving:
        ctx.save_for_backward(*inputs, *(() if ctx.lease is not None else outs))
    return outs


def sequence_backward(ctx, name: str, fn: Callable, grad: torch.Tensor) -> tuple:
    """The matching backward: fn(grad, *inputs, *outputs of the forward) through `call`, on the forward
    entry's buffers while its lease holds (nothing but grad copied in), else on the saved inputs and the
    evicted clones."""
    saved = ctx.saved_tensors  # also autograd's check that no saved input was modified in place
    lease = ctx.lease
    if lease is None:
        return call(name, fn, (grad.contiguous(), *saved), enabled=ctx.graphs_enabled)
    with _LOCK:  # no replay may overwrite the lent buffers before this backward's work is enqueued
        owner = lease.entry
        if owner is not None:
            inputs, partner = (grad.contiguous(), *owner.statics, *owner.outs), owner
        else:
            inputs, partner = (grad.contiguous(), *saved, *lease.outs), None
        if not applies(grad.device, ctx.graphs_enabled):  # e.g. capturing another stream now
            return tuple(fn(*inputs))
        return _run(graph_key(name, inputs), fn, inputs, partner=partner)[0]


def graph_key(name: str, tensors: Sequence[torch.Tensor], *consts) -> tuple:
    """A key for `run`: the loop's name, its constants and each input's shape, dtype and device."""
    return (name, *consts) + tuple((tuple(t.shape), t.dtype, t.device) for t in tensors)


def _math_mode() -> tuple:
    """The matmul settings a capture bakes in (cuBLAS picks its kernels then): part of every key."""
    m = torch.backends.cuda.matmul
    return (
        torch.get_float32_matmul_precision(),
        m.allow_tf32,
        m.allow_fp16_reduced_precision_reduction,
        m.allow_bf16_reduced_precision_reduction,
    )


def _select(outs: tuple, keep, clone: bool = False) -> tuple:
    return tuple(
        (o.clone() if clone else o) if keep is None or i in keep else None for i, o in enumerate(outs)
    )
