"""EngineOptions: the engine's path choices come from the Settings an edge built, reach the layers of one
model (never a process-wide switch), and read no environment themselves."""

from __future__ import annotations

import torch

from normlab.settings import Settings
from workers.engine.options import DEFAULT, EngineOptions, apply_options
from workers.engine.recurrent import GRULayer, LSTMLayer


def test_from_settings_maps_every_field_and_records_the_path_choices(tmp_path):
    settings = Settings(
        kernel_backend="torch", cuda_graphs=False, native_step=False, cc="gcc", cache_dir=tmp_path
    )
    options = EngineOptions.from_settings(settings)
    assert options == EngineOptions(
        kernel_backend="torch", cuda_graphs=False, c_step=False, cc="gcc", cache_dir=tmp_path
    )
    assert options.record() == {"kernel_backend": "torch", "cuda_graphs": False, "c_step": False}


def test_the_environment_is_not_read_below_the_edge(monkeypatch):
    monkeypatch.setenv("NORMLAB_NATIVE_STEP", "false")
    monkeypatch.setenv("NORMLAB_KERNEL_BACKEND", "torch")
    assert EngineOptions() == DEFAULT and DEFAULT.c_step and DEFAULT.kernel_backend == "auto"
    edge = EngineOptions.from_settings(Settings())  # an edge reads NORMLAB_* and passes them on
    assert not edge.c_step and edge.kernel_backend == "torch"


def test_two_models_in_one_process_keep_their_own_options():
    torch.manual_seed(0)
    a = apply_options(torch.nn.Sequential(LSTMLayer(4, 8), GRULayer(8, 8)), EngineOptions(c_step=False))
    b = apply_options(torch.nn.Sequential(LSTMLayer(4, 8)), EngineOptions(kernel_backend="torch"))
    layers_a = [m for m in a.modules() if hasattr(m, "engine_options")]
    # every path-picking layer, LayerNorms included, holds its model's options
    assert len(layers_a) > 2 and all(not m.engine_options.c_step for m in layers_a)
    assert all(
        m.engine_options.kernel_backend == "torch" for m in b.modules() if hasattr(m, "engine_options")
    )
    assert LSTMLayer(4, 8).engine_options is DEFAULT  # a layer built on its own takes the defaults


def test_the_layernorm_calibrator_is_one_per_options_kept_under_its_cache_dir(tmp_path):
    """CPU tensors get none (torch computes LN there); the CUDA one is built once per options object and
    keeps its choices under cache_dir/kernels, so the next worker process reads what this one measured."""
    options = EngineOptions(cache_dir=tmp_path)
    assert options.ln_calibrator(torch.zeros(2, 3)) is None
    calibrator = options._calibrator
    assert calibrator is options._calibrator and calibrator.cache_dir == tmp_path / "kernels"
    assert (
        options.replace(cache_dir=tmp_path / "other")._calibrator.cache_dir == tmp_path / "other" / "kernels"
    )
