"""The engine's process-wide switches come from the settings passed in (workers.engine.switches), never
from the environment: train() sets them from its `settings`, and the next run's settings set them again."""

from __future__ import annotations

import os
import subprocess
import sys

import kernels
from kernels import graphs
from normlab.spec import RunSpec
from workers.engine import native, onednn, switches, train


def test_the_settings_passed_to_train_set_every_switch(settings):
    spec = RunSpec(task="digits", steps=2, hidden_size=8, eval_every=2)
    off = settings.model_copy(
        update={"native_step": False, "onednn": False, "kernel_backend": "torch", "cuda_graphs": False}
    )
    try:
        assert train(spec, settings=off).status == "completed"
        assert native.library() is None and "switched off" in native.status()
        assert not onednn.available()
        assert kernels.get_backend() == "torch" and not graphs._ENABLED
        on = settings.model_copy(update={"kernel_backend": "auto"})
        assert train(spec, settings=on).status == "completed"
        assert "switched off" not in native.status()  # looked up again: built, or why not (no compiler)
        assert onednn.available() == (onednn.supported() and onednn.preferred())  # 'auto'
        assert kernels.get_backend() == "auto" and graphs._ENABLED
    finally:
        switches.configure(settings)


def test_the_environment_is_not_read_below_the_edge(tmp_path):
    # NORMLAB_NATIVE_STEP=false is ignored by the engine itself, and honoured once an edge passes it down
    code = (
        "from normlab.settings import Settings; from workers.engine import native, switches;"
        "print(native.status());"
        "switches.configure(Settings()); print(native.status())"
    )
    env = {"NORMLAB_NATIVE_STEP": "false", "NORMLAB_CC": "/bin/false", "NORMLAB_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**_base_env(), **env}, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert "switched off" not in first and "switched off" in second


def test_malloc_is_tuned_once_and_only_when_asked():
    code = (
        "from workers.engine import allocator;"
        "print(allocator.keep_freed_memory(False), allocator._done, allocator.keep_freed_memory(True),"
        " allocator.keep_freed_memory(False))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_base_env(), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    off, untouched, on, again = out.stdout.split()
    assert (off, untouched) == ("False", "None")  # switched off: malloc left alone, and nothing latched
    assert again == on  # once tuned, it stays (a process keeps its malloc settings)


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NORMLAB_")}
