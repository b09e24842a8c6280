"""`Hooks`: statistics of every normalization module of a user's model, kept on its device by forward
hooks and read to the host only on recorded steps (the user's own torch, imported here only).

Per norm module (by its path in the model): the input's mean and RMS over all its values and their
spread over the batch (standard deviation over cases of each case's mean and RMS), the output's RMS,
‖γ‖ and ‖β‖, the share of saturated units where the module says how (`normlab_saturated(x)`), and the
gradient norm reaching its parameters, ‖∂L/∂(γ, β)‖. Recurrent modules (nn.LSTM, nn.GRU, nn.RNN): the
hidden state's norm per time step, averaged over the batch.

Under `torch.compile` the forward hooks compute on every step (inside the graph: no branch on Python
state, hence no recompile); in eager mode only on the steps that are recorded.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
    *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()),
)
RECURRENT_TYPES: tuple[type[nn.Module], ...] = (nn.LSTM, nn.GRU, nn.RNN)
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.")  # DDP, torch.compile, FSDP
STATS = ("in_mean", "in_rms", "in_mean_spread", "in_rms_spread", "out_rms", "saturated")


def module_path(path: str) -> str:
    """The path as the user wrote the model, without the wrappers' own attribute names."""
    for prefix in WRAPPER_PREFIXES:
        path = path.replace(prefix, "")
    return path


def find_modules(model: nn.Module, names: list[str]) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
    """({path: norm module}, {path: recurrent module}): torch's normalizers, modules that declare
    `normlab_norm = True`, and those named in `names` (paths as `module_path` gives them)."""
    norms: dict[str, nn.Module] = {}
    recurrent: dict[str, nn.Module] = {}
    for raw, m in model.named_modules():
        path = module_path(raw)
        if isinstance(m, NORM_TYPES) or getattr(m, "normlab_norm", False) or path in names:
            norms.setdefault(path, m)
        elif isinstance(m, RECURRENT_TYPES) or getattr(m, "normlab_recurrent", False):
            recurrent.setdefault(path, m)
    missing = [n for n in names if n not in norms]
    if missing:
        raise ValueError(
            f"norms=: no module at {', '.join(missing)}; paths look like {next(iter(norms), 'a.b')}"
        )
    return norms, recurrent


