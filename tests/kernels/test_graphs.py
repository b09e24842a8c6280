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


def nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def test_first_call_eager_second_captures_then_replays_with_each_calls_inputs(emulated):
    w = torch.randn(3, 3)
    xs = [torch.randn(4, 2, 3) for _ in range(4)]
    got = [graphs.run(("loop",), loop, (x, w)) for x in xs]
    counts = emulated()
    assert {k: counts[k] for k in ("captures", "replays", "eager", "failed", "lent")} == {
        "captures": 1,
        "replays": 3,
        "eager": 1,
        "failed": 0,
        "lent": 0,
    }
    # the capture copies x, w in once; each replay copies them in and clones out and h out
    assert counts["copied_bytes"] == nbytes(xs[0], w) + 3 * (nbytes(xs[0], w) + nbytes(xs[0], xs[0][0]))
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
    assert not graphs.applies(torch.device("cpu"), enabled=False)
    assert graphs.call("loop", loop, (torch.randn(2, 1, 3), torch.randn(3, 3)), enabled=False) is not None
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
        total_memory = 141 * 10**9  # an H200

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props)
    per_entry, total = graphs._limits(torch.device("cuda", 0))
    assert (per_entry, total) == (int(0.10 * Props.total_memory), int(0.25 * Props.total_memory))
    Props.total_memory = 4 << 30  # a small GPU keeps the floors
    assert graphs._limits(torch.device("cuda", 0)) == (graphs.MAX_STATIC_BYTES, graphs.MAX_TOTAL_BYTES)
    assert graphs._limits(torch.device("cpu")) == (graphs.MAX_STATIC_BYTES, graphs.MAX_TOTAL_BYTES)


# Lending: a toy recurrence through sequence_forward / sequence_backward, like the fused sequences.
def toy_forward(x, w, *, eps):
    """h_t = tanh(x_t + h_{t-1} w + eps): (pre-activations, hs)."""
    pre, hs = x.new_empty(x.shape), x.new_empty(x.shape)
    h = torch.zeros_like(x[0])
    for t in range(x.shape[0]):
        torch.addmm(x[t] + eps, h, w, out=pre[t])
        torch.tanh(pre[t], out=hs[t])
        h = hs[t]
    return pre, hs


def toy_backward(d_hs, x, w, pre, hs):
    d_x = torch.empty_like(x)
    dh = torch.zeros_like(x[0])
    for t in range(x.shape[0] - 1, -1, -1):
        torch.mul(d_hs[t] + dh, 1 - hs[t] * hs[t], out=d_x[t])
        dh = d_x[t] @ w.t()
    h_prev = torch.cat([torch.zeros_like(hs[:1]), hs[:-1]])
    return d_x, h_prev.reshape(-1, w.shape[0]).t() @ d_x.reshape(-1, w.shape[0])


class Toy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, saving, enabled):
        return graphs.sequence_forward(
            ctx, "toy_fwd", toy_forward, (x, w), 0.25, saving, out=1, enabled=enabled
        )[1]

    @staticmethod
    def backward(ctx, d_hs):
        return (*graphs.sequence_backward(ctx, "toy_bwd", toy_backward, d_hs), None, None)


def toy(x, w, enabled=True):
    return Toy.apply(x, w, torch.is_grad_enabled() and (x.requires_grad or w.requires_grad), enabled)


def eager_grads(x, w, d):
    xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
    h = toy(xl, wl, enabled=False)
    h.backward(d)
    return h.detach(), xl.grad, wl.grad


def same(got, want):
    return all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_toy_backward_is_the_gradient():
    x, w = torch.randn(5, 2, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x, w: toy(x, w), (x.requires_grad_(), w.requires_grad_()))


def test_a_training_loop_copies_no_saved_tensor(emulated):
    w = torch.randn(3, 3, requires_grad=True)
    T, B, H = 6, 2, 3
    for step in range(5):
        x, d = torch.randn(T, B, H, requires_grad=True), torch.randn(T, B, H)
        before = dict(graphs.stats)
        h = toy(x, w)
        h.backward(d)
        want = eager_grads(x.detach(), w.detach(), d)
        assert same((h.detach(), x.grad, w.grad), want)
        moved = graphs.stats["copied_bytes"] - before["copied_bytes"]
        if step >= 2:  # replays: in x, w and d; out hs, ∂x and ∂w - pre and hs stay lent to the backward
            assert moved == 4 * (4 * T * B * H + 2 * H * H)
        w.grad = None
        with torch.no_grad():
            w -= 0.1 * want[2]  # updated in place between steps, as an optimizer does
    counts = emulated()
    assert counts["captures"] == 2 and counts["lent"] == 4 and counts["evicted"] == 0, counts


