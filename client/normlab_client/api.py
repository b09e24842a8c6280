"""`Client`: a normlab server from Python — submit runs, sweeps and presets, list and read them.

Torch-free (httpx and the API's own pydantic models); pandas only for the DataFrames
(`pip install 'normlab-client[notebook]'`).

    from normlab_client import Client
    lab = Client("http://127.0.0.1:8050", token=None)
    run = lab.submit(task="digits", norm="layer", steps=300)
    run.wait()
    df = run.metrics()          # every logged step, never sampled
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from normlab_client.api_models import RunCreated, RunList, SweepCreated
from normlab_client.group import Group
from normlab_client.group_models import PresetLaunched
from normlab_client.http import Http
from normlab_client.run import STORED, Run
from normlab_client.spec import RunSpec

if TYPE_CHECKING:
    from normlab_client.watch import Watch

DEFAULT_URL = "http://127.0.0.1:8050"  # `normlab up`'s default


class Client:
    """One normlab server. `token`: an API token (`normlab token create --user NAME`) for a server that
    runs with NORMLAB_AUTH=tokens; sent as a Bearer header on every request, event streams included."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.http = Http(base_url, token, timeout, transport)
        self.base_url = self.http.base_url

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The answer of a 2xx request; a NormlabError with the server's message for anything else."""
        return self.http.request(method, path, **kwargs)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    # ---- runs -------------------------------------------------------------------------------------
    def submit(self, spec: RunSpec | dict[str, Any] | None = None, **fields: Any) -> Run:
        """Queue one run: a `RunSpec` or a dict, and/or its fields as keywords (keywords win). The
        server checks it; a refusal raises NormlabError naming the field."""
        body = _spec_dict(spec)
        body.update(fields)
        created = RunCreated.model_validate(self.request("POST", "/api/runs", json=body).json())
        return Run(self.http, created.id)

    def run(self, run_id: str) -> Run:
        """The run with this id (read at once: an unknown id raises NormlabError, HTTP 404)."""
        run = Run(self.http, run_id)
        run.refresh()
        return run

    def runs(
        self,
        task: str | None = None,
        norm: str | None = None,
        status: str | None = None,
        owner: str | None = None,
        group: str | None = None,
        limit: int | None = None,
    ) -> list[Run]:
        """The runs matching every filter given, newest first (all of them, page by page, unless `limit`)."""
        params: dict[str, Any] = {
            k: v
            for k, v in {"task": task, "norm": norm, "status": status, "owner": owner, "group": group}.items()
            if v is not None
        }
        out: list[Run] = []
        offset = 0
        while limit is None or len(out) < limit:
            page_size = 500 if limit is None else min(500, limit - len(out))
            page = RunList.model_validate(
                self.request(
                    "GET", "/api/runs", params={**params, "offset": offset, "limit": page_size}
                ).json(),
                context=STORED,
            )
            out.extend(Run(self.http, p.id, p) for p in page.items)
            offset += len(page.items)
            if not page.items or offset >= page.total:
                break
        return out

    # ---- groups -----------------------------------------------------------------------------------
    def preset(
        self,
        name: str,
        seeds: list[int] | None = None,
        steps: int | None = None,
        swap: dict[str, str] | None = None,
        *,
        non_preemptible: bool = False,
    ) -> Group:
        """Launch a preset (a figure of the paper) over its seeds: one Group. `swap={"layer": "dyt"}` runs
        a normalizer in place of the preset's (its claims are then judged for it). `non_preemptible`
        (admin only): its runs never yield their workers to interactive runs."""
        body = {k: v for k, v in {"seeds": seeds, "steps": steps, "swap": swap}.items() if v is not None}
        if non_preemptible:
            body["non_preemptible"] = True
        launched = PresetLaunched.model_validate(
            self.request("POST", f"/api/presets/{name}", json=body or None).json()
        )
        return Group(self.http, launched.group_id, launched.run_ids)

    def sweep(
        self,
        base: RunSpec | dict[str, Any] | None = None,
        norms: list[str] | None = None,
        batch_sizes: list[int] | None = None,
        seeds: list[int] | None = None,
        *,
        non_preemptible: bool = False,
        **fields: Any,
    ) -> Group:
        """A base spec (and/or its fields as keywords) crossed with lists of norms, batch sizes and seeds:
        one run per combination, in one Group. `non_preemptible` (admin only): its runs never yield
        their workers to interactive runs."""
        spec = _spec_dict(base)
        spec.update(fields)
        body: dict[str, Any] = {
            "base": spec,
            "norms": norms or [],
            "batch_sizes": batch_sizes or [],
            "seeds": seeds or [],
        }
        if non_preemptible:
            body["non_preemptible"] = True
        created = SweepCreated.model_validate(self.request("POST", "/api/sweeps", json=body).json())
        return Group(self.http, created.group_id, created.run_ids)

    def watch(
        self,
        model: Any,
        name: str,
        every: int = 10,
        norms: list[str] | None = None,
        steps: int | None = None,
        script: str | None = None,
    ) -> Watch:
        """A training loop of your own as a run of this lab: `with lab.watch(model, name="my-gpt") as w:`
        and `w.log(step, train_loss=…, lr=…)` after each step (docs/watch.md). Needs torch (yours)."""
        from normlab_client.watch import Watch  # imports torch: only when watching

        return Watch(self.http, model, name, every=every, norms=norms, steps=steps, script=script)

    def group(self, group_id: str) -> Group:
        """A group (sweep or preset) by id; its runs are read at once."""
        group = Group(self.http, group_id, [])
        group.refresh()
        return group


def _spec_dict(spec: RunSpec | dict[str, Any] | None) -> dict[str, Any]:
    if spec is None:
        return {}
    if isinstance(spec, RunSpec):
        return spec.model_dump(mode="json", exclude_unset=True)
    return dict(spec)
