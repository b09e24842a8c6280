"""`Run.resume()` asks the server to continue a lost run as itself, and reads the run afresh after."""

from __future__ import annotations

import httpx

from normlab_client.http import Http
from normlab_client.run import Run


def test_resume_posts_and_forgets_the_stale_status():
    asked: list[str] = []
    status = {"now": "lost"}

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.method} {request.url.path}")
        if request.method == "POST":
            status["now"] = "queued"
            return httpx.Response(202, json={"id": "r1", "from_step": 40, "status": "queued"})
        return httpx.Response(200, json={"id": "r1", "status": status["now"], "spec": {}, "created_at": 0})

    run = Run(Http("http://api.test", None, 5.0, httpx.MockTransport(handler)), "r1")
    assert run.refresh().status == "lost"
    assert run.resume() is run and run.status == "queued"
    assert asked == ["GET /api/runs/r1", "POST /api/runs/r1/resume", "GET /api/runs/r1"]
