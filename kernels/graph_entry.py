"""One captured loop of `kernels.graphs`: its static inputs, its CUDA graph (or, emulated on CPU, the loop
run again), its outputs, and the lease of those outputs to a backward. The registry, the keys and the
rules of when to capture, replay, lend and evict are in kernels/graphs.py, whose docstring explains them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import torch

# copied_bytes: what replays moved besides the loop itself (inputs copied in, outputs cloned out, evictions)
stats = {"captures": 0, "replays": 0, "eager": 0, "failed": 0, "lent": 0, "evicted": 0, "copied_bytes": 0}

_STREAMS: dict = {}


def _capture_stream(device: torch.device):
    """One side stream per device for warm-ups and captures (cuBLAS handles are per stream: warming up on
    the capture stream creates them before the capture, which could not)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _STREAMS:
        _STREAMS[index] = torch.cuda.Stream(device=index)
    return _STREAMS[index]


class _Lease:
    """One forward replay's saved outputs, left in its entry's buffers for that call's backward."""

    __slots__ = ("entry", "outs", "node", "__weakref__")

    def __init__(self, entry: _Entry, node):
        self.entry: _Entry | None = entry  # while set: the call's inputs and outputs are entry's buffers
        self.outs: tuple | None = None  # once evicted: clones of the outputs (inputs: the node's saved ones)
        self.node = weakref.ref(node)

    def needed(self) -> bool:
        """Whether the backward may still run: the autograd node is alive and still holds its saved tensors
        (after a backward without retain_graph, reading them raises)."""
        node = self.node()
        if node is None:
            return False
        try:
            try:
                _ = node._raw_saved_tensors  # runs no saved-tensor unpack hooks (offloading, checkpointing)
            except AttributeError:
                _ = node.saved_tensors
        except RuntimeError:
            return False
        return True


class _Entry:
    def __init__(self, fn: Callable, inputs: Sequence[torch.Tensor], partner: _Entry | None = None):
        self.fn = fn
        # Inputs that are a partner entry's buffers (a backward's lent forward data) are read in place.
        lent = {id(t) for t in (*partner.statics, *partner.outs)} if partner is not None else set()
        self.shared = {i for i, t in enumerate(inputs) if id(t) in lent}
        self.partner = partner if self.shared else None
        self.statics: list[torch.Tensor] = [
            t if i in self.shared else torch.empty_like(t, memory_format=torch.contiguous_format)
            for i, t in enumerate(inputs)
        ]
        self.copy_in(inputs)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outs: tuple = ()
        self.lease: weakref.ref | None = None
        self.nbytes = 0

    def copy_in(self, inputs: Sequence[torch.Tensor]) -> None:
        """Copy each call's inputs into the static tensors (not those that already are the inputs); before
        writing a partner's buffers, evict what it has lent."""
        pairs = [(i, d, t) for i, (d, t) in enumerate(zip(self.statics, inputs, strict=True)) if d is not t]
        if self.partner is not None and any(i in self.shared for i, _, _ in pairs):
            self.partner.evict()
        if pairs:
            torch._foreach_copy_([d for _, d, _ in pairs], [t for _, _, t in pairs])
            stats["copied_bytes"] += _nbytes([d for _, d, _ in pairs])

    def evict(self) -> None:
        """Before this entry's buffers are written: clone the outputs out for a lease whose backward may
        still need them, and end the lease."""
        lease = self.lease() if self.lease is not None else None
        self.lease = None
        if lease is None or lease.entry is not self:
            return
        if lease.needed():
            lease.outs = tuple(o.clone() for o in self.outs)
            stats["evicted"] += 1
            stats["copied_bytes"] += _nbytes(self.outs)
        lease.entry = None

    def capture(self) -> None:
        if self.statics[0].is_cuda:
            s = _capture_stream(self.statics[0].device)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                self.fn(*self.statics)  # warm-up on the capture stream; its results are dropped
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
                self.outs = tuple(self.fn(*self.statics))
            self.graph = g
        else:  # emulation: the "graph" is the loop run again on the statics
            self.outs = tuple(t.clone() for t in self.fn(*self.statics))

    def replay(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            for out, new in zip(self.outs, self.fn(*self.statics), strict=True):
                out.copy_(new)


def _nbytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
