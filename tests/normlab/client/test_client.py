"""`normlab_client` against a real `normlab up`: every method, full-resolution metrics equal to the raw
export, events resumed after a cut connection, the server's errors as NormlabError."""

from __future__ import annotations

import io
import math
from urllib.parse import urlsplit

import httpx
import pandas as pd
import pytest

from normlab_client import Client, Group, NormlabError, Run
from normlab_client.events import Event, RunStatus, RunSummary
from normlab_client.group_models import Claim

from .conftest import TINY, CuttingProxy, insert_history

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab_client(lab):
    with Client(lab.url) as c:
        yield c


@pytest.fixture(scope="module")
def finished(lab_client) -> Run:
    run = lab_client.submit({"task": "digits"}, steps=200, **{k: v for k, v in TINY.items() if k != "task"})
    return run.wait(progress=False, timeout=120)


def export_frame(lab, run_id: str) -> pd.DataFrame:
    csv = httpx.get(lab.api(f"api/runs/{run_id}/export"), params={"format": "csv"}, timeout=60).text
    return pd.read_csv(io.StringIO(csv))


def test_submit_wait_summary_and_typed_events(lab_client, finished, capsys):
    again = lab_client.submit(task="digits", steps=60, hidden_size=16, eval_every=20)
    assert again.wait(progress=True, timeout=120) is again
    bar = capsys.readouterr().err
    assert f"run {again.id}" in bar and "completed at step 60" in bar
    assert finished.status == RunStatus.COMPLETED
    summary = finished.summary
    assert isinstance(summary, RunSummary) and summary.step == 200
    assert math.isfinite(summary.metrics["val_loss"])
    events = list(finished.events(live=False))
    assert all(isinstance(e, Event) for e in events)
    assert [e.seq for e in events] == list(range(1, finished.info.last_seq + 1))
    assert events[-1].terminal and events[-1].payload["status"] == "completed"
    later = list(finished.events(live=True, after=events[-5].seq))
    assert [e.seq for e in later] == [e.seq for e in events[-4:]]


def test_metrics_of_a_trained_run_equal_the_raw_export(lab, finished):
    df = finished.metrics(page_size=7)  # many pages: the seams must neither drop nor repeat a row
    raw = export_frame(lab, finished.id)
    assert len(df) == len(raw) > 0
    pd.testing.assert_frame_equal(df[raw.columns], raw, check_dtype=False, check_exact=True)


def test_full_resolution_metrics_of_a_20000_step_run_equal_the_raw_export(lab, lab_client):
    # The history is written straight into the lab's store (the download path is under test, not
    # training), with a NaN and infinities among the values.
    special = {123: {"train_loss": float("nan")}, 4567: {"grad_norm": float("inf")}, 9000: {"lr": -math.inf}}
    run_id = insert_history(lab.store, 20_000, special)
    df = lab_client.run(run_id).metrics()
    raw = export_frame(lab, run_id)
    assert len(df) == len(raw) == 20_000
    assert df["step"].tolist() == list(range(1, 20_001))  # every step, none sampled
    pd.testing.assert_frame_equal(df[raw.columns], raw, check_dtype=False, check_exact=True)
    assert math.isnan(df.loc[123, "train_loss"]) and df.loc[4567, "grad_norm"] == math.inf
    assert df.loc[9000, "lr"] == -math.inf
    # the dashboard's endpoint, by contrast, sends buckets for a history this long
    drawn = httpx.get(lab.api(f"api/runs/{run_id}/metrics"), params={"max_points": 2000}).json()
    assert drawn["downsampled"] and len(drawn["series"]["train_loss"]["step"]) < 20_000


def test_runs_filters_and_run_lookup(lab_client, finished):
    assert finished.id in [r.id for r in lab_client.runs(task="digits", status="completed")]
    assert finished.id not in [r.id for r in lab_client.runs(status="queued")]
    assert finished.id not in [r.id for r in lab_client.runs(norm="batch")]
    assert lab_client.runs(owner="nobody-here") == []
    assert len(lab_client.runs(limit=1)) == 1
    assert lab_client.run(finished.id).spec.steps == 200


def test_cancel_a_running_run(lab_client):
    run = lab_client.submit(task="digits", steps=20_000, hidden_size=16, eval_every=1000)
    for event in run.events(live=True, timeout=120):
        if event.kind == "scalars":
            break
    assert run.cancel() is run
    run.wait(progress=False, timeout=60)
    assert run.status == RunStatus.CANCELLED and run.done
    run.delete()
    with pytest.raises(NormlabError) as info:
        run.refresh()
    assert info.value.status == 404


def test_events_resume_after_a_cut_connection_without_gap_or_repeat(lab, lab_client):
    run = lab_client.submit(task="digits", steps=1500, hidden_size=16, eval_every=100)
    parts = urlsplit(lab.url)
    proxy = CuttingProxy((parts.hostname, parts.port), after_bytes=3000, cuts=4)
    try:
        with Client(proxy.url) as through:
            seqs = [e.seq for e in Run(through.http, run.id).events(live=True, timeout=120)]
    finally:
        proxy.close()
    assert proxy.cut == 4  # four streams were cut mid-answer, and each was resumed
    streams = [h for h in proxy.heads if "/events" in h]
    assert "last-event-id" not in streams[0].lower()
    resumed = [int(h.lower().split("last-event-id: ")[1].split()[0]) for h in streams[1:]]
    assert len(resumed) >= 4 and resumed == sorted(resumed)  # each reconnect resumed further on
    assert seqs == list(range(1, seqs[-1] + 1))  # no gap, no repeat
    assert seqs[-1] == lab_client.run(run.id).info.last_seq
    assert lab_client.run(run.id).status == RunStatus.COMPLETED


