"""`normlab bench watch`: what `watch()` costs a training loop: a 4-block d = 256 pre-LN Transformer on
the CPU, the same steps with and without watch (every = 10), interleaved round by round so both see the
same machine load; the ratio of median step times is the overhead (target ≤ 5 %).

The watched run's events go to an in-process stand-in server (httpx.MockTransport answering the API's
acknowledgements), so the figure is the loop's own cost: hooks, the host copy every 10 steps, and the
background thread's JSON; what the lab does with the events is measured by `normlab bench stream`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import httpx
import torch
from torch import nn

from normlab_client import Client

D, HEADS, BLOCKS, SEQ, BATCH, VOCAB = 256, 4, 4, 32, 8, 128


def _model() -> nn.Module:
    layer = nn.TransformerEncoderLayer(D, HEADS, 4 * D, dropout=0.0, batch_first=True, norm_first=True)
    return nn.Sequential(
        nn.Embedding(VOCAB, D),
        nn.TransformerEncoder(layer, BLOCKS, norm=nn.LayerNorm(D), enable_nested_tensor=False),
        nn.Linear(D, VOCAB),
    )


def _stand_in() -> httpx.MockTransport:
    """Acknowledges every event batch as stored (the API's answers, without the API)."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/watched":
            return httpx.Response(201, json={"id": "bench", "last_seq": 1})
        events = json.loads(request.content)["events"]
        return httpx.Response(200, json={"last_seq": events[-1]["seq"] if events else 1, "status": "running"})

    return httpx.MockTransport(answer)


def _steps(model: nn.Module, opt: torch.optim.Optimizer, n: int, first: int, w: object | None) -> list[float]:
    gen = torch.Generator().manual_seed(first)
    times = []
    for step in range(first, first + n):
        x = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
        t0 = time.perf_counter()
        logits = model(x[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if w is not None:
            w.log(step, train_loss=loss.item(), lr=1e-3)  # type: ignore[attr-defined]
        else:
            loss.item()  # the same host sync the watched loop's train_loss costs
        times.append(time.perf_counter() - t0)
    return times


def measure(rounds: int, steps: int, every: int) -> dict[str, Any]:
    torch.manual_seed(0)
    plain_model, watched_model = _model(), _model()
    watched_model.load_state_dict(plain_model.state_dict())
    plain_opt = torch.optim.AdamW(plain_model.parameters(), lr=1e-3)
    watched_opt = torch.optim.AdamW(watched_model.parameters(), lr=1e-3)
    plain: list[float] = []
    watched: list[float] = []
    lab = Client("http://bench.invalid", transport=_stand_in())
    with lab.watch(watched_model, name="bench", every=every, script="normlab bench watch") as w:
        _steps(plain_model, plain_opt, every, 1, None)  # warm-up, both
        _steps(watched_model, watched_opt, every, 1, w)
        step = every + 1
        for _ in range(rounds):
            plain += _steps(plain_model, plain_opt, steps, step, None)
            watched += _steps(watched_model, watched_opt, steps, step, w)
            step += steps
        modules = len(w.modules)
    p, q = statistics.median(plain), statistics.median(watched)
    # mean over whole blocks of `every` steps too: the recorded step's copy is paid once per block
    mp, mq = statistics.fmean(plain), statistics.fmean(watched)
    return {
        "model": f"{BLOCKS}-block pre-LN Transformer, d={D}, {HEADS} heads, seq {SEQ}, batch {BATCH}, CPU",
        "torch_threads": torch.get_num_threads(),
        "every": every,
        "steps_each": len(plain),
        "norm_modules": modules,
        "plain_step_ms_median": round(p * 1e3, 2),
        "watched_step_ms_median": round(q * 1e3, 2),
        "overhead_median": round(q / p - 1, 4),
        "plain_step_ms_mean": round(mp * 1e3, 2),
        "watched_step_ms_mean": round(mq * 1e3, 2),
        "overhead_mean": round(mq / mp - 1, 4),
        "target": "overhead_mean ≤ 0.05",
    }


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The side-by-side table, in benchmarks.report's form."""
    return [
        {
            "caption": f"{result['model']}, torch threads {result['torch_threads']}, "
            f"{result['steps_each']} steps each, interleaved",
            "columns": ["loop", "median step (ms)", "mean step (ms)"],
            "align": ["---", "---:", "---:"],
            "rows": [
                ["without watch", result["plain_step_ms_median"], result["plain_step_ms_mean"]],
                [
                    f"watch(every={result['every']}), {result['norm_modules']} norm modules",
                    result["watched_step_ms_median"],
                    result["watched_step_ms_mean"],
                ],
                [
                    "overhead (target ≤ 5 %)",
                    f"{result['overhead_median']:+.1%}",
                    f"{result['overhead_mean']:+.1%}",
                ],
            ],
        }
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="normlab bench watch", description=__doc__)
    p.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    p.add_argument("--steps", type=int, default=30, help="steps per round and loop (default 30)")
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(args.rounds, args.steps, args.every)
    if args.json:
        print(json.dumps(result))
    else:
        for row in tables(result)[0]["rows"]:
            print(" | ".join(map(str, row)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
