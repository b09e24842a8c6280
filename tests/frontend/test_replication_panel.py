"""A preset card's replication part (frontend/replication_panel.py), from JSON shaped as
`GET /api/presets/{name}/replications` answers it (normlab.replication.Replications)."""

from __future__ import annotations

import json

from frontend import ids, replication_panel
from normlab.replication import Replications


def _text(components) -> str:
    return json.dumps(
        [c.to_plotly_json() for c in components], default=lambda o: o.to_plotly_json(), ensure_ascii=False
    )


def _record(**latest):
    return Replications.model_validate(
        {
            "preset": "edge-of-stability",
            "declared_seeds": [0, 1, 2, 3, 4],
            "claims": [
                {
                    "claim": "layer η=0.25: η·λ_max(H) at the edge of stability (2)",
                    "exploratory": True,
                    "declared_seeds": {"group_id": "g1", "seeds": [0, 1, 2, 3, 4], "holds": True},
                    "latest": {"group_id": "g3", "seeds": [18833, 402211, 7777777], **latest}
                    if latest
                    else None,
                    "draws": 2 if latest else 0,
                    "judged": 2 if latest else 0,
                    "held": 1 if latest else 0,
                }
            ],
        }
    ).model_dump()


def test_each_claim_shows_its_declared_verdict_beside_the_latest_fresh_draw_and_the_record():
    text = _text(replication_panel.record_box(_record(holds=False)))
    assert "seeds 0,1,2,3,4: holds · latest fresh draw (seeds 18833, 402211, 7777777): does not hold" in text
    assert "held on 1 of 2 judged fresh draws" in text
    assert "exploratory: confirmed only by holding on fresh seeds" in text
    assert "no fresh draw yet" in _text(replication_panel.record_box(_record()))
    assert "(seeds 18833, 402211, 7777777): pending" in _text(
        replication_panel.record_box(_record(holds=None))
    )


def test_the_card_part_has_the_button_and_the_box_and_says_where_the_seeds_come_from():
    button, box, live = replication_panel.card_part("online")
    assert live.id == {"type": ids.PRESET_REPLICATION_LIVE, "name": "online"} and live.data is False
    assert button.id == {"type": ids.PRESET_REPLICATE, "name": "online"}
    assert "fresh seeds" in button.children and "≥ 10000" in button.title
    assert box.id == {"type": ids.PRESET_REPLICATION, "name": "online"}
    assert "Could not" in _text(replication_panel.record_box(None, "Could not reach the API"))
    assert replication_panel.record_box({"preset": "online", "declared_seeds": [0], "claims": []}) == []
