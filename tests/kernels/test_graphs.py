"""`kernels.graphs` bookkeeping on CPU (emulated replay: no CUDA graph here; the `gpu` tests use real ones).

What a caller relies on: the first call of a key runs eagerly, the second captures, later ones replay on
copies of their own inputs; outputs are fresh tensors; a failed capture warns and falls back for good;
big or many entries are not kept; the matmul precision setting is part of the key.
"""

import threading

import pytest
import torch

from kernels import graphs


@pytest.fixture(autouse=True)
def emulated(emulated_graphs):
    return emulated_graphs


def loop(x, w):
    """A small recurrence with in-place writes into a buffer, like the sequences' loops."""
    out = x.new_empty(x.shape)
    h = torch.zeros_like(x[0])
    for t in range(x.shape[0]):
        torch.addmm(x[t], h, w, out=out[t])
        h = out[t].tanh()
    return out, h


def test_first_call_eager_second_captures_then_replays_with_each_calls_inputs(emulated):
    w = torch.randn(3, 3)
    xs = [torch.randn(4, 2, 3) for _ in range(4)]
    got = [graphs.run(("loop",), loop, (x, w)) for x in xs]
    assert emulated() == {"captures": 1, "replays": 3, "eager": 1, "failed": 0}
    for x, (out, h) in zip(xs, got, strict=True):
        want_out, want_h = loop(x, w)
        assert torch.equal(out, want_out) and torch.equal(h, want_h)
    assert len({o.data_ptr() for o, _ in got}) == 4  # fresh outputs, never the graph's own buffers


def test_keep_leaves_unneeded_outputs_uncloned():
    w, x = torch.randn(3, 3), torch.randn(4, 2, 3)
    for _ in range(3):
        out, h = graphs.run(("loop",), loop, (x, w), keep=(1,))
        assert out is None and torch.equal(h, loop(x, w)[1])


def test_a_failed_capture_warns_and_runs_eagerly_from_then_on(emulated):
    calls = []

    def flaky(x):
        calls.append(1)
        if len(calls) == 2:  # the capture
            raise RuntimeError("operation not permitted when stream is capturing")
        return (x * 2,)

    x = torch.randn(5)
    assert torch.equal(graphs.run(("flaky",), flaky, (x,))[0], x * 2)
    with pytest.warns(RuntimeWarning, match="capture failed"):
        assert torch.equal(graphs.run(("flaky",), flaky, (x,))[0], x * 2)
    assert torch.equal(graphs.run(("flaky",), flaky, (x,))[0], x * 2)
    assert emulated()["failed"] == 1 and emulated()["captures"] == 0 and emulated()["eager"] == 3


def test_least_recently_used_entries_go_and_big_ones_are_not_kept(monkeypatch, emulated):
    monkeypatch.setattr(graphs, "MAX_ENTRIES", 2)
    w = torch.randn(3, 3)
    for T in (1, 2, 3):
        for _ in range(2):
            graphs.run(("loop", T), loop, (torch.randn(T, 2, 3), w))
    assert emulated()["captures"] == 3
    graphs.run(("loop", 1), loop, (torch.randn(1, 2, 3), w))  # evicted: captured again
    assert emulated()["captures"] == 4
    monkeypatch.setattr(graphs, "MAX_STATIC_BYTES", 100)
    for _ in range(3):
        graphs.run(("loop", 9), loop, (torch.randn(9, 2, 3), w))  # 9·2·3 floats: never kept
    assert emulated()["captures"] == 4 and len(graphs._ENTRIES) == 2
    monkeypatch.setattr(graphs, "MAX_STATIC_BYTES", 1 << 20)
    monkeypatch.setattr(graphs, "MAX_TOTAL_BYTES", 300)  # T=3 keeps 204 B, T=1 108 B: not both
    graphs.clear()
    for T in (3, 1):
        for _ in range(2):
            graphs.run(("loop", T), loop, (torch.randn(T, 2, 3), w))
    assert [k[0] for k in graphs._ENTRIES] == [("loop", 1)]


def test_matmul_precision_is_part_of_the_key(emulated):
    w, x = torch.randn(3, 3), torch.randn(2, 2, 3)
    prec = torch.get_float32_matmul_precision()
    try:
        for setting in ("highest", "high"):
            torch.set_float32_matmul_precision(setting)
            for _ in range(2):
                graphs.run(("loop",), loop, (x, w))
    finally:
        torch.set_float32_matmul_precision(prec)
    assert emulated()["captures"] == 2


def test_disabled_or_other_devices_do_not_apply():
    assert graphs.applies(torch.device("cpu"))
    graphs.set_enabled(False)
    try:
        assert not graphs.applies(torch.device("cpu"))
        assert graphs.call("loop", loop, (torch.randn(2, 1, 3), torch.randn(3, 3))) is not None
    finally:
        graphs.set_enabled(True)
    graphs.emulate(False)
    assert not graphs.applies(torch.device("cpu"))


def test_threads_replaying_one_entry_each_get_their_own_result():
    w = torch.randn(3, 3)
    x0 = torch.randn(6, 2, 3)
    for _ in range(2):
        graphs.run(("loop",), loop, (x0, w))
    xs = [torch.randn(6, 2, 3) for _ in range(8)]
    got = [None] * 8

    def work(i):
        for _ in range(5):
            got[i] = graphs.run(("loop",), loop, (xs[i], w))[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(g, loop(x, w)[0]) for g, x in zip(got, xs, strict=True))


def test_gpu_limits_scale_with_device_memory(monkeypatch):
    class Props:
        total_memory = 141 * 10 ** 9  # an H200

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props)
    per_entry, total = graphs._limits(torch.device("cuda", 0))
    assert (per_entry, total) == (int(0.10 * Props.total_memory), int(0.25 * Props.total_memory))
    Props.total_memory = 4 << 30  # a small GPU keeps the floors
    assert graphs._limits(torch.device("cuda", 0)) == (graphs.MAX_STATIC_BYTES, graphs.MAX_TOTAL_BYTES)
    assert graphs._limits(torch.device("cpu")) == (graphs.MAX_STATIC_BYTES, graphs.MAX_TOTAL_BYTES)
