"""A preset's or sweep's group on the pages (frontend/group_view.py, the Presets page's launch), from
JSON shaped as `GET /api/groups/{id}` answers it (normlab_client.group_models.GroupPublic)."""

from __future__ import annotations

import pytest

from frontend import group_view
from frontend.api_client import ApiError
from normlab_client.group_models import GroupPublic, PairedClaim


def _arm(label, norm, mean, std, n=5, steps=(10, 20)):
    return {
        "label": label,
        "spec": {"task": "digits", "norm": norm, "batch_size": 4},
        "seeds": list(range(n)),
        "values": [mean] * n,
        "n": n,
        "mean": mean,
        "std": std,
        "curve": {"steps": list(steps), "mean": [2.0, mean], "std": [0.1, std], "at": [], "auc": None},
    }


def _group(kind="preset", done=False, holds=True, all_seeds=True, **changes):
    return GroupPublic.model_validate({**_group_json(kind, done, holds, all_seeds), **changes})


def _claim(**fields):
    return PairedClaim.model_validate(
        {"claim": "c", "kind": "better", "all_seeds": False, "rule": "r", **fields}
    )


def _group_json(kind, done, holds, all_seeds):
    return {
        "group_id": "g1",
        "kind": kind,
        "preset": "fig6" if kind == "preset" else None,
        "title": "Fig. 6" if kind == "preset" else None,
        "expect": "LN better than BN" if kind == "preset" else None,
        "metric": "val_loss",
        "higher_is_better": False,
        "varied": [] if kind == "preset" else ["norm", "batch_size"],
        "counts": {"completed": 7, "running": 2, "queued": 1} if not done else {"completed": 10},
        "done": done,
        "runs": [],
        "arms": [_arm("LN", "layer", 0.31, 0.02), _arm("BN", "batch", 0.45, 0.03)],
        "claims": [
            {
                "claim": "LN better than BN",
                "kind": "better",
                "holds": holds,
                "all_seeds": all_seeds,
                "difference": -0.14,
                "se": 0.02,
                "n": 5,
                "per_seed": [-0.1] * 5,
                "rule": "paired mean difference < 0 on every seed",
            }
        ]
        if kind == "preset"
        else None,
    }


def test_claim_verdicts_state_the_effect_its_standard_error_and_the_rule():
    text = group_view.claim_text(_group().claims[0])
    assert text == "holds on all 5 seeds — Δ = −0.14 ± 0.02"
    assert group_view.claim_text(_group(all_seeds=False).claims[0]).startswith(
        "holds on the mean of 5 seeds, not on every seed"
    )
    assert group_view.claim_text(_claim(holds=False, n=1)) == "does not hold (1 seed)"
    lines = str(group_view.verdicts(_group()))
    assert "Expect: LN better than BN" in lines and "paired mean difference" in lines and "✓" in lines
    assert "7 of 10 runs finished (1 queued, 2 running)." in lines
    assert "All 10 runs ended." in str(group_view.verdicts(_group(done=True, holds=False)))
    assert "✗" in str(group_view.verdicts(_group(holds=False)))


def test_bands_are_mean_plus_minus_std_per_cell():
    fig = group_view.band_figure(_group())
    bands = [t for t in fig["data"] if t.get("fill") == "toself"]
    lines = [t for t in fig["data"] if t.get("fill") != "toself"]
    assert [t["meta"] for t in lines] == ["LN", "BN"]
    ln_band = bands[0]
    assert list(ln_band["x"]) == [10, 20, 20, 10]
    assert list(ln_band["y"]) == pytest.approx([2.1, 0.33, 0.29, 1.9])  # mean + std, then mean - std reversed
    assert "(n=5)" in lines[0]["name"]
    empty = group_view.band_figure(_group(arms=[]))
    assert "No finished seed yet" in str(empty["layout"]["annotations"])


def test_sweep_results_table_sorts_numbers_and_shades_best_to_worst():
    table = group_view.results_table(_group("sweep"), "t")
    assert [c["id"] for c in table.columns] == ["norm", "batch_size", "mean", "std", "n"]
    assert {c["id"]: c.get("type") for c in table.columns}["mean"] == "numeric"
    assert table.sort_by == [{"column_id": "mean", "direction": "asc"}]  # lower loss is better
    assert table.data[0]["norm"] == "layer" and table.data[1]["batch_size"] == 4
    shades = {s["if"]["filter_query"]: s["backgroundColor"] for s in table.style_data_conditional}
    assert shades["{mean} = 0.31"] == group_view.SCALE[0] and shades["{mean} = 0.45"] != group_view.SCALE[0]
    assert "cmp-x" not in str(
        group_view.group_card(
            _group("sweep"), {"verdicts": "v", "bands": "b", "table": "t", "table_box": "tb"}
        )
    )


class _Api:
    def __init__(self, launch_error=None):
        self.launch_error, self.created = launch_error, []

    def launch_preset(self, name):
        if self.launch_error:
            raise self.launch_error
        return {"group_id": "g9", "run_ids": ["r1", "r2"]}

    def presets(self):
        return [
            {
                "name": "fig6",
                "seeds": [1, 2],
                "runs": [{"task": "digits", "norm": "layer"}, {"task": "digits", "norm": "batch"}],
            }
        ]

    def create_run(self, spec):
        self.created.append(spec)
        return {"id": f"r{len(self.created)}"}


