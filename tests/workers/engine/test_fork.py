"""Checkpoints and forks in the engine: a fork without changes continues bit for bit (the checkpoint
holds everything), each allowed change does what it says, a corrupt checkpoint is refused by name, and
interventions take effect at their step, live or replayed from the spec."""

from __future__ import annotations

import inspect

import pytest
import torch

from normlab import checkpoints
from normlab.fork import child_spec
from normlab.settings import Settings
from normlab_client.spec import Intervention, RunSpec
from workers.engine import train
from workers.engine.checkpoint import Resume, load
from workers.engine.fork import map_parameters
from workers.engine.loop_setup import build_model
from workers.engine.tasks import load_task

SMALL = {"steps": 12, "eval_every": 5, "checkpoint_every": 4, "device": "cpu"}


@pytest.fixture
def ck_settings(engine_data_dir, tmp_path) -> Settings:
    return Settings(data_dir=engine_data_dir, checkpoint_dir=tmp_path / "ck", kernel_backend="torch")


def scalars(events) -> list[tuple[int, float, float | None]]:
    return [(e.step, e.payload["train_loss"], e.payload["val_loss"]) for e in events if e.kind == "scalars"]


def run(spec: RunSpec, settings: Settings, run_id: str, **kw):
    events: list = []
    result = train(spec, events.append, settings=settings, run_id=run_id, **kw)
    assert result.status == "completed", result.error
    return result, events


def fork_of(parent: RunSpec, parent_id: str, step: int, checkpoint: int | None = None, **changes) -> RunSpec:
    return child_spec(parent.resolved(), parent_id, step, changes, checkpoint)


@pytest.mark.parametrize(
    "model",
    [
        {"task": "digits", "norm": "layer", "hidden_size": 32},  # MLP
        {"task": "seq-digits", "norm": "layer", "hidden_size": 16},  # LSTM
        {"task": "conv-digits", "norm": "layer"},  # ConvNet
        {"task": "conv-digits", "norm": "batch"},  # BatchNorm: running statistics used by validation
        {"task": "seq-digits", "norm": "batch", "hidden_size": 16},  # recurrent BN, per-step statistics
        {  # the probes' own generator (random probe directions, sampled labels)
            "task": "digits",
            "norm": "layer",
            "hidden_size": 16,
            "probes": {"enabled": True, "trace_every": 2, "fisher_every": 3, "budget": 5.0},
        },
    ],
    ids=["mlp", "lstm", "convnet", "conv-bn", "lstm-bn", "mlp-probes"],
)
def test_a_fork_without_changes_continues_bit_for_bit(model, ck_settings):
    parent = RunSpec(**model, **SMALL)
    _, events = run(parent, ck_settings, "parent")
    assert checkpoints.steps(ck_settings.checkpoint_root, "parent") == [0, 4, 8, 12]
    # at a checkpoint (4), and between two (6: the child replays 5 → 6 from the checkpoint of step 4)
    for step, loaded in ((4, None), (6, 4)):
        _, child_events = run(fork_of(parent, "parent", step, loaded), ck_settings, f"child{step}")
        # every step after the fork: the same train loss, and the same validation loss (BN: its running
        # statistics)
        assert scalars(child_events) == scalars(events)[step:]
        assert [e.step for e in child_events if e.kind == "scalars"][0] == step + 1
        probes = [
            (e.step, e.kind, e.payload) for e in events if e.kind in ("hidden", "fisher") and e.step > step
        ]
        assert probes == [(e.step, e.kind, e.payload) for e in child_events if e.kind in ("hidden", "fisher")]
        if parent.probes.enabled:  # Fisher estimates after the fork draw from the probes' generator
            assert [s for s, kind, _ in probes if kind == "fisher"] == [s for s in (5, 8, 11) if s > step]


def test_a_fork_between_checkpoints_replays_to_its_step_then_changes(ck_settings):
    parent = RunSpec(task="digits", norm="layer", hidden_size=16, **SMALL)
    _, events = run(parent, ck_settings, "p")
    _, child = run(fork_of(parent, "p", 7, 4, lr=0.01, norm="rms"), ck_settings, "c")
    said = [e for e in child if e.kind == "log" and e.payload.get("phase") == "replay"]
    assert [e.payload["message"][:40] for e in said] == [
        "Replaying the parent's steps 5 → 7 from ",
        "Replayed to step 7; the fork's own steps",
    ]
    assert any(
        "Forked at step 7 from norm 'layer' to 'rms'" in e.payload["message"]
        for e in child
        if e.kind == "log"
    )
    # the child starts from the parent's weights after step 7: with RMSNorm in place of LayerNorm its first
    # loss differs, and its steps are 8 … 12 at the new learning rate
    assert [s for s, *_ in scalars(child)] == list(range(8, 13))
    assert {e.payload["lr"] for e in child if e.kind == "scalars"} == {0.01}
    # its own checkpoints start at its fork step (another fork of it may start anywhere after)
    assert checkpoints.steps(ck_settings.checkpoint_root, "c") == [7, 8, 12]
    lr_only = fork_of(parent, "p", 7, 4, lr=0.01)
    _, same_weights = run(lr_only, ck_settings, "c2")
    assert scalars(same_weights)[0][1] == scalars(events)[7][1]  # step 8's loss: the weights after step 7


