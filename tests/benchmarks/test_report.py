"""BENCHMARKS.md is rendered from the stored results (`benchmarks/results/*.json`) and cannot drift from
them; `normlab bench TARGET --save` stores a benchmark's JSON with its command, commit, date and tables."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from datetime import UTC, datetime

import pytest

from benchmarks import lstm as bench_lstm
from benchmarks import report
from normlab.cli import main as cli

FIELDS = {"benchmark", "title", "command", "commit", "date", "machine", "tables"}


def test_benchmarks_md_is_exactly_what_the_stored_results_render_to():
    assert report.REPORT.read_text() == report.render(report.load()), (
        "BENCHMARKS.md differs from benchmarks/results/*.json: edit the JSON, then run normlab bench report"
    )


def _is_commit(sha: str) -> bool:
    git = subprocess.run(
        ["git", "cat-file", "-t", sha], cwd=report.ROOT, capture_output=True, text=True, check=False
    )
    return git.stdout.strip() == "commit"


@pytest.mark.parametrize("path", sorted(report.RESULTS.glob("*.json")), ids=lambda p: p.stem)
def test_every_result_names_its_command_commit_and_date(path):
    result = json.loads(path.read_text())
    assert FIELDS <= set(result), f"{path.name} lacks {FIELDS - set(result)}"
    assert result["benchmark"] == path.stem
    assert result["command"].strip() and result["machine"].strip()
    assert re.match(r"20\d\d-\d\d-\d\d", result["date"]), result["date"]
    for table in result["tables"]:
        assert table["columns"] and all(len(row) == len(table["columns"]) for row in table["rows"])
    commits = [c.strip() for c in result["commit"].split(",")]
    assert all(re.fullmatch(r"[0-9a-f]{7,40}", c) for c in commits), result["commit"]
    if (report.ROOT / ".git").exists():  # a checkout with its history: each commit is one of ours
        assert all(_is_commit(c) for c in commits), f"{path.name}: {commits} not in this repository"


def test_every_section_has_its_command_and_tables_in_the_rendered_text():
    stored = {
        "benchmark": "x",
        "title": "X: a | b",
        "command": "normlab bench x --json",
        "commit": "abc1234, def5678",
        "commit_note": "two sides",
        "date": "2026-01-02 03:04 UTC",
        "machine": "a machine.",
        "about": "How.",
        "tables": [
            {"caption": "Rows:", "columns": ["k", "v"], "align": ["---", "---:"], "rows": [["a", 1.5]]}
        ],
        "notes": "Reading.",
    }
    text = report.render_section(stored)
    assert text.splitlines()[:4] == ["## X: a | b", "", "```", "normlab bench x --json"]
    assert "Measured 2026-01-02 03:04 UTC at `abc1234`, `def5678` (two sides); a machine." in text
    assert "Rows:\n\n| k | v |\n| --- | ---: |\n| a | 1.5 |" in text
    assert text.index("How.") < text.index("| k | v |") < text.index("Reading.")


def test_a_result_without_tables_of_its_own_is_tabled_from_its_json():
    result = {"rows": [{"B": 1, "ratio": 1.25}, {"B": 32, "extra": True}], "loop": {"ms": 2.0}, "name": "n"}
    tables = report.generic_tables(result)
    figures, rows = tables
    assert figures["columns"] == ["figure", "value"]
    assert figures["rows"] == [["`loop.ms`", 2.0], ["`name`", "n"]]
    assert rows["caption"] == "`rows`:" and rows["columns"] == ["B", "ratio", "extra"]
    assert rows["rows"] == [[1, 1.25, None], [32, None, True]]
    assert report.render_table(rows).splitlines()[-1] == "| 32 |  | yes |"


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """The stored results and the report, copied aside: saving never touches the checkout's files."""
    directory = tmp_path / "results"
    directory.mkdir()
    for path in report.RESULTS.glob("*.json"):
        (directory / path.name).write_text(path.read_text())
    monkeypatch.setattr(report, "RESULTS", directory)
    monkeypatch.setattr(report, "REPORT", tmp_path / "BENCHMARKS.md")
    return directory


