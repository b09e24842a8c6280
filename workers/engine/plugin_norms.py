"""`plugin_normalizer(name, features, gain_init)`: a registered normalizer's module (normlab_client.norms),
built by its factory and shaped like the engine's own (called as `norm(a, step)`)."""

from __future__ import annotations

import importlib

import torch
from torch import nn

from normlab_client.norms import declaration


class PluginNorm(nn.Module):
    """The user's module under `inner`; the recurrent layers' `step` argument is not passed to it (a
    per-case normalizer has no use for it)."""

    def __init__(self, name: str, inner: nn.Module):
        super().__init__()
        self.name, self.inner = name, inner

    def forward(self, a: torch.Tensor, step: int | None = None) -> torch.Tensor:
        return self.inner(a)


def plugin_normalizer(name: str, features: int, gain_init: float = 1.0) -> PluginNorm | None:
    """None when no normalizer of this name is registered."""
    declared = declaration(name)
    if declared is None:
        return None
    module_name, _, attr = declared.factory.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    inner = factory(features, gain_init)
    if not isinstance(inner, nn.Module):
        raise TypeError(
            f"normalizer {name!r}: {declared.factory} returned {type(inner).__name__}, not a Module"
        )
    return PluginNorm(name, inner)