def test_the_replay_applies_the_parents_interventions_before_the_fork(ck_settings):
    spec = RunSpec(task="digits", hidden_size=16, **SMALL)
    parent = spec.model_copy(update={"interventions": [Intervention(step=6, lr=0.02)]})
    _, events = run(parent, ck_settings, "p")
    child = fork_of(parent, "p", 7, 4)
    assert child.parent is not None and [i.step for i in child.parent.replay] == [6]
    _, child_events = run(child, ck_settings, "c")
    assert scalars(child_events) == scalars(events)[7:]
    assert not [e for e in child_events if e.kind == "intervention"]  # the replay reports nothing


def test_a_cancel_during_the_replay_cancels_the_child(ck_settings):
    parent = RunSpec(task="digits", hidden_size=16, **SMALL)
    run(parent, ck_settings, "p")
    events: list = []
    result = train(fork_of(parent, "p", 7, 4), events.append, lambda: True, settings=ck_settings, run_id="c")
    assert result.status == "cancelled" and "while replaying" in events[-1].payload["message"]


def test_checkpoint_holds_batchnorm_statistics_and_the_loop_window(ck_settings):
    parent = RunSpec(task="digits", norm="batch", hidden_size=16, **SMALL)
    run(parent, ck_settings, "p")
    state = load(ck_settings.checkpoint_root, "p", 8)
    assert state["loop"]["step"] == 8
    running = [k for k in state["model"] if k.endswith("running_mean")]
    assert running and all(state["model"][k].abs().sum() > 0 for k in running)
    assert set(state["rng"]) == {"torch", "cuda", "numpy", "python"} and "order" in state["data"]
    assert state["optimizer"]["state"]  # Adam's moments


def test_a_corrupt_or_torn_checkpoint_is_refused_by_name(ck_settings):
    parent = RunSpec(task="digits", hidden_size=16, **SMALL)
    run(parent, ck_settings, "p")
    path = checkpoints.path_for(ck_settings.checkpoint_root, "p", 4)
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0xFF
    path.write_bytes(bytes(raw))
    events: list = []
    result = train(fork_of(parent, "p", 4), events.append, settings=ck_settings, run_id="c")
    assert result.status == "failed" and str(path) in result.error and "checksum" in result.error
    torn = checkpoints.path_for(ck_settings.checkpoint_root, "p", 8)
    torn.write_bytes(torn.read_bytes()[:40])
    with pytest.raises(checkpoints.CheckpointError, match="torn"):
        checkpoints.read(torn)


def test_lr_and_sgd_knobs_change_in_place_keeping_the_optimizer_state(ck_settings):
    parent = RunSpec(task="digits", hidden_size=16, optimizer="sgd", lr=0.05, **SMALL)
    _, events = run(parent, ck_settings, "p")
    changed = fork_of(parent, "p", 4, lr=0.01, momentum=0.5, weight_decay=0.001)
    _, child = run(changed, ck_settings, "c")
    lrs = {e.payload["lr"] for e in child if e.kind == "scalars"}
    assert lrs == {0.01}
    assert not any("reset" in e.payload["message"] for e in child if e.kind == "log")
    # the first step after the fork starts from the same weights: the loss at step 5 is the parent's
    assert scalars(child)[0][1] == scalars(events)[4][1]
    assert scalars(child)[1][1] != scalars(events)[5][1]


def test_another_optimizer_resets_its_state_and_says_so(ck_settings):
    parent = RunSpec(task="digits", hidden_size=16, **SMALL)
    run(parent, ck_settings, "p")
    _, child = run(fork_of(parent, "p", 8, optimizer="sgd", lr=0.1), ck_settings, "c")
    assert any("optimizer's state was reset" in e.payload["message"] for e in child if e.kind == "log")


