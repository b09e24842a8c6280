"""`register_norm`: a normalizer of your own in the lab's catalog (Lab form, API checks, presets, Table 1).

The declaration is torch-free: a name, a description, two flags and the factory's import path, so the
API (which never imports torch) checks specs against it; only the worker imports the factory. Declare
it in a torch-free module and name that module either with an entry point (group `normlab.norms`, in
the package's pyproject.toml) or in NORMLAB_PLUGINS (comma-separated module names); the API, the
workers and the CLI import those at their start (`load_plugins`).

    # my_norm/__init__.py  (no torch here)
    from normlab_client.norms import register_norm
    register_norm("dyt", "my_norm.module:DyT", description="Dynamic Tanh", scale_invariant=False)

The factory is called as `factory(features, gain_init)` and returns a `torch.nn.Module` mapping a
(cases, features) tensor to one of the same shape; normlab puts it after each bias-free linear layer
of an MLP or a Transformer block, and with `recurrent=True` in the recurrent cells' projections too.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, replace
from importlib.metadata import entry_points

from normlab_client.catalog import NORMS, TASKS

ENTRY_POINT_GROUP = "normlab.norms"
NAME = re.compile(r"^[a-z][a-z0-9_]{0,23}$")
FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
BUILT_IN = frozenset(NORMS)
# The models a declared normalizer is placed in: the MLPs (flat tasks) and the Transformer; the
# recurrent nets only when it says it handles a recurrence (recurrent=True). ConvNets normalize
# (cases, channels, …) maps, which a (cases, features) factory does not take.
RECURRENT_KIND = "sequence"
TRANSFORMER_TASKS = ("reverse",)


@dataclass(frozen=True)
class NormDeclaration:
    """A registered normalizer: `factory` is "module:attribute" (imported by the worker only)."""

    name: str
    factory: str
    description: str
    recurrent: bool
    scale_invariant: bool

    def public(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "recurrent": self.recurrent,
            "scale_invariant": self.scale_invariant,
            "factory": self.factory,
        }


_REGISTERED: dict[str, NormDeclaration] = {}


def register_norm(
    name: str,
    factory: str,
    *,
    description: str = "",
    recurrent: bool = False,
    scale_invariant: bool = False,
) -> NormDeclaration:
    """Add a normalizer to the catalog (again with the same declaration: no change); returns it.

    `scale_invariant`: its output does not change when its input is multiplied by a positive number
    (as LayerNorm's); Table 1 on the Invariance page measures whether that is so."""
    if not NAME.match(name):
        raise ValueError(
            f"normalizer name {name!r}: use lowercase letters, digits and _ (at most 24, a letter first)"
        )
    if name in BUILT_IN:
        raise ValueError(f"{name!r} is a built-in normalizer; choose another name")
    if not isinstance(factory, str) or not FACTORY.match(factory):
        raise ValueError(f"factory {factory!r}: give its import path as 'package.module:attribute'")
    declared = NormDeclaration(
        name, factory, description or f"{name} (registered)", recurrent, scale_invariant
    )
    known = _REGISTERED.get(name)
    if known is not None:
        if known != declared:
            raise ValueError(f"normalizer {name!r} is already registered differently ({known.factory})")
        return known
    _REGISTERED[name] = declared
    NORMS[name] = declared.description
    for task_name, task in TASKS.items():
        if _takes(task_name, task.kind, task.norms, recurrent):
            TASKS[task_name] = replace(task, norms=(*task.norms, name))
    return declared


def _takes(task: str, kind: str, norms: tuple[str, ...], recurrent: bool) -> bool:
    generic = "rms" in norms  # the tasks whose models take any per-feature normalizer
    if kind == "image" or not generic:
        return False
    return kind != RECURRENT_KIND or recurrent or task in TRANSFORMER_TASKS


def registered() -> dict[str, NormDeclaration]:
    """Every registered normalizer by name (a copy)."""
    return dict(_REGISTERED)


def declaration(name: str) -> NormDeclaration | None:
    return _REGISTERED.get(name)


def load_plugins(modules: str | list[str] = "") -> list[str]:
    """Import the entry points of group `normlab.norms` and the named modules (comma-separated), which
    register their normalizers; returns the names registered. A module that fails to import raises with
    its name (a server must not start without a normalizer it was told to serve)."""
    names = [m.strip() for m in (modules.split(",") if isinstance(modules, str) else modules) if m.strip()]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:
            raise RuntimeError(f"normalizer plugin {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
    for module in names:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise RuntimeError(f"NORMLAB_PLUGINS: module {module!r} failed to import: {exc}") from exc
    return sorted(_REGISTERED)