def test_sweep_group_cells_and_finals(lab_client):
    group = lab_client.sweep(task="digits", steps=40, hidden_size=16, eval_every=20, norms=["layer", "none"])
    assert isinstance(group, Group) and len(group.run_ids) == 2
    group.wait(progress=False, timeout=180)
    assert set(group.statuses().values()) == {"completed"}
    arms = group.arms
    assert sorted(arms["arm"]) == ["norm=layer", "norm=none"]
    assert (arms["n"] == 1).all() and arms["mean"].notna().all()
    finals = group.finals()
    assert sorted(finals["run_id"]) == sorted(group.run_ids)
    for _, row in finals.iterrows():  # an arm's mean over one seed is that run's final value
        arm = arms[arms["arm"] == row["arm"]].iloc[0]
        assert arm["mean"] == pytest.approx(lab_client.run(row["run_id"]).summary.metrics["val_loss"])
    assert group.claims == []
    assert lab_client.group(group.id).run_ids == group.run_ids
    assert sorted(r.id for r in lab_client.runs(group=group.id)) == sorted(group.run_ids)


def test_preset_verdicts(lab_client):
    group = lab_client.preset("online", seeds=[0, 1], steps=30)
    assert len(group.run_ids) == 4
    group.wait(progress=False, timeout=180)
    claims = group.claims
    assert claims and all(isinstance(c, Claim) for c in claims)
    assert {c.kind for c in claims} == {"trains", "refused", "better"}
    assert all(isinstance(c.holds, bool) and c.rule for c in claims)


def test_server_errors_raise_normlab_error_with_the_servers_message(lab, lab_client):
    bad = {"task": "digits", "steps": 0}
    said = httpx.post(lab.api("api/runs"), json=bad).json()
    with pytest.raises(NormlabError) as info:
        lab_client.submit(bad)
    assert info.value.status == 422 and info.value.field == "steps"
    assert info.value.message == said["detail"] and info.value.fields == said["fields"]
    with pytest.raises(NormlabError, match="No run with id 'nope'") as info:
        lab_client.run("nope")
    assert info.value.status == 404
    with pytest.raises(NormlabError, match="Unknown preset") as info:
        lab_client.preset("no-such-preset")
    with pytest.raises(NormlabError) as info:
        lab_client.sweep(task="digits", norms=["layer", "layer"])
    assert info.value.status == 422 and info.value.field == "norms"
    with Client("http://127.0.0.1:9") as nowhere, pytest.raises(NormlabError, match="Could not reach"):
        nowhere.runs()


def test_plot_outside_a_notebook_is_a_static_figure_with_the_dashboards_look(finished):
    import plotly.graph_objects as go

    from frontend.figures import norm_color
    from frontend.smoothing import RAW_OPACITY

    fig = finished.plot(smoothing=0.6)
    assert type(fig) is go.Figure  # not a widget: no kernel here
    df = finished.metrics()
    raw, smooth = fig.data[0], fig.data[1]  # the training-loss panel: raw under smoothed
    assert list(raw.x) == df["step"].tolist() and list(raw.y) == df["train_loss"].tolist()
    expected, acc = [], 0.0  # TensorBoard's debiased EMA, from its definition
    for k, v in enumerate(df["train_loss"].tolist(), start=1):
        acc = 0.6 * acc + 0.4 * v
        expected.append(acc / (1 - 0.6**k))
    assert list(smooth.y) == pytest.approx(expected, rel=1e-12)
    assert raw.line.color == smooth.line.color == norm_color(finished.spec.norm)
    assert raw.opacity == RAW_OPACITY
    assert [a.text for a in fig.layout.annotations] == [
        "Training loss",
        "Validation loss",
        "Validation accuracy",
    ]


def test_fork_and_intervene(lab_client, finished):
    child = finished.fork(100, lr=0.002)
    assert isinstance(child, Run) and child.id != finished.id
    child.wait(progress=False, timeout=120)
    assert child.status == RunStatus.COMPLETED and child.spec.lr == 0.002
    first_step = child.metrics()["step"].min()
    assert 1 < first_step <= 101  # it continued from a checkpoint at or before step 100
    with pytest.raises(NormlabError) as info:
        finished.fork(100, hidden_size=64)  # a change that cannot continue the model
    assert info.value.status == 422 and info.value.message
    with pytest.raises(NormlabError) as info:
        finished.intervene(lr=0.1)
    assert info.value.status == 409  # only a running run takes interventions

    live = lab_client.submit(task="digits", steps=20_000, hidden_size=16, eval_every=1000)
    try:
        for event in live.events(live=True, timeout=120):
            if event.kind == "scalars":
                break
        assert live.intervene(lr=0.0123) == {"run_id": live.id, "changes": {"lr": 0.0123}}
        for event in live.events(live=True, timeout=120):
            if event.kind == "intervention":
                assert event.payload["changes"]["lr"] == {"old": 0.001, "new": 0.0123}
                break
    finally:
        live.cancel()