@pytest.mark.parametrize(("before", "after"), [("layer", "batch"), ("batch", "rms"), ("none", "weight")])
def test_another_normalizer_keeps_shared_parameters_and_starts_new_gains_at_one(before, after, ck_settings):
    parent = RunSpec(task="digits", hidden_size=16, norm=before, **SMALL)
    run(parent, ck_settings, "p")
    _, child = run(fork_of(parent, "p", 4, norm=after), ck_settings, "c")
    said = [
        e.payload["message"] for e in child if e.kind == "log" and "Forked at step 4" in e.payload["message"]
    ]
    assert said and f"'{before}' to '{after}'" in said[0]
    assert any("optimizer's state was reset" in e.payload["message"] for e in child if e.kind == "log")


def test_map_parameters_between_weight_norm_and_others_keeps_each_weight(ck_settings):
    specs = {
        n: RunSpec(task="digits", hidden_size=16, norm=n).resolved() for n in ("none", "weight", "batch")
    }
    data = load_task(specs["none"], ck_settings)
    torch.manual_seed(0)
    plain = build_model(specs["none"], data)
    weighted = build_model(specs["weight"], data)
    map_parameters(plain.state_dict(), weighted, same_norm=False)
    w = plain.state_dict()["hidden.0.weight"].double()
    v, g = weighted.hidden[0].v.double(), weighted.hidden[0].g.double()
    torch.testing.assert_close(g[:, None] * v / v.norm(dim=1, keepdim=True), w, rtol=1e-6, atol=1e-7)
    assert torch.equal(weighted.hidden[0].b, plain.hidden[0].bias)
    back = build_model(specs["batch"], data)
    names = map_parameters(weighted.state_dict(), back, same_norm=False)
    torch.testing.assert_close(back.hidden[0].weight.double(), w, rtol=1e-5, atol=1e-6)
    assert torch.equal(back.hidden[0].norm.gain, torch.ones(16))
    assert torch.equal(back.hidden[0].norm.bias, torch.zeros(16))
    assert torch.equal(back.hidden[0].norm.running_mean, torch.zeros_like(back.hidden[0].norm.running_mean))
    assert "hidden.0.norm.gain" in names["fresh"] and "hidden.0.g·v/‖v‖ → hidden.0.weight" in names["mapped"]


def test_batch_size_steps_and_seed_changes(ck_settings):
    parent = RunSpec(task="digits", hidden_size=16, **SMALL)
    _, events = run(parent, ck_settings, "p")
    result, bigger = run(fork_of(parent, "p", 4, batch_size=64, steps=9), ck_settings, "c1")
    assert result.step == 9 and [s for s, *_ in scalars(bigger)] == list(range(5, 10))
    assert any("Batch size 32 → 64" in e.payload["message"] for e in bigger if e.kind == "log")
    _, reseeded = run(fork_of(parent, "p", 4, seed=7), ck_settings, "c2")
    assert any("follows seed 7" in e.payload["message"] for e in reseeded if e.kind == "log")
    assert scalars(reseeded)[0][1] != scalars(events)[4][1]  # another batch at step 5


def test_probes_can_be_switched_on_in_a_fork(ck_settings):
    parent = RunSpec(task="digits", hidden_size=16, **SMALL)
    run(parent, ck_settings, "p")
    probes = {"enabled": True, "trace_every": 2, "fisher_every": 4}
    _, child = run(fork_of(parent, "p", 4, probes=probes), ck_settings, "c")
    assert any(e.kind == "hidden" for e in child)


def test_a_live_intervention_is_reported_and_replays_from_the_spec(ck_settings):
    spec = RunSpec(task="digits", hidden_size=16, **SMALL)
    calls = iter(range(100))

    def poll():  # the 6th step's poll brings the request
        return (
            [{"kind": "intervention", "changes": {"lr": 0.01, "freeze_gain": True}}]
            if next(calls) == 5
            else []
        )

    _, live = run(spec, ck_settings, "live", poll=poll)
    [event] = [e for e in live if e.kind == "intervention"]
    assert event.step == 6 and event.payload["source"] == "live"
    assert event.payload["changes"]["lr"] == {"old": 0.001, "new": 0.01}
    assert event.payload["changes"]["freeze_gain"] == {"old": False, "new": True}
    assert [e.payload["lr"] for e in live if e.kind == "scalars"] == [0.001] * 5 + [0.01] * 7
    replay = spec.model_copy(update={"interventions": [Intervention(step=6, lr=0.01, freeze_gain=True)]})
    _, replayed = run(replay, ck_settings, "replay")
    assert scalars(replayed) == scalars(live)
    [again] = [e for e in replayed if e.kind == "intervention"]
    assert again.step == 6 and again.payload["changes"] == event.payload["changes"]


