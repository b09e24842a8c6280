"""`watch()` against a real `normlab up`: a training loop of the test's own becomes a run with every norm
module's statistics by path; a server away for 10 s loses no event and stores none twice; under
`torch.compile` the hooks cause no recompile after the first step."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest
import torch
from torch import nn

from normlab_client import Client
from normlab_client.events import RunStatus

pytestmark = pytest.mark.slow
D = 8


@pytest.fixture(autouse=True)
def one_thread():
    """A tiny model: torch's thread pool would only contend with the lab's processes for the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Tanhish(nn.Module):
    """A normalizer of the test's own, found by the protocol (normlab_norm), saturation reported."""

    normlab_norm = True

    def __init__(self, d: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(0.5))
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.alpha * x) * self.weight

    def normlab_saturated(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.tanh(self.alpha * x).abs() > 0.99).float().mean()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, D)
        self.ln = nn.LayerNorm(D)
        self.bn = nn.BatchNorm1d(D)
        self.mine = Tanhish(D)
        self.rnn = nn.GRU(D, D, batch_first=True)
        self.out = nn.Linear(D, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, T, 4)
        h = self.ln(self.inp(x))
        h = self.bn(h.transpose(1, 2)).transpose(1, 2)
        h, _ = self.rnn(self.mine(h))
        return self.out(h).mean(dim=(1, 2))


def train(w, model, steps, start=1, on_step=None):
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(start, start + steps):
        x = torch.randn(6, 5, 4, generator=gen)
        loss = (model(x) - x.sum(dim=(1, 2))).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        w.log(step, train_loss=loss.item(), lr=0.05)
        if on_step is not None:
            on_step(step)


def hidden_events(run):
    return [e for e in run.events(live=False) if e.kind == "hidden"]


def test_a_watched_loop_is_a_run_with_every_norm_modules_statistics(lab):
    torch.manual_seed(0)
    model = Net()
    seen = {}
    model.ln.register_forward_hook(
        lambda m, a, o: seen.update(x=a[0].detach().double(), y=o.detach().double())
    )
    with Client(lab.url) as c:
        with c.watch(model, name="mine", every=10, script="train_mine.py") as w:
            assert sorted(w.modules) == ["bn", "ln", "mine"]
            train(w, model, 40)
        run = c.run(w.run_id).wait(progress=False, timeout=60)
        info = run.refresh()
        assert info.status == RunStatus.COMPLETED and info.spec.task == "watched" and info.name == "mine"
        assert "watched" in info.tags and "train_mine.py" in (info.note or "")
        events = list(run.events(live=False))
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        hidden = hidden_events(run)
        assert [e.step for e in hidden] == [10, 20, 30, 40]
        last = {m["name"]: m for m in hidden[-1].payload["modules"]}
        assert set(last) == {"ln", "bn", "mine"}
        assert {m["type"] for m in last.values()} == {"LayerNorm", "BatchNorm1d", "Tanhish"}
        # the LayerNorm's statistics of step 40 against their definitions, in float64
        x, y = seen["x"].reshape(-1, D), seen["y"]
        case_rms = x.pow(2).mean(dim=1).sqrt()
        assert last["ln"]["in_mean"] == pytest.approx(float(x.mean()), rel=1e-4, abs=1e-6)
        assert last["ln"]["in_rms"] == pytest.approx(float(x.pow(2).mean().sqrt()), rel=1e-4)
        assert last["ln"]["in_rms_spread"] == pytest.approx(float(case_rms.std(correction=0)), rel=1e-3)
        assert last["ln"]["out_rms"] == pytest.approx(float(y.pow(2).mean().sqrt()), rel=1e-4)
        assert last["ln"]["gamma_norm"] == pytest.approx(float(model.ln.weight.double().norm()), rel=1e-5)
        assert last["ln"]["grad_norm"] > 0 and last["ln"]["saturated"] is None
        assert 0.0 <= last["mine"]["saturated"] <= 1.0 and last["mine"]["beta_norm"] is None
        (gru,) = hidden[-1].payload["recurrent"]
        assert gru["name"] == "rnn" and len(gru["hidden_norms"]) == 5  # one per time step
        frame = run.metrics()
        assert list(frame["step"]) == [10, 20, 30, 40] and frame["train_loss"].notna().all()


