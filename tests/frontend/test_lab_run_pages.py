"""The Lab's and the Run page's callbacks and layouts, called as functions against a fake API."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from dash import no_update

from frontend import data, logic
from frontend.api_client import ApiError
from frontend.app import create_app
from normlab.api_catalog import build_catalog
from normlab.settings import Settings
from normlab_client.spec import RunSpec

CATALOG = build_catalog(None, Settings(max_steps=700))


class FakeApi:
    def __init__(self):
        self.created: list[dict] = []

    def catalog(self):
        return CATALOG

    def create_run(self, spec):
        self.created.append(spec)
        return {"id": f"r{len(self.created)}", "status": "queued"}

    def run(self, run_id):
        spec = RunSpec(task="adding", lr=0.003, probes={"enabled": True, "budget": 0.15}).resolved()
        return {"id": run_id, "spec": spec.model_dump()}

    def create_sweep(self, body):
        raise ApiError(422, "bad", {"base.probes.budget": "Budget too big."})


@pytest.fixture
def pages(monkeypatch):
    app = create_app()
    api = FakeApi()
    monkeypatch.setattr(data, "api", lambda token=None: api)
    monkeypatch.setattr(
        data,
        "curves_bundle",
        lambda run_ids, **kw: {
            "figure": {"data": [], "layout": {}},
            "map": {"runs": {}},
            "runs": [{"id": r, "spec": {}} for r in run_ids],
            "watch": {"cursor": dict.fromkeys(run_ids, 0)},
            "missing": [],
        },
    )
    from frontend.pages import lab, run

    return app, api, lab, run


def _find(component, cid):
    """The component with this id in a layout tree (None when absent)."""
    if getattr(component, "id", None) == cid:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children] if children is not None else []:
        if hasattr(child, "children") or hasattr(child, "id"):
            found = _find(child, cid)
            if found is not None:
                return found
    return None


def test_submit_refuses_an_empty_field_with_the_servers_range_and_sends_nothing(pages):
    _, api, lab, _ = pages
    from frontend import lab_form

    form = {**lab_form.field_defaults("digits"), "batch_size": None}
    limits = lab_form.field_limits(CATALOG["fields"])
    out = lab.submit("digits", "layer", False, [], "", "", form, None, limits)
    assert out["run_ids"] == [] and api.created == []
    assert out["errors"] == {"batch_size": "Required: enter a whole number from 1 to 4096."}
    assert out["message"] == "Not started: see the message under Batch size."
    form["batch_size"], form["probes"], form["budget"] = 8, ["on"], 40
    out = lab.submit("digits", "layer", False, [], "", "", form, None, limits)
    assert out["run_ids"] == ["r1"] and api.created[0]["probes"]["budget"] == 0.4
    # a sweep the API refuses: the probes.budget message lands under the budget field
    out = lab.submit("digits", "layer", True, ["layer"], "4", "0", form, None, limits)
    assert out["errors"] == {"budget": "Budget too big."} and "Probe budget" in out["message"]


def test_layout_shows_the_servers_limits_and_restores_the_lab_from_the_query_or_cookie(pages):
    app, _, lab, _ = pages
    page = lab.layout(task="adding", lr="0.002", probes="1", runs="a1,b2")
    assert _find(page, {"type": "lab-field", "field": "steps"}).max == 700
    assert _find(page, {"type": "lab-field", "field": "lr"}).value == 0.002
    assert _find(page, "lab-task").value == "adding"
    assert _find(page, "lab-probe-box").style == {}  # probes on: its settings show
    assert _find(page, "lab-board").data == {"runs": ["a1", "b2"], "group": None}
    swept = lab.layout(task="digits", runs="a1", group="g7")  # the last sweep's group: Compare's table
    assert _find(swept, "lab-board").data == {"runs": ["a1"], "group": "g7"}
    assert _find(swept, "lab-compare-link").href == "/compare?runs=a1&group=g7"
    cookie = quote("runs=c3&task=adding&steps=90&sweep=1&sweep_batch=4%2C+8")
    with app.server.test_request_context("/", headers={"Cookie": f"{lab.LAB_COOKIE}={cookie}"}):
        bare = lab.layout()
        assert _find(bare, "lab-board").data == {"runs": ["c3"], "group": None}
        assert _find(bare, {"type": "lab-field", "field": "steps"}).value == 90
        assert _find(bare, "lab-sweep").value == ["on"] and _find(bare, "lab-sweep-batch").value == "4, 8"
        linked = lab.layout(task="digits", budget="40")  # a link to a form keeps this browser's board
        assert _find(linked, "lab-board").data == {"runs": ["c3"], "group": None}
        assert _find(linked, {"type": "lab-field", "field": "steps"}).value == 300  # the link's form
        assert _find(lab.layout(task="digits", runs=""), "lab-board").data == {"runs": [], "group": None}


def test_task_change_keeps_the_probes_switch_and_on_clear_empties_the_board(pages):
    _, _, lab, _ = pages
    from frontend import lab_form

    current = [["on"] if n == "probes" else None for n in lab.FIELD_NAMES]
    out = lab.on_task("adding", "layer", current)
    values = dict(zip(lab.FIELD_NAMES, out[3], strict=True))
    assert values["probes"] == ["on"] and values["seq_len"] == lab_form.field_defaults("adding")["seq_len"]
    cleared = lab.on_clear(1, False)
    assert cleared[0] == {"runs": [], "group": None} and cleared[6] == {"display": "none"}
    # nothing queued: the queue-position poll stays off; no run with probes: the probe strip is hidden
    assert cleared[7] is True and cleared[8] is None and cleared[9] == {"display": "none"}
    assert lab.on_probes_toggle(["on"]) == {} and lab.on_probes_toggle([]) == {"display": "none"}


def test_run_log_puts_warnings_first_and_the_fisher_warning_above_the_panel(pages):
    _, _, _, run = pages
    log = [
        {"step": 0, "payload": {"level": "info", "message": "data loaded"}},
        {
            "step": 5,
            "payload": {
                "level": "warning",
                "message": "No Fisher estimate fitted the budget — raise it to 40 %",
            },
        },
        {"step": 9, "payload": {"level": "warning", "message": "Recurrent BatchNorm keeps statistics"}},
    ]
    items = run.log_items(log)
    assert [i.className for i in items] == ["log-line warning", "log-line warning", "log-line info"]
    assert "raise it to 40 %" in items[0].children[2].children
    assert run.fisher_warning(log) == "No Fisher estimate fitted the budget — raise it to 40 %"
    assert run.fisher_warning(log[:1], "summary note") == "summary note"
    assert run.log_items([])[0].children == "No log lines yet."
    assert len(run.log_items(log + log[1:2])) == 3  # a warning repeated at the end is listed once
    hidden, fisher, warning, retry = run.on_probes(
        {"hidden": [], "fisher": [], "log": log, "ended": True}, False, "", "r9"
    )
    assert "see the warning above" in str(fisher["layout"]["annotations"]) and warning.startswith("No Fisher")
    # the way out: the same run set up in the Lab with the budget the warning asks for
    (link,) = retry
    assert "40 % probe budget" in link.children
    query = logic.decode_query(link.href[1:])
    assert query["budget"] == "40" and query["task"] == "adding" and query["probes"] == "1"
    assert query["lr"] == "0.003"
    too_much = [{"step": 5, "payload": {"level": "warning", "budget_needed": 9.0, "message": "train longer"}}]
    assert run.retry_link("r9", too_much) == []  # above the largest budget: no link


def test_run_log_lists_status_changes_and_evaluations_newest_info_lines_only(pages):
    _, _, _, run = pages
    lines = [
        {"step": 0, "kind": "status", "payload": {"status": "running"}},
        {"step": 0, "kind": "log", "payload": {"level": "info", "message": "MLP: 85514 parameters"}},
        *(
            {"step": s, "kind": "eval", "payload": {"val_loss": 1.0 / s, "accuracy": 0.5, "bpc": None}}
            for s in range(100, 6100, 100)
        ),
        {"step": 6000, "kind": "status", "payload": {"status": "failed", "message": "out of memory"}},
    ]
    items = run.on_lines(lines)
    texts = [
        " ".join(str(c.children) for c in i.children) if isinstance(i.children, list) else i.children
        for i in items
    ]
    # the failure first (an error), then the newest 50 info lines in order, then how many were left out
    assert texts[0] == "error step 6000 run failed: out of memory"
    assert items[0].className == "log-line error"
    assert texts[-2] == "info step 6000 evaluation: val loss 0.0001667, accuracy 0.5"
    assert (
        texts[1]
        == f"info step {6000 - 49 * 100} evaluation: val loss {1 / (6000 - 49 * 100):.4g}, accuracy 0.5"
    )
    assert len(items) == 1 + 50 + 1 and texts[-1] == "12 earlier lines not shown"
    assert run.on_lines([])[0].children == "No log lines yet."


def test_a_groups_compare_link_selects_every_run_of_the_group(pages, monkeypatch):
    from types import SimpleNamespace

    from frontend import ids
    from frontend.pages import compare

    # a map: 8 arms × 5 seeds; the card says n = 5, so Compare must draw all 40 runs, not the first 24
    group = SimpleNamespace(runs=[SimpleNamespace(id=f"r{i:02d}") for i in range(40)], done=True)
    monkeypatch.setattr(compare, "load_group", lambda gid: (group, ""))
    monkeypatch.setattr(compare, "group_box", lambda *a: [])
    monkeypatch.setattr(compare, "run_options", lambda api, runs: [])
    page = compare.layout(group="g1")
    assert len(_find(page, ids.CMP_RUNS).value) == 40
    listed = compare.layout(runs=",".join(f"x{i}" for i in range(30)))
    assert len(_find(listed, ids.CMP_RUNS).value) == 24  # a hand-written list stays capped


def test_the_labs_fork_card_fills_in_the_clicked_runs_values(pages):
    from frontend import fork_view, ids

    # the Lab's card starts empty; a click on a curve names the run (FakeApi: adding, lr 0.003)
    assert _find(fork_view.fork_card(None), ids.FORK_NORM).value is None
    norm, lr, batch, steps, seed = fork_view.on_fork_run("r7", None)
    spec = RunSpec(task="adding", lr=0.003, probes={"enabled": True, "budget": 0.15}).resolved()
    assert (norm, lr, batch, steps, seed) == (spec.norm, 0.003, spec.batch_size, spec.steps, spec.seed)
    assert fork_view.fork_changes({"spec": spec.model_dump()}, norm, lr, batch, steps, seed) == {}


def test_the_run_page_saves_name_tags_and_note_through_the_api(pages, monkeypatch):
    from frontend import ids, run_labels

    app, api, lab, run = pages
    sent: list[tuple[str, dict]] = []
    api.label = lambda rid, body: sent.append((rid, body)) or {"id": rid}
    api.lineage = lambda rid: {"family": [rid]}
    page = run.layout(run_id="r1")
    assert _find(page, ids.RUN_NAME) is not None and _find(page, ids.RUN_NOTE) is not None
    assert run_labels.on_save(1, "r1", " baseline ", "talk, ln,, talk ", "", None) == "Saved."
    assert sent == [("r1", {"name": "baseline", "tags": ["talk", "ln"], "note": None})]

    def refuse(rid, body):
        raise ApiError(403, "Only the run's owner or an admin may edit it.")

    api.label = refuse
    assert "owner" in run_labels.on_save(2, "r1", "x", "", "", None)


def test_the_runs_table_edits_the_ticked_runs_name_tags_and_note_through_the_same_path(pages):
    from frontend import ids
    from frontend.pages import runs as runs_page

    app, api, lab, run = pages
    sent: list[tuple[str, dict]] = []
    api.label = lambda rid, body: sent.append((rid, body)) or {"id": rid}
    page = runs_page.layout()
    assert _find(page, ids.RUNS_NAME) is not None and _find(page, ids.RUNS_NOTE) is not None
    rows = logic.run_rows(
        [
            {"id": "r1", "spec": {"task": "digits"}, "name": "base", "tags": ["a", "b"], "note": "hi"},
            {"id": "r2", "spec": {"task": "digits"}},
        ]
    )
    # one run ticked: its fields fill in; two (or none): a hint and no run to save to
    assert runs_page.on_pick([0], rows, None) == ("base", "a, b", "hi", "r1", "Editing r1 (base).")
    assert runs_page.on_pick([0, 1], rows, "r1")[3:] == (None, runs_page.PICK_ONE)
    # the table's poll re-ticks the same run: the fields (an edit in progress) are left alone
    assert all(v is no_update for v in runs_page.on_pick([0], rows, "r1"))
    assert runs_page.on_save_labels(1, "r1", " renamed ", "a, c", "", None) == "Saved."
    assert sent == [("r1", {"name": "renamed", "tags": ["a", "c"], "note": None})]
    assert runs_page.on_save_labels(2, None, "x", "", "", None) == runs_page.PICK_ONE

    def refuse(rid, body):
        raise ApiError(403, "Only the run's owner or an admin may edit it.")

    api.label = refuse
    assert "owner" in runs_page.on_save_labels(3, "r1", "x", "", "", None)


def test_change_now_asks_the_api_and_shows_its_refusal_through_the_shared_helper(pages):
    from frontend import fork_view

    app, api, lab, run = pages
    sent: list[tuple[str, dict]] = []
    api.intervene = lambda rid, changes: sent.append((rid, changes)) or {}
    assert (
        fork_view.on_change_now(1, None, None, 0.1, None, None) == "Pick the run: click a point of its curve."
    )
    assert fork_view.on_change_now(1, "r1", "r9", 0.1, None, None).startswith("Asked:")
    assert sent == [("r1", {"lr": 0.1})]  # the Run page's run wins over the clicked one

    def refuse(rid, changes):
        raise ApiError(409, "Run r1 has ended; fork it instead.")

    api.intervene = refuse
    assert fork_view.on_change_now(2, None, "r9", None, 0.0, None) == "Run r1 has ended; fork it instead."