def test_retention_keeps_the_latest_and_pinned_checkpoints(ck_settings):
    root = ck_settings.checkpoint_root
    spec = RunSpec(task="digits", hidden_size=16, steps=12, checkpoint_every=2, eval_every=50, device="cpu")
    run(spec, ck_settings, "p")
    assert checkpoints.steps(root, "p") == [0, 2, 4, 6, 8, 10, 12]
    checkpoints.pin(root, "p", 4)
    deleted = checkpoints.prune(root, "p", cap_bytes=0)
    assert deleted == [0, 2, 6, 8, 10] and checkpoints.steps(root, "p") == [4, 12]
    checkpoints.delete_run(root, "p")
    assert checkpoints.steps(root, "p") == []


def test_the_checkpoint_schedule_is_a_function_of_the_spec_alone():
    # no clock, no load, no writer's CPU time among its inputs: a busy host checkpoints the same steps
    assert list(inspect.signature(checkpoints.schedule).parameters) == ["steps", "checkpoint_every", "start"]
    assert checkpoints.schedule(300, None) == [0, 30, 60, 90, 120, 150, 180, 210, 240, 270, 300]
    assert checkpoints.schedule(12, 4) == [0, 4, 8, 12]
    assert checkpoints.schedule(25, None) == [0, 3, 6, 9, 12, 15, 18, 21, 24, 25]
    assert checkpoints.schedule(12, 5) == [0, 5, 10, 12]
    assert checkpoints.schedule(12, 4, start=6) == [6, 8, 12]  # a fork at 6 keeps the parent's multiples
    assert checkpoints.schedule(12, 4, start=12) == [12]
    assert checkpoints.every(5000, None) == 500 and checkpoints.every(3, None) == 1


def test_a_run_checkpoints_exactly_the_steps_its_schedule_names(ck_settings):
    spec = RunSpec(task="digits", hidden_size=16, steps=40, eval_every=50, device="cpu")
    assert spec.resolved().checkpoint_every is None  # left to the default in the stored spec too
    run(spec, ck_settings, "auto")
    kept = checkpoints.steps(ck_settings.checkpoint_root, "auto")
    assert kept == checkpoints.schedule(40, None) == [0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40]


def test_a_resumed_run_continues_its_own_history_bit_for_bit_without_repeating_a_step(ck_settings):
    spec = RunSpec(task="digits", norm="layer", hidden_size=16, **SMALL)
    _, reference = run(spec, ck_settings, "whole")
    stopped: list = []
    # the first worker stops before step 10: checkpoints at 4 and 8, events stored up to step 9
    first = train(spec, stopped.append, lambda: len(scalars(stopped)) >= 9, settings=ck_settings, run_id="r")
    assert first.status == "cancelled" and [s for s, *_ in scalars(stopped)] == list(range(1, 10))
    assert checkpoints.steps(ck_settings.checkpoint_root, "r") == [0, 4, 8]
    stored = [e for e in stopped if not (e.kind == "status" and e.payload["status"] == "cancelled")]
    point = Resume(step=8, seq=stored[-1].seq, reported=9)
    result, resumed = run(spec, ck_settings, "r", resume=point)
    assert result.status == "completed"
    assert resumed[0].seq == point.seq + 1 and [e.seq for e in resumed] == list(
        range(point.seq + 1, point.seq + 1 + len(resumed))
    )
    # every step once: the stored part up to step 9, then the resumed run's own from step 10, equal to
    # the uninterrupted run's to the bit (train and validation loss)
    assert scalars(stored) + scalars(resumed) == scalars(reference)
    assert any("Resumed from its checkpoint of step 8" in e.payload.get("message", "") for e in resumed)


def test_the_writer_hands_back_a_placed_checkpoint_before_its_fsync(ck_settings, monkeypatch):
    import threading

    from workers.engine import checkpoint as ck

    release, synced = threading.Event(), []

    def slow_sync(path):  # a disk that takes its time
        release.wait(30)
        synced.append(path)

    monkeypatch.setattr(checkpoints, "sync", slow_sync)
    root = ck_settings.checkpoint_root
    writer = ck.Writer(root, "w", cap_bytes=1 << 30)
    for step in (3, 6):
        writer.submit({"format": ck.FORMAT, "loop": {"step": step}, "model": {"w": torch.full((4,), step)}})
    writer.close()  # returns with both in place although no fsync has finished
    assert checkpoints.steps(root, "w") == [3, 6] and synced == []
    assert torch.equal(load(root, "w", 6)["model"]["w"], torch.full((4,), 6))
    release.set()
    writer._syncer.join(30)
    assert synced == [checkpoints.path_for(root, "w", 3), checkpoints.path_for(root, "w", 6)]


def test_a_checkpoint_written_without_fsync_reads_back_and_syncs(tmp_path):
    path = checkpoints.path_for(tmp_path, "r", 5)
    size = checkpoints.write(path, b"body", durable=False)
    checkpoints.sync(path)
    assert checkpoints.read(path) == b"body" and size == path.stat().st_size
