"""requirements.lock (the constraints file the README's install and test commands use) pins every
dependency pyproject.toml declares, at a version its specifier allows; the test command uses it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
MACHINE_OWN = {"torch", "triton"}  # each machine's own build, installed first
OURS = {"normlab-client"}  # client/ in this repository, installed from the checkout


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            out[canonicalize_name(name)] = version
    return out


def test_the_lock_pins_every_declared_dependency_within_its_bounds():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [
        *project["dependencies"],
        *(d for ds in project["optional-dependencies"].values() for d in ds),
    ]
    locked = pins()
    assert not MACHINE_OWN & set(locked), "torch and triton stay each machine's own"
    for spec in map(Requirement, declared):
        name = canonicalize_name(spec.name)
        if name in MACHINE_OWN or name in OURS:
            continue
        assert name in locked, f"{spec.name} is declared but not locked: run python scripts/lock.py"
        assert spec.specifier.contains(locked[name], prereleases=True), (
            f"requirements.lock has {spec.name}=={locked[name]}, outside {spec}: run python scripts/lock.py"
        )


def test_the_install_and_test_commands_use_the_lock():
    assert re.search(r"pip install .*-c requirements\.lock", (ROOT / "scripts" / "test").read_text())
    assert "-c requirements.lock" in (ROOT / "README.md").read_text()
