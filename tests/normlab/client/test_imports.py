"""`normlab_client` imports and talks without torch or pandas (pandas is the `client` extra)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
for name in ("torch", "pandas", "plotly", "dash", "backend", "workers", "frontend"):
    sys.modules[name] = None  # importing any of them now raises ImportError
import httpx
from normlab_client import Client, NormlabError

def answer(request):
    if request.url.path == "/api/runs/abc":
        return httpx.Response(404, json={"detail": "No run with id 'abc'.", "fields": {}})
    return httpx.Response(200, json={"items": [], "total": 0, "offset": 0, "limit": 500})

lab = Client("http://lab.invalid", transport=httpx.MockTransport(answer))
assert lab.runs() == []
try:
    lab.run("abc")
except NormlabError as exc:
    assert exc.status == 404 and exc.message == "No run with id 'abc'."
else:
    raise AssertionError("no error")
from normlab_client.run import require_pandas  # the client works; a DataFrame needs the extra

try:
    require_pandas()
except ImportError as exc:
    assert "normlab-client[pandas]" in str(exc)
else:
    raise AssertionError("pandas was importable")
print("ok")
"""


def test_the_client_needs_neither_torch_nor_pandas():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
