"""Chrome-less chart pages to put in slides and other sites: `/embed/run/<id>`, `/embed/compare?runs=a,b`
(live) and `/embed/replay?runs=a,b&speed=4` (finished runs replayed on one clock).

Plain Flask routes on the dashboard's server (no Dash renderer: a page is plotly.js, one small script
and the data), so they paint fast and load nothing from beyond this server. Query: `panels=loss,val,
metric,grad,lr,hidden,fisher`, `smoothing=0..0.99`, `theme=light|dark`, `controls=0|1`, `big=0|1`,
`present=1` (big, no controls), `token=` (a private server). Only these routes may be framed by another
origin; every other page of the server answers with headers that forbid it (`install`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import flask

from frontend.smoothing import SMOOTHED_PANELS, parse_weight
from normlab_client.palette import NORM_COLORS, OTHER_COLOR, RAW_OPACITY

HERE = Path(__file__).parent / "embed_assets"
PLOTLY = "/assets/vendor/plotly-cartesian-4.1.1.min.js"
PANELS = ("loss", "val", "metric", "grad", "lr", "hidden", "fisher")
DEFAULT_PANELS = ("loss", "val", "metric")
RUN_ID = re.compile(r"^[0-9A-Za-z_-]{1,32}$")
MAX_RUNS = 12
FRAMEABLE = "frame-ancestors *"  # embed pages: any site may frame them
NOT_FRAMEABLE = "frame-ancestors 'self'"  # the dashboard: only itself (clickjacking)


def _flag(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _runs(text: str | None) -> list[str]:
    ids = [r.strip() for r in (text or "").split(",") if r.strip()]
    bad = [r for r in ids if not RUN_ID.fullmatch(r)]
    if not ids or bad or len(ids) > MAX_RUNS:
        flask.abort(
            flask.make_response(
                f"runs must list 1 to {MAX_RUNS} run ids, comma-separated (e.g. ?runs=ab12cd34ef56,"
                "0123456789ab).",
                422,
            )
        )
    return list(dict.fromkeys(ids))


def page_config(mode: str, runs: list[str], args: Mapping[str, str]) -> dict[str, Any]:
    """What the page's script reads (embedded as JSON): the runs, the view, the look."""
    panels = [p for p in (args.get("panels") or ",".join(DEFAULT_PANELS)).split(",") if p in PANELS]
    speed = args.get("speed")
    try:
        speed_value = min(max(float(speed), 0.05), 1000.0) if speed else None
    except ValueError:
        speed_value = None
    return {
        "mode": mode,
        "runs": runs,
        "api": flask.current_app.config.get("NORMLAB_API_BASE", ""),
        "token": args.get("token") or None,
        "panels": panels or list(DEFAULT_PANELS),
        "smoothing": parse_weight(args.get("smoothing", 0.6)),
        "smoothed_panels": list(SMOOTHED_PANELS),  # the rest drawn as measured
        "theme": "dark" if args.get("theme") == "dark" else "light",
        # presentation mode (present=1, as on the dashboard's pages): big type and no controls
        "controls": _flag(args.get("controls"), True) and not _flag(args.get("present"), False),
        "big": _flag(args.get("big"), False) or _flag(args.get("present"), False),
        "speed": speed_value,  # replay: run-seconds per second; None = the whole replay in 20 s
        "colors": {**NORM_COLORS, "other": OTHER_COLOR},
        "raw_opacity": RAW_OPACITY,
    }


def render(config: dict[str, Any], title: str) -> flask.Response:
    body = (HERE / "embed.html").read_text()
    config_json = json.dumps(config).replace("</", "<\\/")  # no early </script>
    page = (
        body.replace("{{title}}", html.escape(title))
        .replace("{{plotly}}", PLOTLY)
        .replace("{{config}}", config_json)
        .replace("{{theme}}", config["theme"])
        .replace("{{big}}", "big" if config["big"] else "")
    )
    resp = flask.Response(page, mimetype="text/html")
    resp.headers["Cache-Control"] = "no-cache"
    return resp


def install(server: flask.Flask) -> None:
    """The embed routes, their script, and the frame headers of every page of the dashboard's server."""

    @server.route("/embed/run/<run_id>")
    def embed_run(run_id: str) -> flask.Response:
        return render(page_config("live", _runs(run_id), flask.request.args), f"normlab · run {run_id}")

    @server.route("/embed/compare")
    def embed_compare() -> flask.Response:
        runs = _runs(flask.request.args.get("runs"))
        return render(page_config("live", runs, flask.request.args), "normlab · compare")

    @server.route("/embed/replay")
    def embed_replay() -> flask.Response:
        runs = _runs(flask.request.args.get("runs"))
        return render(page_config("replay", runs, flask.request.args), "normlab · replay")

    @server.route("/embed/static/embed.js")
    def embed_script() -> flask.Response:
        resp = flask.send_file(HERE / "embed.js", mimetype="text/javascript", max_age=0)
        return resp

    @server.after_request
    def frame_headers(resp: flask.Response) -> flask.Response:
        if flask.request.path.startswith("/embed/"):
            resp.headers["Content-Security-Policy"] = FRAMEABLE
            resp.headers.pop("X-Frame-Options", None)
        else:
            resp.headers.setdefault("X-Frame-Options", "SAMEORIGIN")
            resp.headers.setdefault("Content-Security-Policy", NOT_FRAMEABLE)
        return resp