def _rows(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """One row per case: the values a per-case statistic is taken over."""
    shape = getattr(module, "normalized_shape", None)
    if isinstance(shape, tuple | list) and x.dim() > len(shape):  # LayerNorm, RMSNorm: trailing dims
        return x.reshape(-1, math.prod(shape))
    if isinstance(module, NORM_TYPES):  # BatchNorm, GroupNorm, InstanceNorm: (cases, channels, …)
        return x.reshape(x.shape[0], -1)
    return x.reshape(-1, x.shape[-1])  # a module of the user's own: per-feature, as LayerNorm


def norm_stats(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The STATS of one call, as one float32 tensor on the module's device."""
    rows = _rows(module, x).float()
    case_mean = rows.mean(dim=1)
    case_rms = rows.pow(2).mean(dim=1).sqrt()
    saturate = getattr(module, "normlab_saturated", None)
    saturated = saturate(x).float().reshape(()) if callable(saturate) else torch.full((), float("nan"))
    return torch.stack(
        [
            case_mean.mean(),
            case_rms.pow(2).mean().sqrt(),
            case_mean.std(correction=0),
            case_rms.std(correction=0),
            y.float().pow(2).mean().sqrt(),
            saturated.to(case_mean.device),
        ]
    )


def hidden_norms(module: nn.Module, output: Any) -> torch.Tensor | None:
    """‖h_t‖ per time step, averaged over the batch (None for a packed sequence)."""
    out = output[0] if isinstance(output, tuple) else output
    if not isinstance(out, torch.Tensor) or out.dim() != 3:
        return None
    time_dim = 1 if getattr(module, "batch_first", False) else 0
    norms: torch.Tensor = out.float().norm(dim=-1).mean(dim=1 - time_dim)
    return norms


def _affine(module: nn.Module) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    gamma = next((getattr(module, n) for n in ("weight", "gain", "gamma") if _param(module, n)), None)
    beta = next((getattr(module, n) for n in ("bias", "beta") if _param(module, n)), None)
    return gamma, beta


def _param(module: nn.Module, name: str) -> bool:
    return isinstance(getattr(module, name, None), nn.Parameter)


class Hooks:
    """Forward hooks on the norm and recurrent modules; gradient hooks on their parameters and on all of
    the model's (the total gradient norm). `active`: whether the coming step is recorded."""

    def __init__(self, model: nn.Module, names: list[str]):
        self.norms, self.recurrent = find_modules(model, names)
        self.active = False
        self.latest: dict[str, torch.Tensor] = {}
        self.hidden: dict[str, torch.Tensor] = {}
        self.grad_sq: dict[str, torch.Tensor] = {}
        self._handles: list[Any] = []
        # every key present from the start: a compiled graph that sets them meets the same dict each step
        self.latest = {path: _nan_stats(m) for path, m in self.norms.items()}
        for path, m in self.norms.items():
            self._handles.append(m.register_forward_hook(self._norm_hook(path)))
            for p in _affine(m):
                if p is not None and p.requires_grad:
                    self._handles.append(_on_grad(p, self._grad_hook(path)))
        for path, m in self.recurrent.items():
            self._handles.append(m.register_forward_hook(self._recurrent_hook(path)))
        for p in model.parameters():
            if p.requires_grad:
                self._handles.append(_on_grad(p, self._grad_hook("")))

    def _norm_hook(self, path: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if not (torch.compiler.is_compiling() or self.active) or not args:
                return
            if isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor):
                with torch.no_grad():
                    self.latest[path] = norm_stats(module, args[0].detach(), output.detach())

        return hook

    def _recurrent_hook(self, path: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if not (torch.compiler.is_compiling() or self.active):
                return
            with torch.no_grad():
                norms = hidden_norms(module, output)
                if norms is not None:
                    self.hidden[path] = norms.detach()

        return hook

    def _grad_hook(self, path: str) -> Any:
        def hook(p: torch.Tensor) -> None:  # runs in autograd's engine, eager also under compile
            if self.active and p.grad is not None:
                sq = p.grad.detach().float().pow(2).sum()
                self.grad_sq[path] = self.grad_sq[path] + sq if path in self.grad_sq else sq

        return hook

    def read(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float | None]:
        """(per norm module, per recurrent module, total gradient norm) of the step just taken: one
        copy to the host for all of them."""
        paths = [p for p in self.norms if p in self.latest]
        with torch.no_grad():
            extra = []
            for p in paths:
                gamma, beta = _affine(self.norms[p])
                dev = self.latest[p].device
                extra.append(
                    torch.stack(
                        [
                            gamma.detach().float().norm().to(dev) if gamma is not None else _nan(dev),
                            beta.detach().float().norm().to(dev) if beta is not None else _nan(dev),
                            self.grad_sq[p].sqrt().to(dev) if p in self.grad_sq else _nan(dev),
                        ]
                    )
                )
            rows = [torch.cat([self.latest[p], e]).cpu() for p, e in zip(paths, extra, strict=True)]
        names = (*STATS, "gamma_norm", "beta_norm", "grad_norm")
        modules = [
            {"name": p, "type": type(self.norms[p]).__name__, **dict(zip(names, _floats(r), strict=True))}
            for p, r in zip(paths, rows, strict=True)
        ]
        recurrent = [
            {
                "name": p,
                "type": type(self.recurrent[p]).__name__,
                "hidden_norms": _floats(self.hidden[p].cpu()),
            }
            for p, m in self.recurrent.items()
            if p in self.hidden
        ]
        total = float(self.grad_sq[""].sqrt()) if "" in self.grad_sq else None
        self.grad_sq.clear()  # latest and hidden keep their keys: a compiled graph guards on them
        return modules, recurrent, total

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def _on_grad(p: torch.Tensor, hook: Any) -> Any:
    """A hook run once p.grad holds this step's gradient (torch ≥ 2.1)."""
    return p.register_post_accumulate_grad_hook(hook)  # type: ignore[no-untyped-call]


def _nan_stats(module: nn.Module) -> torch.Tensor:
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    return torch.full((len(STATS),), float("nan"), device=device)


def _nan(device: torch.device) -> torch.Tensor:
    return torch.full((), float("nan"), device=device)


def _floats(t: torch.Tensor) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in t.tolist()]
