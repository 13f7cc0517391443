#!/usr/bin/env python3
"""Table of a before/after run of bench/compare-builds.sh (stdlib only).

Reads RAW/{before,after}-N.jsonl (`ferry bench -o jsonl`, one line per test) and RAW/runs.tsv
(side, run, rc, wall seconds, load average before the run), prints markdown on stdout.

Per configuration (vram budget, routing, test) and binary: the median of the runs' avg_ts (each
run is one process; its avg_ts is the mean of its -r repetitions) and the min–max over runs.
Verdict: "same (within 3%)" when the medians differ by at most 3%; else "same (inside spread)"
when each median lies inside the other binary's min–max; else faster / slower.
Exit status 1 when a run gave no results.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

TOLERANCE = 0.03


def budget_text(b: int) -> str:
    if b == 0:
        return "none"
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return f"{b / (1 << 20):.1f}M"


def test_name(r: dict) -> str:
    p, n = int(r.get("n_prompt", 0)), int(r.get("n_gen", 0))
    name = f"pp{p}" if n == 0 else f"tg{n}" if p == 0 else f"pp{p}+tg{n}"
    d = int(r.get("n_depth", 0))
    return name + (f" @ d{d}" if d else "")


def config_key(r: dict) -> tuple:
    return (int(r.get("vram_budget", 0)), str(r.get("routing", "?")), str(r.get("offload_decode") or "host"),
            int(r.get("n_prompt", 0)), int(r.get("n_gen", 0)), int(r.get("n_depth", 0)))


def read_runs(raw: Path, side: str, runs: int):
    """{config: {"name": str, "ts": [per run], "hit": [per run]}} and the runs with no results."""
    out, empty = {}, []
    for i in range(1, runs + 1):
        f = raw / f"{side}-{i}.jsonl"
        rows = []
        if f.exists():
            for line in f.read_text().splitlines():
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
        if not rows:
            empty.append(i)
        for r in rows:
            c = out.setdefault(config_key(r), {"row": r, "ts": [], "hit": []})
            c["ts"].append(float(r["avg_ts"]))
            if r.get("hit_rate") is not None:
                c["hit"].append(float(r["hit_rate"]))
    return out, empty


def verdict(b: list, a: list) -> str:
    mb, ma = statistics.median(b), statistics.median(a)
    if mb > 0 and abs(ma / mb - 1) <= TOLERANCE:
        return "same (within 3%)"
    if min(b) <= ma <= max(b) and min(a) <= mb <= max(a):
        return "same (inside spreads)"
    return ("**faster**" if ma > mb else "**slower**") + " (outside 3% and spreads)"


def cell(v: list) -> str:
    if not v:
        return "–"
    if len(v) == 1:
        return f"{v[0]:.2f} (1 run)"
    return f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path, help="folder of the run's raw files")
    ap.add_argument("--runs", type=int, required=True)
    a = ap.parse_args()

    before, empty_b = read_runs(a.raw, "before", a.runs)
    after, empty_a = read_runs(a.raw, "after", a.runs)
    # "none" first, then budgets ascending; prefill before decode
    keys = sorted(set(before) | set(after), key=lambda k: (k[0] != 0, k[0], k[1], k[2], k[4] > 0, k[3], k[5]))

    print("| vram | routing | test | before t/s: median (min–max) | after t/s: median (min–max) "
          "| after / before | verdict | hit rate before / after |")
    print("|---|---|---|---|---|---|---|---|")
    for k in keys:
        b, af = before.get(k), after.get(k)
        row = (b or af)["row"]
        routing = row.get("routing", "?") + ("" if k[2] == "host" else f", decode {k[2]}")
        tb, ta = (b or {}).get("ts", []), (af or {}).get("ts", [])
        ratio = f"{statistics.median(ta) / statistics.median(tb):.3f}" if tb and ta else "–"
        v = verdict(tb, ta) if tb and ta else "missing runs"
        hb, ha = (b or {}).get("hit", []), (af or {}).get("hit", [])
        hit = "–" if not hb and not ha else \
            " / ".join(f"{100 * statistics.median(h):.1f}%" if h else "–" for h in (hb, ha))
        print(f"| {budget_text(k[0])} | {routing} | {test_name(row)} | {cell(tb)} | {cell(ta)} | {ratio} | {v} | {hit} |")
    print()
    print("Per run: the mean of its repetitions (avg_ts); median and min–max over the runs of each binary. "
          "Verdict: same when the medians are within 3% or each inside the other's min–max.")

    runs_tsv = a.raw / "runs.tsv"
    if runs_tsv.exists():
        print()
        print("| run | binary | exit | wall s | load avg (1 min) before |")
        print("|---|---|---|---|---|")
        for line in runs_tsv.read_text().splitlines():
            f = line.split("\t")
            if len(f) == 5:
                print(f"| {f[1]} | {f[0]} | {f[2]} | {float(f[3]):.1f} | {f[4]} |")
    for side, empty in (("before", empty_b), ("after", empty_a)):
        if empty:
            print(f"\n**{side}: no results from run(s) {', '.join(map(str, empty))}** (see {a.raw}/{side}-N.err)")
    return 0 if not empty_b and not empty_a and keys else 1


if __name__ == "__main__":
    sys.exit(main())
