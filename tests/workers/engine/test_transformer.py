"""The tiny Transformer (workers/engine/transformer.py) against its definition in float64, its per-block
gradient norms, the reversal task, and the pre-/post-LN gradient profile at initialisation."""

from __future__ import annotations

import math

import pytest
import torch

from normlab_client.spec import RunSpec
from workers.engine import train
from workers.engine.tasks.reverse import LENGTH, SYMBOLS, reverse_batch
from workers.engine.transformer import Transformer


def _ln(x, gain, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # population variance
    return (x - mu) / torch.sqrt(var + eps) * gain + bias


def _attention(block, x):
    heads = block.attn.heads
    b, t, d = x.shape
    w, c = block.attn.qkv.weight, block.attn.qkv.bias
    q, k, v = (x @ w[i * d : (i + 1) * d].T + c[i * d : (i + 1) * d] for i in range(3))
    dh = d // heads
    out = torch.zeros_like(x)
    for h in range(heads):
        sl = slice(h * dh, (h + 1) * dh)
        scores = q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(dh)
        out[..., sl] = torch.softmax(scores, -1) @ v[..., sl]
    return out @ block.attn.out.weight.T + block.attn.out.bias


def _ffn(block, x):
    first, second = block.ff[0], block.ff[2]
    return torch.relu(x @ first.weight.T + first.bias) @ second.weight.T + second.bias


def _by_definition(model, ids, position):
    x = model.embed.weight[ids] + model.pos[: ids.shape[1]]
    for blk in model.blocks:
        n1 = (blk.norm1.gain, blk.norm1.bias)
        n2 = (blk.norm2.gain, blk.norm2.bias)
        if position == "post":
            x = _ln(x + _attention(blk, x), *n1)
            x = _ln(x + _ffn(blk, x), *n2)
        else:
            x = x + _attention(blk, _ln(x, *n1))
            x = x + _ffn(blk, _ln(x, *n2))
    if position == "pre":
        x = _ln(x, model.final_norm.gain, model.final_norm.bias)
    return x @ model.head.weight.T + model.head.bias


@pytest.mark.parametrize("position", ["pre", "post"])
def test_blocks_compute_the_pre_and_post_layernorm_definitions_in_float64(position):
    torch.manual_seed(0)
    model = Transformer(7, 5, 8, 3, 2, "layer", position).double()
    with torch.no_grad():  # gains and biases away from 1 and 0, so their place in the formula counts
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    ids = torch.randint(0, 7, (4, 5))
    got = model(ids)
    assert got.shape == (4, 5, 7)
    torch.testing.assert_close(got, _by_definition(model, ids, position), rtol=1e-10, atol=1e-10)
    assert (model.final_norm is None) == (position == "post")


def test_layer_grad_norms_are_each_blocks_weight_matrices_gradient_norm():
    torch.manual_seed(1)
    model = Transformer(SYMBOLS, LENGTH, 16, 2, 2).double()
    x, y = reverse_batch(8, torch.Generator().manual_seed(0))
    torch.nn.functional.cross_entropy(model(x).reshape(-1, SYMBOLS), y.reshape(-1)).backward()
    expected = []
    for k in range(2):
        total = sum(
            float(p.grad.pow(2).sum())
            for name, p in model.named_parameters()
            if name.startswith(f"blocks.{k}.") and name.endswith("weight") and "norm" not in name
        )
        expected.append(math.sqrt(total))
    assert model.layer_grad_norms() == pytest.approx(expected, rel=1e-12)


def test_reversal_targets_are_the_inputs_backwards():
    x, y = reverse_batch(3, torch.Generator().manual_seed(5))
    assert x.shape == y.shape == (3, LENGTH) and int(x.max()) < SYMBOLS
    for t in range(LENGTH):
        assert torch.equal(y[:, t], x[:, LENGTH - 1 - t])


def test_at_initialisation_post_ln_weights_the_last_blocks_gradient_more_than_pre_ln(settings):
    # The preset's model (d = 64, 6 blocks), its first step through the engine, logged before the update.
    # Xiong et al.: post-LN's gradient is large at the last layers relative to the first; pre-LN's
    # falls towards the output here (its residual stream grows with depth), so last ÷ first is smaller.
    for seed in range(5):
        norms = {}
        for position in ("pre", "post"):
            logs = []
            spec = RunSpec(task="reverse", ln_position=position, steps=1, seed=seed)
            train(spec, logs.append, settings=settings)
            (entry,) = [e.payload for e in logs if e.kind == "log" and "layer_grad_norms" in e.payload]
            norms[position] = entry["layer_grad_norms"]
        assert len(norms["pre"]) == len(norms["post"]) == 6
        post, pre = norms["post"], norms["pre"]
        assert post[-1] / post[0] > pre[-1] / pre[0], (seed, norms)
