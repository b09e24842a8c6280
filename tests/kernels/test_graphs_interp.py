"""The fused sequences through `kernels.graphs` (CUDA-graph replay) under TRITON_INTERPRET=1 on CPU.

There is no CUDA graph on a CPU: `graphs.emulate(True)` makes a "replay" run the loop again on the
entry's static copies and copy its results into the outputs of the capture, which is exactly the
bookkeeping a real replay relies on (inputs copied in, outputs cloned out, saved tensors private to
each call). Every result here must equal, bit for bit, the same call with graphs off. The `gpu` tests
run real graphs: replays bit for bit, against the eager loop to rounding (cuBLAS may choose another
algorithm on the capture stream).
"""

import pytest
import torch

import kernels

pytestmark = pytest.mark.usefixtures("interp", "emulated_graphs")


F32 = torch.float32
SEQUENCES = {"lstm": kernels.triton_ln_lstm_sequence, "gru": kernels.triton_ln_gru_sequence}


def _leaves(inputs):
    return [t.detach().clone().requires_grad_() for t in inputs]


def _grads(fn, inputs, d_out, cuda_graphs=True):
    leaves = _leaves(inputs)
    hs = fn(*leaves, 1e-5, cuda_graphs=cuda_graphs)
    (hs * d_out).sum().backward()
    return [hs.detach()] + [t.grad for t in leaves]


def _eager(fn, inputs, d_out):
    return _grads(fn, inputs, d_out, cuda_graphs=False)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_replayed_calls_equal_eager_calls_bit_for_bit(gen, sequence_inputs, cell, emulated_graphs):
    fn = SEQUENCES[cell]
    calls = [(sequence_inputs(cell, 3, 2, 4, F32), torch.randn(3, 2, 4, generator=gen)) for _ in range(3)]
    # call 1 runs eagerly, call 2 captures, call 3 replays: new data every time (the static copies must
    # take each call's inputs, parameters included)
    got = [_grads(fn, ins, d) for ins, d in calls]
    counts = emulated_graphs()
    assert counts["captures"] == 2 and counts["replays"] == 4, counts  # forward and backward graphs
    assert counts["lent"] == 2 and counts["evicted"] == 0, counts  # backwards 2 and 3 read the lent buffers
    for (ins, d), g in zip(calls, got, strict=True):
        want = _eager(fn, ins, d)
        assert all(torch.equal(a, b) for a, b in zip(g, want, strict=True))


@pytest.mark.parametrize("first", ["a", "b"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_interleaved_forwards_keep_their_own_saved_tensors(
    gen, sequence_inputs, cell, first, emulated_graphs
):
    # Two layers of one shape share a graph: both forwards replay before either backward, so each call's
    # saved tensors (and returned hs) must be its own: the second forward evicts what the first was lent,
    # and a backward restoring data into the forward's buffers evicts what they hold.
    fn = SEQUENCES[cell]
    warm = sequence_inputs(cell, 3, 2, 4, F32)
    for _ in range(2):
        fn(*_leaves(warm), 1e-5).sum().backward()
    a, b = sequence_inputs(cell, 3, 2, 4, F32), sequence_inputs(cell, 3, 2, 4, F32)
    d = torch.randn(3, 2, 4, generator=gen)
    la, lb = _leaves(a), _leaves(b)
    ha = fn(*la, 1e-5)
    ha_before = ha.detach().clone()
    hb = fn(*lb, 1e-5)
    assert torch.equal(ha.detach(), ha_before)  # the second replay did not overwrite the first output
    for h in (ha, hb) if first == "a" else (hb, ha):
        (h * d).sum().backward()
    counts = emulated_graphs()
    assert counts["replays"] >= 4 and counts["evicted"] == (1 if first == "b" else 2), counts
    for leaves, ins, h in ((la, a, ha), (lb, b, hb)):
        want = _eager(fn, ins, d)
        assert torch.equal(h.detach(), want[0])
        assert all(torch.equal(x.grad, w) for x, w in zip(leaves, want[1:], strict=True))


def test_no_grad_forward_replays_and_returns_fresh_outputs(sequence_inputs, emulated_graphs):
    fn = SEQUENCES["lstm"]
    ins = [sequence_inputs("lstm", 4, 3, 4, F32) for _ in range(3)]
    with torch.no_grad():
        outs = [fn(*x, 1e-5) for x in ins]
    assert emulated_graphs()["replays"] == 2
    with torch.no_grad():
        want = [fn(*x, 1e-5, cuda_graphs=False) for x in ins]
    assert all(torch.equal(o, w) for o, w in zip(outs, want, strict=True))
    assert outs[1].data_ptr() != outs[2].data_ptr()


def test_each_shape_and_eps_has_its_own_graph(sequence_inputs, emulated_graphs):
    fn = SEQUENCES["lstm"]
    with torch.no_grad():
        for T, eps in ((3, 1e-5), (3, 1e-5), (5, 1e-5), (5, 1e-5), (3, 1e-3), (3, 1e-3)):
            ins = sequence_inputs("lstm", T, 2, 4, F32)
            got = fn(*ins, eps)
            assert torch.equal(got, fn(*ins, eps, cuda_graphs=False))
    assert emulated_graphs()["captures"] == 3
