"""Run statuses on the pages: one table keyed by normlab_client.events.RunStatus, nothing retyped."""

from __future__ import annotations

from frontend import components, logic, status
from normlab_client.events import ACTIVE_STATUSES, TERMINAL_STATUSES, RunStatus


def test_every_status_has_its_colours_and_unknown_ones_stay_plain():
    assert set(status.STATUS_COLOURS) == set(RunStatus)
    assert status.badge_style("running") == {"color": "#003f6b", "background": "#d6ebfa"}
    assert status.badge_style("exploded") == {}
    styles = status.table_styles()
    assert len(styles) == len(RunStatus) and styles[0]["if"]["filter_query"] == '{status} = "queued"'


def test_cancel_and_the_browsers_terminal_set_follow_the_enum():
    assert all(logic.can_cancel(s) for s in ACTIVE_STATUSES)
    assert not any(logic.can_cancel(s) for s in TERMINAL_STATUSES)
    assert set(status.TERMINAL) == {s.value for s in TERMINAL_STATUSES}
    watch, _url = components.page_stores({"cursor": {"r1": 3}})
    assert watch.data == {"cursor": {"r1": 3}, "terminal": status.TERMINAL}  # what normlab.js stops on
    badge = components.badge("lost")
    assert badge.children == "lost" and badge.style == status.badge_style("lost")
