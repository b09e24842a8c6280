"""`normlab reproduce PRESET [--seeds 0,1,2] [--fresh-seeds K] [--steps N] [--threads N] [--jobs N] [--tune]
[--json]`.

Runs every run of the preset (normlab/presets.py) over its seeds through the engine, prints one table row
per run (final validation metric: mean ± std and per seed; the curve at ¼, ½, end; the area under the
validation curve ÷ its span) and each claim with its effect size (paired by seed) and the rule.
``--json`` prints exactly one JSON object (workers.engine.reproduce.reproduce's result plus "command").
``--tune`` first chooses each run's setting by the preset's declared tuning rule on its tuning seeds
(normlab.tuning), prints the tuning table, then the verdict at the chosen setting and, beside it, the
preset's own setting (the paper's "same hyperparameters") on the same verdict seeds.
``--fresh-seeds K`` also trains K seeds drawn at run time (normlab.replication: ≥ 10,000, from the OS's
randomness, recorded as "fresh_seeds") and judges each claim on them beside its verdict on the declared
seeds: the replication.
Unknown preset: exit 2 with the list.
Progress goes to stderr, one line per finished run.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import TYPE_CHECKING, Any, TextIO

from normlab.claim_rules import MIN_SEEDS

if TYPE_CHECKING:
    from normlab.arms import SeedRecord
    from normlab.cli import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("reproduce", help="run a preset (a figure of the paper) over seeds and compare")
    p.add_argument("preset", help="preset name (see GET /api/presets or an unknown name for the list)")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: the preset's, e.g. 0,1,2)")
    p.add_argument(
        "--fresh-seeds",
        type=int,
        default=None,
        metavar="K",
        help="also train K seeds drawn now from a range no rule saw (≥ 10000) and judge each claim on them",
    )
    p.add_argument("--steps", type=int, default=None, help="override every run's steps (default: preset's)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads for the runs (default 1: small models on a shared machine)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs trained at once, one process each (default: the CPU count)",
    )
    p.add_argument(
        "--tune",
        action="store_true",
        help="choose each run's setting by the preset's tuning rule on its tuning seeds first",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def parse_seeds(text: str | None) -> list[int] | None:
    """'0,1,2' -> [0, 1, 2]; a bad list raises CLIError saying what to write."""
    from normlab.cli import CLIError

    if text is None:
        return None
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise CLIError(
            f"--seeds takes comma-separated non-negative integers such as 0,1,2 (got {text!r})."
        ) from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise CLIError(f"--seeds takes distinct non-negative integers such as 0,1,2 (got {text!r}).")
    return seeds


def _fmt(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def print_runs(runs: list[dict[str, Any]], file: TextIO) -> None:
    rows = [("run", "mean ± std", "per seed", "¼ / ½ / end", "curve area", "status")]
    for r in runs:
        at = " / ".join(_fmt(a["value"], 3) for a in r["curve"]["at"])
        statuses = sorted(set(r["statuses"]))
        rows.append(
            (
                r["label"],
                f"{_fmt(r['mean'])} ± {_fmt(r['std'])}",
                " ".join(_fmt(v, 3) for v in r["values"]),
                at,
                _fmt(r["curve"]["auc"]),
                ",".join(statuses),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        print("  " + "  ".join(cells).rstrip(), file=file)


def _size(c: dict[str, Any]) -> str:
    if c.get("difference") is None:
        return ""
    text = f"Δ = {c['difference']:+.4g} ± {c['se']:.2g} (n = {c['n']})"
    if c.get("interval"):
        lo, hi = c["interval"]
        text += f", interval [{lo:+.4g}, {hi:+.4g}] (± t = {c['t']:.3f} SE)"
    return text


def print_claims(d: dict[str, Any], file: TextIO) -> None:
    for c in d["claims"]:
        if c.get("pending") or c["holds"] is None:  # no verdict before the planned seeds are in
            mark = f"undecided: {c['seeds_in']} seed(s), a standard error needs {MIN_SEEDS}"
            seeds = "no verdict"
        else:
            mark = "holds" if c["holds"] else "does NOT hold"
            seeds = "on every seed" if c["all_seeds"] else "not on every seed"
        extra = f" — {c['message']}" if c.get("message") else ""
        print(f"  {c['claim']}: {mark} ({seeds}) {_size(c)}{extra}", file=file)
        print(f"      rule: {c['rule']}", file=file)
        comp = c.get("companion")
        if comp:
            held = "" if comp["holds"] is None else ": holds" if comp["holds"] else ": does not hold"
            print(f"      sign test: {comp['text']}{held}", file=file)
        if c.get("declared"):
            status = f"exploratory: {c['exploratory_why']}" if c.get("exploratory") else "confirmatory"
            print(f"      declared in {c['declared']} ({status})", file=file)
    if d["claims"] and any(c.get("decides") for c in d["claims"]):
        print(f"  ({next(c['decides'] for c in d['claims'] if c.get('decides'))})", file=file)
    if d["rule"]:
        print(f"  {d['rule']}", file=file)


def print_tuning(t: dict[str, Any], file: TextIO) -> None:
    """The tuning table: one row per run and grid value, the chosen one marked."""
    print(f"Tuning ({t['field']}; rule: {t['rule']}):", file=file)
    rows = [("run", t["field"], "mean ± std", "per tuning seed", "finished", "")]
    for r in t["table"]:
        rows.append(
            (
                r["label"],
                f"{r['value']:g}",
                f"{_fmt(r['mean'])} ± {_fmt(r['std'])}",
                " ".join(_fmt(v, 3) for v in r["values"]),
                f"{r['finished']}/{len(r['values'])}",
                "← chosen" if r["chosen"] else "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        print("  " + "  ".join(cells).rstrip(), file=file)


def _verdict(d: dict[str, Any]) -> str:
    return (
        "undecided (too few seeds)"
        if d.get("pending")
        else "HOLDS on every seed"
        if d["all_seeds"]
        else "holds on the means"
        if d["holds"]
        else "does NOT hold"
    )


def print_table(out: dict[str, Any], file: TextIO | None = None) -> None:
    file = file or sys.stdout
    better = "higher" if out["higher_is_better"] else "lower"
    if out.get("tuning"):
        print_tuning(out["tuning"], file)
    tuned = " at the tuned setting" if out.get("tuning") else ""
    print(
        f"{out['title']} ({out['paper_ref']}){tuned}; metric: {out['metric']} ({better} is better), "
        f"seeds {','.join(map(str, out['seeds']))}",
        file=file,
    )
    print_runs(out["runs"], file)
    names = {
        "hidden_spread_late": "‖h_t‖ max ÷ min over t ≥ 21",
        "grad_orders": "log10 ‖∂ℓ/∂h_T‖ ÷ ‖∂ℓ/∂h_1‖",
    }
    for key, name in names.items():
        traced = [(r["label"], r["traces"][key]) for r in out["runs"] if key in r.get("traces", {})]
        if traced:
            print(f"{name} (last trace):", file=file)
            for label, s in traced:
                per_seed = " ".join(_fmt(v, 2) for v in s["values"])
                print(f"  {label}: {_fmt(s['mean'], 2)} ± {_fmt(s['std'], 2)}  ({per_seed})", file=file)
    d = out["direction"]
    print(f"Paper: {out['expect']}", file=file)
    if out.get("map"):
        print_map(out["map"], file)
    print_claims(d, file)
    verdict = _verdict(d)
    if out.get("map") and not d["claims"]:
        verdict = "read from the map (no claim)"
    same = out.get("same_hyperparameters")
    if same:
        print(
            "Same hyperparameters (the preset's own setting, the paper's comparison), same seeds:", file=file
        )
        print_runs(same["runs"], file)
        print_claims(same["direction"], file)
        print(f"  Direction at the same hyperparameters: {_verdict(same['direction'])}.", file=file)
    fresh = out.get("fresh")
    if fresh:
        print(
            f"Replication on fresh seeds {','.join(map(str, fresh['seeds']))} (drawn at run time; rerun "
            f"with --seeds {','.join(map(str, fresh['seeds']))}):",
            file=file,
        )
        print_claims(fresh["direction"], file)
        print(f"  Direction on the fresh seeds: {_verdict(fresh['direction'])}.", file=file)
    print(f"Direction{tuned}: {verdict}.  ({out['wall_time']:.0f} s)", file=file)


def print_map(m: dict[str, Any], file: TextIO) -> None:
    """One line per axis value: Δ = A − B ± paired SE and the run it favours."""
    print(f"Map: Δ = {m['a']} − {m['b']} per {m['axis']} (A wins {m['claim_side']} zero):", file=file)
    for p in m["points"]:
        size = "no data" if p["difference"] is None else f"Δ = {p['difference']:+.4g} ± {p['se']:.2g}"
        favours = {"a": m["a"], "b": m["b"]}.get(p["favours"] or "", p["favours"] or "—")
        print(f"  {m['axis_name']} = {p['value']}: {size} (n = {p['n']}), favours {favours}", file=file)


def run(args: argparse.Namespace) -> int:
    from normlab.cli import CLIError, settings_from
    from normlab.presets import PRESETS

    if args.preset not in PRESETS:
        raise CLIError(f"unknown preset {args.preset!r}; choose one of: {', '.join(PRESETS)}.")
    if args.steps is not None and args.steps < 1:
        raise CLIError(f"--steps must be ≥ 1 (got {args.steps}).")
    if args.threads < 1:
        raise CLIError(f"--threads must be ≥ 1 (got {args.threads}).")
    if args.jobs is not None and args.jobs < 1:
        raise CLIError(f"--jobs must be ≥ 1 (got {args.jobs}).")
    seeds = parse_seeds(args.seeds)
    fresh = None
    if args.fresh_seeds is not None:
        from normlab.replication import MAX_FRESH, draw_fresh_seeds

        if not 1 <= args.fresh_seeds <= MAX_FRESH:
            raise CLIError(f"--fresh-seeds takes a count from 1 to {MAX_FRESH} (got {args.fresh_seeds}).")
        fresh = draw_fresh_seeds(args.fresh_seeds)
    tuning = PRESETS[args.preset].tuning
    if args.tune and tuning is None:
        declared = [name for name, p in PRESETS.items() if p.tuning]
        raise CLIError(
            f"preset {args.preset!r} declares no tuning rule; presets with one: {', '.join(declared)}."
        )
    if args.tune and tuning and seeds and set(seeds) & set(tuning.seeds):
        raise CLIError(
            f"--seeds must not include the tuning seeds {','.join(map(str, tuning.seeds))}: "
            "a seed that chose the setting never decides the verdict."
        )
    settings = settings_from(args)
    from workers.engine.reproduce import reproduce

    metric = PRESETS[args.preset].metric

    def progress(label: str, seed: int, record: SeedRecord) -> None:
        print(
            f"  {label} seed {seed}: {record['status']}, {metric} {_fmt(record['value'])} "
            f"({record['wall_time']:.1f} s)",
            file=sys.stderr,
            flush=True,
        )

    out = reproduce(
        args.preset,
        seeds=seeds,
        steps=args.steps,
        settings=settings,
        threads=args.threads,
        jobs=args.jobs,
        progress=progress,
        tune=args.tune,
        fresh_seeds=fresh,
    )
    parts = ["normlab", "reproduce", args.preset]
    if seeds is not None:
        parts += ["--seeds", ",".join(map(str, seeds))]
    if args.steps is not None:
        parts += ["--steps", str(args.steps)]
    if args.threads != 1:
        parts += ["--threads", str(args.threads)]
    if args.jobs is not None:
        parts += ["--jobs", str(args.jobs)]
    if args.tune:
        parts.append("--tune")
    if fresh:  # the drawn seeds, so the replication reruns as --seeds
        out["fresh_seeds"] = fresh
        parts += ["--fresh-seeds", str(len(fresh))]
    out["command"] = shlex.join(parts + (["--json"] if args.json else []))
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)
    return 0
