"""The presets page's gallery: cards grouped as paper experiments, maps and modern findings, each with
its setup beside the paper's and its tuning rule (pure functions of GET /api/presets)."""

from __future__ import annotations

import json

import pytest

from normlab.presets import PRESETS


@pytest.fixture(scope="module")
def page():
    from frontend.app import create_app

    create_app()  # registers the pages
    from frontend.pages import presets

    return presets


def _text(component) -> str:
    return json.dumps(component.to_plotly_json(), default=lambda o: o.to_plotly_json(), ensure_ascii=False)


def test_cards_are_grouped_under_their_section_headings_in_order(page):
    gallery, section_of = page.gallery, page.section_of
    presets = [json.loads(json.dumps(p.public())) for p in PRESETS.values()]
    sections = {p["name"]: section_of(p) for p in presets}
    assert sections["pixel-digits"] == "paper" and sections["map-ln-bn-batch"] == "map"
    assert sections["groupnorm-batch2"] == "modern"
    out = gallery(presets)
    headings = [c.children for c in out[::2]]
    assert headings == [
        "The paper's experiments",
        "Where does it help? One comparison along a scale",
        "Modern findings",
    ]
    per_section = [len(g.children) for g in out[1::2]]
    assert per_section == [list(sections.values()).count(k) for k in ("paper", "map", "modern")]
    assert sum(per_section) == len(PRESETS)


def test_a_card_folds_in_its_setup_and_its_tuning_rule(page):
    presets = [json.loads(json.dumps(p.public())) for p in PRESETS.values()]
    paper = page.gallery(presets)[1].children[0]
    text = _text(paper)
    first = presets[0]
    assert "Setup here and in the paper" in text and first["setup"][:40] in text
    assert f"normlab reproduce {first['name']} --tune" in text and first["tuning"]["rule"][:60] in text


def test_a_card_says_no_estimate_yet_until_a_run_of_its_preset_was_timed_here(page):
    p = json.loads(json.dumps(PRESETS["fig6-batch4"].public()))
    runs = len(p["runs"]) * len(p["seeds"])
    assert page.estimate_text({**p, "estimate": None}).startswith("Duration here: no estimate yet")
    assert f"{runs} runs" in page.estimate_text(p)  # an API without the field: no estimate either
    measured = {"measured": 4, "run_s": 25.0, "one_worker_s": 300.0, "last_launch_s": 131.0}
    text = page.estimate_text({**p, "estimate": measured})
    assert text == (
        f"Duration here: about 5 min on one worker ({runs} runs, median 25.0 s each, from 4 timed runs); "
        "the last full launch took 2 min 11 s here."
    )
    card = _text(page.preset_card({**p, "estimate": measured}))
    assert text in card and card.index(text) < card.index("Start ")  # read before Start
