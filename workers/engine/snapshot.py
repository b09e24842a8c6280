"""A checkpoint's state as one flat byte buffer beside a small skeleton: what keeps a checkpoint cheap.

`take(state)` is what the training thread pays: every tensor of the state (parameters, optimizer
moments, generator states, the data order) copied into one uint8 buffer by a single `torch.cat` in C,
and the rest of the state (numbers, strings, Python's generator tuple) kept with each tensor replaced
by its place in the buffer. The writer thread then pickles only that skeleton (torch's weights-only
pickle, a few kB) and writes the buffer as it is: no per-tensor pickling, and the checksum and the
write run without the interpreter lock, beside the training loop.

The body of a checkpoint file (normlab.checkpoints adds the header with its checksum):

    TAG · u64 length of the skeleton · skeleton (torch.save) · the tensors' bytes, one after another

A body that starts otherwise is the older form, one torch.save of the whole state; `decode` reads both.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any

import torch

TAG = b"NLSNAP1\n"
_TENSOR = "__normlab_tensor__"  # the skeleton's placeholder key; no state dict of ours uses it


@dataclass(frozen=True)
class Snapshot:
    """A state taken at one step: its skeleton, its tensors' bytes, and (dtype, shape) of each."""

    skeleton: Any
    flat: torch.Tensor
    tensors: list[tuple[str, tuple[int, ...]]]


def take(state: dict[str, Any]) -> Snapshot:
    """The state copied (training goes on updating the live tensors in place) into a Snapshot."""
    found: list[torch.Tensor] = []

    def walk(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            found.append(obj.detach())
            return {_TENSOR: len(found) - 1}
        if isinstance(obj, dict):
            return {k: walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(walk(v) for v in obj)
        return obj

    skeleton = walk(state)
    parts = [t.reshape(-1).contiguous().view(torch.uint8).cpu() for t in found]
    flat = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
    return Snapshot(skeleton, flat, [(str(t.dtype).removeprefix("torch."), tuple(t.shape)) for t in found])


def encode(snap: Snapshot) -> list[bytes | memoryview]:
    """The body's parts, in order (written one after another, hashed as one)."""
    head = io.BytesIO()
    torch.save({"skeleton": snap.skeleton, "tensors": snap.tensors}, head)
    skeleton = head.getvalue()
    return [TAG + struct.pack("<Q", len(skeleton)), skeleton, snap.flat.numpy().data]


def decode(body: bytes) -> dict[str, Any]:
    """The state a body holds (either form), its tensors on the CPU."""
    if not body.startswith(TAG):
        return torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)  # type: ignore[no-any-return]
    start = len(TAG) + 8
    (length,) = struct.unpack("<Q", body[len(TAG) : start])
    head = torch.load(io.BytesIO(body[start : start + length]), map_location="cpu", weights_only=True)
    flat = torch.frombuffer(bytearray(memoryview(body)[start + length :]), dtype=torch.uint8)
    tensors, offset = [], 0
    for dtype_name, shape in head["tensors"]:
        dtype = getattr(torch, dtype_name)
        count = 1
        for n in shape:
            count *= n
        size = count * torch.empty(0, dtype=dtype).element_size()
        # (each its own storage: a view at an offset not aligned to its dtype is refused)
        tensors.append(flat[offset : offset + size].clone().view(dtype).reshape(shape))
        offset += size

    def build(obj: Any) -> Any:
        if isinstance(obj, dict):
            if set(obj) == {_TENSOR}:
                return tensors[obj[_TENSOR]]
            return {k: build(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [build(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(build(v) for v in obj)
        return obj

    return build(head["skeleton"])  # type: ignore[no-any-return]
