"""A checkpoint's body as skeleton + flat tensor bytes: every tensor and value comes back exactly (mixed
dtypes at unaligned offsets, 0-dim tensors, tuples, int keys), the snapshot is a copy taken at once, and
a body of the older form (one torch.save) still reads."""

from __future__ import annotations

import io

import torch

from workers.engine import snapshot


def _state() -> dict:
    return {
        "format": 1,
        "loop": {"step": 7, "window_loss": 0.25},
        "model": {"w": torch.randn(3, 5), "running_mean": torch.arange(4, dtype=torch.float64)},
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(5)}},
            "param_groups": [],
        },
        "rng": {
            "torch": torch.randint(0, 255, (13,), dtype=torch.uint8),
            "python": (3, tuple(range(5)), None),
        },
        "data": {"order": torch.tensor([4, 1, 3], dtype=torch.int64), "mask": torch.tensor([True, False])},
        "frozen": ["a.gain"],
    }


def _assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b


def _body(parts) -> bytes:
    return b"".join(bytes(p) for p in parts)


def test_a_snapshot_round_trips_every_value_exactly():
    state = _state()
    _assert_same(snapshot.decode(_body(snapshot.encode(snapshot.take(state)))), state)


def test_a_snapshot_is_a_copy_taken_when_it_is_taken():
    state = _state()
    before = {k: v.clone() for k, v in state["model"].items()}
    snap = snapshot.take(state)
    state["model"]["w"].add_(1.0)  # training goes on updating the live tensors in place
    assert torch.equal(snapshot.decode(_body(snapshot.encode(snap)))["model"]["w"], before["w"])


def test_a_body_of_the_older_form_still_reads():
    state = _state()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    _assert_same(snapshot.decode(buffer.getvalue()), state)