@pytest.mark.parametrize("first", ["a", "b"])
def test_two_forwards_before_either_backward_each_keep_their_data(emulated, first):
    # Two layers of one shape share the graphs: the second forward evicts the first's lease; whichever
    # backward runs first, the other still finds its own data (restoring data into the forward's
    # buffers evicts the lease they hold first).
    w = torch.randn(3, 3)
    for _ in range(3):  # eager, capture, replay
        xa, xb = torch.randn(4, 2, 3, requires_grad=True), torch.randn(4, 2, 3, requires_grad=True)
        wa, wb = w.clone().requires_grad_(), (w * 0.5).requires_grad_()
        d = torch.randn(4, 2, 3)
        ha, hb = toy(xa, wa), toy(xb, wb)
        for h in (ha, hb) if first == "a" else (hb, ha):
            h.backward(d)
        assert same((ha.detach(), xa.grad, wa.grad), eager_grads(xa.detach(), wa.detach(), d))
        assert same((hb.detach(), xb.grad, wb.grad), eager_grads(xb.detach(), wb.detach(), d))
    assert emulated()["evicted"] >= 2


def test_a_retained_graph_keeps_its_data_past_the_next_forward(emulated):
    w = torch.randn(3, 3)
    for _ in range(2):
        toy(torch.randn(4, 2, 3, requires_grad=True), w).sum().backward()
    x, d = torch.randn(4, 2, 3, requires_grad=True), torch.randn(4, 2, 3)
    h = toy(x, w)
    h.backward(d, retain_graph=True)
    toy(torch.randn(4, 2, 3, requires_grad=True), w)  # overwrites the buffers: the lease is still needed
    h.backward(d)
    assert torch.equal(x.grad, 2 * eager_grads(x.detach(), w, d)[1])
    assert emulated()["evicted"] == 1


def test_a_dropped_graph_or_a_finished_backward_costs_no_clone(emulated):
    w = torch.randn(3, 3)
    for _ in range(2):
        toy(torch.randn(4, 2, 3, requires_grad=True), w).sum().backward()
    h = toy(torch.randn(4, 2, 3, requires_grad=True), w)
    del h  # never backpropagated: its node is gone
    toy(torch.randn(4, 2, 3, requires_grad=True), w).sum().backward()  # the node lives on in this loss...
    toy(torch.randn(4, 2, 3, requires_grad=True), w)  # ...but released its saved tensors
    assert emulated()["evicted"] == 0


def test_backward_after_the_graphs_are_cleared(emulated):
    w = torch.randn(3, 3)
    for _ in range(2):
        toy(torch.randn(4, 2, 3, requires_grad=True), w).sum().backward()
    x, d = torch.randn(4, 2, 3, requires_grad=True), torch.randn(4, 2, 3)
    h = toy(x, w)
    graphs.clear()
    h.backward(d)
    assert torch.equal(x.grad, eager_grads(x.detach(), w, d)[1])


def test_a_backward_graph_goes_with_the_forward_graph_whose_buffers_it_reads(monkeypatch, emulated):
    w = torch.randn(3, 3)
    for _ in range(2):
        toy(torch.randn(4, 2, 3, requires_grad=True), w).sum().backward()
    (fwd_key, fwd), (bwd_key, bwd) = graphs._ENTRIES.items()
    assert bwd.partner is fwd and bwd.shared == {1, 2, 3, 4}  # x, w, pre, hs read in place; ∂L/∂hs copied
    monkeypatch.setattr(graphs, "MAX_ENTRIES", 2)
    for _ in range(2):  # a third entry: the forward is least recently used, and its backward goes with it
        graphs.run(("loop",), loop, (torch.randn(2, 2, 3), w))
    assert list(graphs._ENTRIES) == [(("loop",), graphs._math_mode())]
