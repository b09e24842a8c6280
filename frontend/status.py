"""Run statuses as the pages show them: one table, keyed by `normlab_client.events.RunStatus`.

The badges, the Runs table's status column and the Runs filter all read it; the browser's stream code
learns which statuses end a run from the watch store (`terminal`), not from a copy of its own.
"""

from __future__ import annotations

from typing import Any

from normlab_client.events import TERMINAL_STATUSES, RunStatus

# (text colour, background): the status word is always shown too, never colour alone.
STATUS_COLOURS: dict[RunStatus, tuple[str, str]] = {
    RunStatus.QUEUED: ("#555", "#eee"),
    RunStatus.RUNNING: ("#003f6b", "#d6ebfa"),
    RunStatus.COMPLETED: ("#0b5d3f", "#d5f2e5"),
    RunStatus.FAILED: ("#7a1c00", "#fbdcd0"),
    RunStatus.CANCELLED: ("#555", "#e6e6e6"),
    RunStatus.DIVERGED: ("#7a1c00", "#fbe3b3"),
    RunStatus.LOST: ("#5b2245", "#f2d9ea"),
}
TERMINAL = sorted(s.value for s in TERMINAL_STATUSES)  # what the browser's stream code stops on


def badge_style(status: str) -> dict[str, str]:
    """Inline colours of a status badge; an unknown status keeps the plain badge look."""
    try:
        fg, bg = STATUS_COLOURS[RunStatus(status)]
    except ValueError:
        return {}
    return {"color": fg, "background": bg}


def table_styles(column: str = "status") -> list[dict[str, Any]]:
    """DataTable `style_data_conditional` entries colouring the status column like the badges."""
    return [
        {
            "if": {"filter_query": f'{{{column}}} = "{s.value}"', "column_id": column},
            "color": fg,
            "backgroundColor": bg,
            "fontWeight": 600,
        }
        for s, (fg, bg) in STATUS_COLOURS.items()
    ]