class FlakyProxy:
    """A TCP proxy to `target` that can go away: `down()` cuts every open connection and closes each
    new one at once (a stopped server) until `up()`."""

    def __init__(self, target: tuple[str, int]):
        self.target, self.is_down, self.open = target, False, []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                down, _ = self.sock.accept()
            except OSError:
                return
            if self.is_down:
                down.close()
                continue
            up = socket.create_connection(self.target)
            self.open += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def down(self):
        self.is_down = True
        for s in self.open:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.open = []

    def up(self):
        self.is_down = False

    def close(self):
        self.sock.close()


def test_a_server_away_for_10_s_loses_nothing_and_repeats_nothing(lab, caplog):
    host, port = lab.url.split("//")[1].rstrip("/").split(":")
    proxy = FlakyProxy((host, int(port)))
    torch.manual_seed(1)
    model = Net()
    went_down = {}

    def outage(step):
        if step == 15:
            proxy.down()
            went_down["at"] = time.monotonic()

    caplog.set_level(logging.WARNING, logger="normlab_client.watch")
    try:
        with Client(proxy.url, timeout=5) as c, c.watch(model, name="flaky", every=1) as w:
            train(w, model, 30, on_step=outage)  # steps 16-30 are recorded while the server is away
            assert w.sender.pending() > 0
            while time.monotonic() - went_down["at"] < 10:  # the outage lasts 10 s
                time.sleep(0.1)
            proxy.up()
            run_id = w.run_id
    finally:
        proxy.close()
    with Client(lab.url) as c:
        run = c.run(run_id)
        events = list(run.events(live=False))
    assert run.info.status == RunStatus.COMPLETED
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # no gap, no repeat
    assert [e.step for e in events if e.kind == "hidden"] == list(range(1, 31))
    assert [e.step for e in events if e.kind == "scalars"] == list(range(1, 31))
    away = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(away) == 1  # said once, not per retry


def test_no_recompile_after_the_first_step_under_torch_compile(lab):
    import torch._dynamo

    torch._dynamo.reset()
    compiles = []

    def counting(gm, example_inputs):
        compiles.append(gm)
        return gm.forward

    torch.manual_seed(2)
    model = Net()
    with Client(lab.url) as c, c.watch(model, name="compiled", every=5) as w:
        compiled = torch.compile(model, backend=counting)  # hooks installed first, then compiled
        train(w, compiled, 1)
        after_first = len(compiles)
        train(w, compiled, 19, start=2)
        run_id = w.run_id
    assert after_first >= 1 and len(compiles) == after_first
    with Client(lab.url) as c:
        hidden = hidden_events(c.run(run_id))
    assert [e.step for e in hidden] == [5, 10, 15, 20]
    assert {m["name"] for m in hidden[-1].payload["modules"]} == {"ln", "bn", "mine"}


def test_the_watched_routes_refuse_what_does_not_fit(lab):
    import httpx

    refused = httpx.post(lab.api("api/runs"), json={"task": "watched"}, timeout=30)
    assert refused.status_code == 422 and "watch()" in refused.json()["detail"]
    created = httpx.post(lab.api("api/watched"), json={"name": "r"}, timeout=30).json()
    url = lab.api(f"api/watched/{created['id']}/events")
    gap = {
        "events": [{"seq": created["last_seq"] + 2, "step": 1, "kind": "log", "payload": {"message": "x"}}]
    }
    answer = httpx.post(url, json=gap, timeout=30)
    assert answer.status_code == 409 and f"last stored seq {created['last_seq']}" in answer.json()["detail"]
    bad = {"events": [{"seq": 2, "step": 1, "kind": "scalars", "payload": {"train_loss": 1.0}}]}
    answer = httpx.post(url, json=bad, timeout=30)
    assert answer.status_code == 422 and "event 2 (scalars)" in answer.json()["detail"]
    ok = {"events": [{"seq": 2, "step": 1, "kind": "log", "payload": {"message": "hello"}}] * 2}
    ok["events"][1] = {**ok["events"][0], "seq": 3, "payload": {"message": "again"}}
    twice = [
        httpx.post(lab.api(f"api/watched/{created['id']}/events"), json=ok, timeout=30) for _ in range(2)
    ]
    assert [a.json()["last_seq"] for a in twice] == [3, 3]  # the resend stored nothing twice
