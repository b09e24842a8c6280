"""The Run page's per-block gradient norms at initialisation (frontend/init_gradients.py), from the log
event a real one-step Transformer run writes."""

from __future__ import annotations

import pytest
from dash import no_update

from frontend import init_gradients
from frontend.app import create_app
from normlab.settings import Settings
from normlab_client.spec import RunSpec
from workers.engine import train


@pytest.fixture
def run():
    create_app()  # the pages register with the app
    from frontend.pages import run

    return run


def test_the_bars_are_the_logged_gradient_norms_of_a_real_first_step(run, tmp_path):
    events = []
    settings = Settings(data_dir=tmp_path, kernel_backend="torch")
    train(RunSpec(task="reverse", ln_position="post", steps=1), events.append, settings=settings)
    lines = [e.model_dump() for e in events]
    (logged,) = [e.payload["layer_grad_norms"] for e in events if "layer_grad_norms" in e.payload]
    assert init_gradients.layer_grad_norms(lines) == logged
    fig = init_gradients.init_gradient_figure(lines)
    (bars,) = fig["data"]
    assert list(bars["y"]) == logged and list(bars["x"]) == [f"block {k + 1}" for k in range(6)]
    spec = {"task": "reverse", "norm": "layer", "ln_position": "post"}
    assert run.on_init_gradients(lines, spec, False)["data"][0]["y"] == fig["data"][0]["y"]


def test_before_the_first_step_the_panel_says_when_they_come_and_other_tasks_leave_it_alone(run):
    fig = init_gradients.init_gradient_figure([{"kind": "log", "payload": {"message": "reverse: …"}}])
    assert not fig["data"] and "first step" in fig["layout"]["annotations"][0]["text"]
    assert run.on_init_gradients([], {"task": "digits"}, False) is no_update
