"""The engine: `train(spec, emit, should_stop, settings=…) -> RunResult`, `load_task(spec, settings)`.

Settings are passed in by the caller (CLI, worker start, test); the engine reads no environment.

`train` is imported eagerly on purpose: it shares its name with the submodule `workers.engine.train`,
and binding the function here after the submodule loads keeps `from workers.engine import train` the
function. Reach the module itself through `importlib.import_module("workers.engine.train")`.
"""

from __future__ import annotations

from workers.engine.tasks import TaskData, TaskUnavailable, load_task
from workers.engine.train import train

__all__ = ["TaskData", "TaskUnavailable", "load_task", "train"]
