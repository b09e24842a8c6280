"""Exact J v for the engine's MLP by one tangent pass over the recorded forward: no double backward.

A Jacobian-vector product is the forward pass's derivative along v. For the feed-forward MLP every
quantity it needs was recorded by the estimate's forward (`Recorder`: each hidden layer's input x_k and
summed inputs a_k = W_k x_k, the head's input), so J v is a short chain over them, with dx_0 = 0:

    da_k   = dx_k W_kᵀ + x_k dW_kᵀ
    dy_k   = (g_k/σ_k) ⊙ P(da_k) + x̂_k ⊙ dg_k + db_k       LayerNorm, P(z) = z − mean(z) − x̂ mean(z ⊙ x̂)
             da_k + db_k                                     norm 'none' (PlainLinear)
    dx_k+1 = dy_k ⊙ 1[x_k+1 > 0]                             ReLU (x_k+1 = relu(y_k), recorded)
    J v    = dx_L W_outᵀ + x_L dW_outᵀ + db_out

The same numbers as the double backward (`FisherPass.jvp`, float64 tests to 1e-12), at a third of its
operations: the double backward runs LayerNorm's full second derivative (dozens of operations a layer)
where the tangent map needs eight, and the trace pass need not build a differentiable backward graph.
Models of any
other structure or normalizer (BatchNorm, RMSNorm, WeightNorm, conv, recurrent) keep the double backward:
`MLPTangent.of` returns None for them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from workers.engine.models import MLP
from workers.engine.norms import LayerNorm, NormLinear, PlainLinear


class MLPTangent:
    """J v over one recorded forward of an engine `MLP` whose hidden layers are LayerNorm or plain."""

    def __init__(self, layers: list[dict], head: dict, index: dict[str, int]):
        self.layers, self.head, self.index = layers, head, index

    @classmethod
    def of(cls, model: nn.Module, recorder, names: list[str], pred: Tensor) -> MLPTangent | None:
        """The tangent pass for this forward, or None when the model or the record does not qualify:
        an engine MLP (hidden layers, then the Linear head `out` whose one call gave `pred`), every hidden
        layer a NormLinear with a per-case LayerNorm or a PlainLinear (exactly those classes, no method
        replaced on an instance), each (and each LayerNorm) recorded once. Such a record is also complete
        for the per-sample statistics: every use of a weight went through its recorded call
        (FisherPass.sampled skips their numeric check)."""
        if type(model) is not MLP or recorder is None or _overridden(model, model.out):
            return None
        index = {n: i for i, n in enumerate(names)}
        calls = recorder.calls
        layers: list[dict] = []
        for k, layer in enumerate(model.hidden):
            entries = calls.get(f"hidden.{k}", [])
            if len(entries) != 1 or entries[0][0] is None:
                return None
            if type(layer) not in (NormLinear, PlainLinear) or _overridden(
                layer, getattr(layer, "norm", None)
            ):
                return None
            x, a = entries[0][0], entries[0][1]
            spec: dict = {"x": x, "weight": layer.weight, "w": index.get(f"hidden.{k}.weight")}
            if type(layer) is NormLinear and type(layer.norm) is LayerNorm and not layer.norm.channels:
                if len(calls.get(f"hidden.{k}.norm", [])) != 1:  # its gain's record: one call too
                    return None
                norm = layer.norm
                xhat, _, rstd = torch.native_layer_norm(a, (a.shape[-1],), None, None, norm.eps)
                spec.update(
                    kind="layer",
                    xhat=xhat,
                    scale=rstd * norm.gain.detach(),
                    gain=index.get(f"hidden.{k}.norm.gain"),
                    bias=index.get(f"hidden.{k}.norm.bias"),
                )
            elif type(layer) is PlainLinear:
                spec.update(
                    kind="none", bias=index.get(f"hidden.{k}.bias") if layer.bias is not None else None
                )
            else:
                return None
            layers.append(spec)
        head_calls = calls.get("out", [])
        if not layers or type(model.out) is not nn.Linear or len(head_calls) != 1 or head_calls[0][0] is None:
            return None
        x_out, out = head_calls[0][0], head_calls[0][1]
        if out.shape != pred.shape or out.data_ptr() != pred.data_ptr():
            return None
        inputs = [spec["x"] for spec in layers[1:]] + [x_out]
        for spec, nxt in zip(layers, inputs, strict=True):
            spec["mask"] = nxt > 0  # ReLU's derivative where it was taken
        head = {
            "x": x_out,
            "weight": model.out.weight,
            "w": index.get("out.weight"),
            "bias": index.get("out.bias") if model.out.bias is not None else None,
        }
        return cls(layers, head, index)

    def __call__(self, v: list[Tensor]) -> Tensor:
        """J v (v: one tensor per parameter, in the pass's order)."""
        with torch.no_grad():
            dx: Tensor | None = None
            for spec in self.layers:
                da = _linear_tangent(dx, spec, v)
                if spec["kind"] == "layer":
                    xhat = spec["xhat"]
                    along = (da * xhat).mean(-1, keepdim=True)
                    dy = (
                        (da - da.mean(-1, keepdim=True)).addcmul_(xhat, along, value=-1.0).mul_(spec["scale"])
                    )
                    if spec["gain"] is not None:
                        dy.addcmul_(xhat, v[spec["gain"]])
                else:
                    dy = da
                if spec["bias"] is not None:
                    dy = dy.add_(v[spec["bias"]])
                dx = dy.mul_(spec["mask"])
            out = _linear_tangent(dx, self.head, v)
            if self.head["bias"] is not None:
                out = out.add_(v[self.head["bias"]])
            return out


def _linear_tangent(dx: Tensor | None, spec: dict, v: list[Tensor]) -> Tensor:
    """d(x Wᵀ) = dx Wᵀ + x dWᵀ (either part absent when its tangent is)."""
    w = spec["weight"].detach()
    out = None if dx is None else dx @ w.t()
    if spec["w"] is not None:
        part = spec["x"] @ v[spec["w"]].t()
        out = part if out is None else out.add_(part)
    if out is None:
        out = spec["x"].new_zeros((spec["x"].shape[0], w.shape[0]))
    return out


def _overridden(*modules) -> bool:
    """Whether a method the tangent pass relies on was replaced on an instance (the recorder's own
    wrappers are gone by the time the pass is built): then the class's forward is not what ran."""
    return any(
        m is not None and any(name in vars(m) for name in ("forward", "summed", "normalize")) for m in modules
    )