def test_presets_launch_as_one_group_and_fall_back_to_single_runs_on_an_older_api(monkeypatch):
    from frontend import data
    from frontend.app import create_app

    create_app()
    from frontend.pages import presets

    monkeypatch.setattr(data, "api", lambda token=None: api)
    api = _Api()
    assert presets.launch("fig6") == ({"group": "g9", "runs": ["r1", "r2"]}, "")
    api = _Api(ApiError(404, "Not Found"))  # no such route: the runs one by one, once per seed
    launched, problem = presets.launch("fig6")
    assert launched == {"group": None, "runs": ["r1", "r2", "r3", "r4"]} and problem == ""
    assert [(s["norm"], s["seed"]) for s in api.created] == [
        ("layer", 1),
        ("batch", 1),
        ("layer", 2),
        ("batch", 2),
    ]
    api = _Api(ApiError(422, "give fewer seeds"))
    assert presets.launch("fig6") == (None, "Could not start fig6: give fewer seeds")
    box = str(presets.verdict_box({"group": "g9", "runs": ["r1"]}, _group()))
    assert "/compare?group=g9" in box and "holds on all 5 seeds" in box


def test_a_pending_claim_reads_as_seeds_in_never_as_a_verdict():
    claim = {
        "claim": "layer better than batch",
        "holds": False,
        "pending": True,
        "seeds_in": 3,
        "seeds_expected": 5,
        "n": 3,
    }
    assert group_view.claim_text(_claim(**claim)) == "pending — 3 of 5 seeds in"
    text = str(group_view.verdicts(_group(claims=[_claim(**claim)], counts={"running": 2})))
    assert "✗" not in text and "✓" not in text and "pending — 3 of 5 seeds in" in text
    lonely = {**claim, "seeds_in": 1, "seeds_expected": 1, "n": 1}
    assert "a standard error needs 2 seeds" in group_view.claim_text(_claim(**lonely))
    # the running estimate and its interval are shown, with no verdict either way
    running = {**claim, "holds": None, "all_seeds": None, "difference": -0.2, "se": 0.05, "t": 2.919986}
    running["interval"] = [-0.2 - 2.919986 * 0.05, -0.2 + 2.919986 * 0.05]
    text = group_view.claim_text(_claim(**running))
    assert text == (
        "pending — 3 of 5 seeds in — Δ = −0.20 ± 0.05, interval [−0.35, −0.054] (± t = 2.92 SE) "
        "(running estimate; no verdict until all 5 are in)"
    )
    box = str(group_view.verdicts(_group(claims=[_claim(**running)], counts={"running": 2})))
    assert "✓" not in box and "✗" not in box and "holds" not in text


def test_the_api_client_reads_a_group_as_its_model_and_names_a_wrong_shape():
    import httpx

    from frontend.api_client import ApiClient

    answers = {
        "/api/groups/g1": _group_json("preset", False, True, True),
        "/api/groups/g2": {**_group_json("preset", False, True, True), "arms": [{"label": "LN"}]},
    }
    client = ApiClient("http://lab.test")
    client._http = httpx.Client(
        base_url="http://lab.test",
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json=answers[request.url.path])),
    )
    group = client.group("g1")
    assert isinstance(group, GroupPublic) and isinstance(group.claims[0], PairedClaim)
    assert group.arms[1].curve.std == [0.1, 0.03]
    with pytest.raises(ApiError) as err:
        client.group("g2")
    assert err.value.status == 502 and "group g2" in err.value.detail and "arms.0.spec" in err.value.detail


def test_a_small_effect_shows_its_significant_digits_never_plus_minus_zero():
    text = group_view.claim_text(_claim(holds=True, all_seeds=True, n=5, difference=-0.0031, se=0.0042))
    assert "Δ = −0.0031 ± 0.0042" in text and "0.00 " not in text and not text.endswith("0.00")
    big = group_view.claim_text(_claim(holds=True, all_seeds=True, n=5, difference=-0.25, se=0.08))
    assert big.endswith("Δ = −0.25 ± 0.08")


def test_a_preset_cards_bands_keep_the_legend_under_the_x_title_and_the_y_title_whole():
    for present in (False, True):
        layout = group_view.band_figure(_group(), present, height=300)["layout"]
        margin = layout["margin"]
        plot_px = layout["height"] - margin["t"] - margin["b"]
        below = -layout["legend"]["y"] * plot_px  # the legend's top, in px under the plot
        assert below >= 50  # under the tick labels and the x-axis title
        assert margin["b"] >= below + 20  # and its row inside the figure
        longest = max(len(line) for line in layout["yaxis"]["title"]["text"].split("<br>"))
        assert longest * (11 if present else 8) < plot_px  # the y title fits along the plot, unclipped


def test_a_card_states_the_rule_the_companion_and_the_declaration():
    claim = _claim(
        holds=False,
        all_seeds=True,
        n=4,
        difference=-0.64,
        se=0.45,
        decides="the t rule decides; the sign test is shown beside it",
        companion_rule="exact one-sided sign test at 5 % over the paired seeds",
        companion={
            "wins": 5,
            "n": 5,
            "diverged": 1,
            "p": 1 / 32,
            "holds": True,
            "text": "layer lower on 5 of 5 seeds (sign test p = 0.0312); "
            "1 seed with a diverged or failed run",
        },
        declared="9ee88a0",
        exploratory=True,
        exploratory_why="the ±10 % margin was written after trials on the verdict seeds",
    )
    text = str(group_view.verdicts(_group(claims=[claim])))
    assert "✗" in text and "decides: the t rule decides" in text
    assert "sign test: layer lower on 5 of 5 seeds (sign test p = 0.0312); 1 seed with a diverged" in text
    assert "exploratory (declared in 9ee88a0): the ±10 % margin" in text
    confirmatory = claim.model_copy(update={"exploratory": False, "exploratory_why": None})
    assert "declared in 9ee88a0, before any run on its verdict seeds · confirmatory" in str(
        group_view.verdicts(_group(claims=[confirmatory]))
    )