def test_saving_replaces_the_figures_and_keeps_the_method(results_dir):
    old = json.loads((results_dir / "probes.json").read_text())
    result = {"tasks": [{"task": "digits", "overhead": 0.123}], "repeat": 3}
    when = datetime(2026, 12, 4, 22, 5, tzinfo=UTC)
    path = report.save("probes", "normlab bench probes --json", result, now=when)
    stored = json.loads(path.read_text())
    assert stored["title"] == old["title"] and stored["about"] == old["about"]
    assert "notes" not in stored  # the old notes read the old figures
    assert stored["command"] == "normlab bench probes --json" and stored["date"] == "2026-12-04 22:05 UTC"
    assert stored["result"] == result
    assert re.fullmatch(r"([0-9a-f]{7,40}|unknown)(\+changes)?", stored["commit"])
    text = report.REPORT.read_text()
    assert text == report.render(report.load())
    assert "| digits | 0.123 |" in text and "| `repeat` | 3 |" in text
    assert old["tables"][0]["rows"][0][2] not in text  # the old table is gone
    assert "## Kernels (GPU)" in text  # the other results are still rendered


def test_the_lstm_tables_read_the_bench_json():
    common = {"H": 128, "T": 64, "threads": 1, "c_step": True, "meets_target": True}
    rows = [
        {"B": 1, "engine_ms": 4.0, "engine_torch_ops_ms": 9.0, "torch_lstm_ms": 2.5, "ratio": 1.6},
        {"B": 8, "engine_ms": 9.0, "engine_torch_ops_ms": 14.0, "torch_lstm_ms": 7.0, "ratio": 1.286},
    ]
    extra = [{"ratio_torch_ops": 3.6, "target": 2.5}, {"ratio_torch_ops": 2.0, "target": None}]
    loop = {"task": "digits", "norm": "layer", "model": "2x256", "batch_size": 32, "steps": 150}
    loop |= {"repeats": 5, "engine_ms": 2.2, "plain_ms": 2.0, "ratio": 1.1, "target_ratio": 1.1}
    result = {
        "lnlstm_vs_torch_lstm": [common | r | e for r, e in zip(rows, extra, strict=True)],
        "loop_overhead": loop,
    }
    table, loop_table = bench_lstm.tables(result)
    assert table["rows"] == [
        [1, 128, "4.00", "2.50", "**1.60×**", "≤ 2.5×", "3.60×"],
        [8, 128, "9.00", "7.00", "**1.29×**", "", "2.00×"],
    ]
    assert "T = 64, 1 thread(s)" in table["caption"] and "C step on" in table["caption"]
    assert loop_table["rows"] == [["2.200", "2.000", "1.100×", "≤ 1.1×"]]


def test_normlab_bench_save_stores_what_the_benchmark_printed(results_dir, monkeypatch, capsys):
    seen = {}

    def fake_main(argv):
        seen["argv"] = argv
        print("warming up")
        print(json.dumps({"rows": [{"n": 1, "ms": 0.5}]}))
        return 0

    module = types.ModuleType("fake_bench")
    module.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_bench", module)
    from normlab.cli import bench

    monkeypatch.setitem(bench.TARGETS, "fake", ("fake_bench", "a fake"))
    assert cli(["bench", "fake", "--repeat", "2", "--save"]) == 0
    assert seen["argv"] == ["--repeat", "2", "--json"]
    out = capsys.readouterr()
    assert "warming up" in out.out  # the output still shows
    stored = json.loads((results_dir / "fake.json").read_text())
    assert stored["command"] == "normlab bench fake --repeat 2 --json"
    assert stored["result"] == {"rows": [{"n": 1, "ms": 0.5}]}
    assert "| 1 | 0.5 |" in report.REPORT.read_text()


def test_normlab_bench_save_refuses_a_benchmark_that_printed_no_json(results_dir, monkeypatch, capsys):
    module = types.ModuleType("quiet_bench")
    module.main = lambda argv: print("no json here") or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "quiet_bench", module)
    from normlab.cli import bench

    monkeypatch.setitem(bench.TARGETS, "quiet", ("quiet_bench", "a quiet one"))
    assert cli(["bench", "quiet", "--save"]) == 2
    assert "printed no JSON object" in capsys.readouterr().err
    assert not (results_dir / "quiet.json").exists()


def test_normlab_bench_report_check_says_whether_the_file_is_current(results_dir, capsys):
    assert cli(["bench", "report", "--check"]) == 1  # nothing rendered into the aside copy yet
    assert cli(["bench", "report"]) == 0
    assert report.REPORT.read_text() == report.render(report.load())
    assert cli(["bench", "report", "--check"]) == 0
