"""`normlab bench fork` without a server: its JSON has the paired overhead figures and each available
task's checkpoint size, which holds the model and Adam's two moments (3 × 4 bytes a parameter, at least)."""

from __future__ import annotations

import json

from benchmarks import fork


def test_bench_fork_json(settings, capsys):
    assert (
        fork.main(["--json", "--no-server", "--pairs", "1", "--steps", "12", "--tasks", "digits"], settings)
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert set(out["overhead"]) == set(out["bytes"]) == {"digits"}
    for r in out["overhead"].values():
        assert (
            r["steps"] == 12
            and len(r["with_s"]) == len(r["without_s"]) == len(r["checkpoints"]) == 1
            and 1 <= r["checkpoints"][0] <= fork.PER_RUN
        )
    digits = out["bytes"]["digits"]
    assert (
        digits["bytes"] >= 12 * digits["params"] and digits["bytes_per_run"] == fork.PER_RUN * digits["bytes"]
    )
    assert out["targets"]["fork_first_point_median_s"] == 1.0
