#!/usr/bin/env python3
"""Ferry and llama.cpp side by side on the same GGUF, the same machine and the same settings.

Runs `ferry bench` and llama.cpp's `llama-bench` (both -o json) with matched threads, -p, -n, -r
and prints one Markdown table of tokens/s and ratios (Ferry / llama.cpp):

  cpu          both on the CPU only, same threads (llama.cpp: the CPU build, -ngl 0)
  gpu          every weight resident on the GPU (llama.cpp: -ngl 99; Ferry: --device cuda)
  gpu <B>      VRAM budget B (default 16G and 12G): llama.cpp gets the smallest --n-cpu-moe whose
               measured peak VRAM (nvidia-smi memory.used polled every 50 ms, minus the use before
               the run) stays inside B; Ferry gets --device cuda --vram B. Ferry's --routing
               locality figure goes in its own column: llama.cpp's speed with experts on the CPU
               does not depend on which experts are routed, Ferry's cache does.

--rounds N (CPU rows) runs llama-bench and ferry bench N times each, alternating which goes first
(round 0: llama.cpp first, round 1: Ferry first, ...), so that both see the same minutes of a machine
whose memory bandwidth drifts. The t/s columns then show the median over the rounds ± half their
range, and the ratio is the median of the per-round ratios (Ferry / llama.cpp of the same round)
with their min–max in parentheses; a round that lacks the test on either side is left out of it.

GPU rows are skipped with a message when nvidia-smi finds no GPU. Raw JSON of every run is kept
next to the table (--raw-dir; -roundK in the name when --rounds > 1). Stdlib only (runs with any
python3).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    sys.stderr.write(f"[compare] {msg}\n")
    sys.stderr.flush()


def run_json(cmd, raw_path=None):
    """Runs a benchmark command that prints a JSON array on stdout; returns (results, error)."""
    log(" ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if raw_path:
        with open(raw_path, "w") as f:
            f.write(r.stdout)
        with open(raw_path + ".stderr", "w") as f:
            f.write(r.stderr)
    try:
        data = json.loads(r.stdout) if r.stdout.strip() else []
    except json.JSONDecodeError as e:
        return [], f"unreadable JSON ({e}); exit {r.returncode}"
    if r.returncode != 0:
        tail = " | ".join(r.stderr.strip().splitlines()[-3:])
        return data, f"exit {r.returncode}: {tail}"
    return data, None


def test_key(row):
    p, n, d = int(row["n_prompt"]), int(row["n_gen"]), int(row.get("n_depth", 0))
    name = f"pp{p}" if n == 0 else (f"tg{n}" if p == 0 else f"pp{p}+tg{n}")
    return name + (f" @ d{d}" if d else "")


def by_test(rows):
    return {test_key(r): r for r in rows}


class VramPoller:
    """Peak GPU memory in use (MiB) while running, from nvidia-smi, minus the use at start."""

    def __init__(self, gpu=0):
        self.gpu = gpu
        self.base = self.sample()
        self.peak = self.base
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def sample(self):
        out = subprocess.run(["nvidia-smi", f"--id={self.gpu}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout.strip()
        return int(out.splitlines()[0]) if out else 0

    def loop(self):
        while not self.stop_flag.is_set():
            self.peak = max(self.peak, self.sample())
            time.sleep(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join()

    @property
    def used_mib(self):
        return self.peak - self.base


def gpu_present():
    if not shutil.which("nvidia-smi"):
        return False, "nvidia-smi not found"
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if r.returncode != 0 or "GPU" not in r.stdout:
        return False, "nvidia-smi lists no GPU"
    return True, r.stdout.strip().splitlines()[0]


def parse_size_mib(s):
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    s = s.strip().upper().rstrip("B").rstrip("I")
    if s and s[-1] in units:
        return float(s[:-1]) * units[s[-1]]
    return float(s) / (1024 * 1024)


def n_layers(ferry, model):
    r = subprocess.run([ferry, "inspect", "--json", model], capture_output=True, text=True)
    try:
        meta = json.loads(r.stdout)
        kv = meta.get("metadata", meta.get("kv", {}))
        for k, v in (kv.items() if isinstance(kv, dict) else []):
            if k.endswith(".block_count"):
                return int(v["value"] if isinstance(v, dict) else v)
    except (json.JSONDecodeError, ValueError, TypeError):
        pass
    return 64  # upper bound for the --n-cpu-moe search when the count cannot be read


def best_n_cpu_moe(llama_gpu, model, common, budget_mib, layers, raw_dir, tag):
    """Smallest --n-cpu-moe whose peak VRAM stays within budget_mib (binary search; VRAM use
    falls as more layers' experts stay on the CPU). Returns (n_cpu_moe, peak_mib) or (None, peak)."""
    probes = {}

    def fits(ncm):
        if ncm not in probes:
            cmd = [llama_gpu, "-m", model, "-ngl", "99", "--n-cpu-moe", str(ncm), "-r", "1", "--no-warmup", "-o", "json",
                   *common]
            with VramPoller() as vp:
                _, err = run_json(cmd, os.path.join(raw_dir, f"{tag}-ncmoe{ncm}.json"))
            probes[ncm] = (err is None and vp.used_mib <= budget_mib, vp.used_mib)
            log(f"--n-cpu-moe {ncm}: peak {vp.used_mib} MiB of {budget_mib:.0f} MiB{'' if err is None else ' (' + err + ')'}")
        return probes[ncm][0]

    lo, hi = 0, layers
    if not fits(hi):
        return None, probes[hi][1]
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo, probes[lo][1]


def fmt_ts(row):
    if not row:
        return "—"
    return f"{float(row['avg_ts']):.2f} ± {float(row['stddev_ts']):.2f}"


def ratio(a, b):
    if not a or not b or float(b["avg_ts"]) <= 0:
        return "—"
    return f"{float(a['avg_ts']) / float(b['avg_ts']):.2f}"


def fmt_ts_rounds(rows):
    """Median ± half the range of avg_ts over the rounds that have the test (None where not)."""
    ts = [float(r["avg_ts"]) for r in rows if r]
    if not ts:
        return "—"
    return f"{statistics.median(ts):.2f} ± {(max(ts) - min(ts)) / 2:.2f}"


def ratio_rounds(pairs, n_rounds):
    """Median (min–max) of the per-round ratios a / b over (a, b) pairs of rows; a round where
    either side lacks the test is left out, and the count is shown when any was."""
    rs = [float(a["avg_ts"]) / float(b["avg_ts"]) for a, b in pairs if a and b and float(b["avg_ts"]) > 0]
    if not rs:
        return "—"
    left_out = "" if len(rs) == n_rounds else f", {len(rs)} of {n_rounds} rounds"
    return f"{statistics.median(rs):.2f} ({min(rs):.2f}–{max(rs):.2f}{left_out})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", required=True, help="GGUF file (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--repetitions", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1,
                    help="CPU rows: run llama-bench and ferry bench this many times each, alternating which goes "
                         "first; t/s = median ± half the range, ratio = median (min–max) of per-round ratios")
    ap.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    ap.add_argument("--llama-bench-cpu", default="", help="default: bench/build-llamacpp.sh CPU_VARIANT")
    ap.add_argument("--llama-cpu-variant", default="cpu", choices=("cpu", "cpu-noamx"),
                    help="which CPU build of llama.cpp (bench/build-llamacpp.sh): native, or native without AMX")
    ap.add_argument("--llama-bench-gpu", default="", help="default: bench/build-llamacpp.sh cuda (GPU rows only)")
    ap.add_argument("--budgets", default="16G,12G", help="VRAM budgets of the GPU rows")
    ap.add_argument("--no-gpu", action="store_true", help="CPU rows only")
    ap.add_argument("--no-cpu", action="store_true", help="GPU rows only")
    ap.add_argument("--raw-dir", default=os.path.join(ROOT, ".cache", "compare-raw"))
    ap.add_argument("-o", "--output", default="", help="also write the Markdown to this file")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")

    os.makedirs(a.raw_dir, exist_ok=True)
    common = ["-t", str(a.threads), "-p", str(a.n_prompt), "-n", str(a.n_gen)]
    reps = ["-r", str(a.repetitions)]

    def build(variant):
        r = subprocess.run([os.path.join(ROOT, "bench", "build-llamacpp.sh"), variant], capture_output=True, text=True)
        sys.stderr.write(r.stderr)
        return r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else ""

    has_gpu, gpu_msg = (False, "--no-gpu") if a.no_gpu else gpu_present()
    llama_cpu = "" if a.no_cpu else (a.llama_bench_cpu or build(a.llama_cpu_variant))
    llama_gpu = (a.llama_bench_gpu or build("cuda")) if has_gpu else ""

    lines = []
    notes = []
    for binary in (llama_cpu, llama_gpu):  # every figure names the build it used
        info = os.path.join(os.path.dirname(binary), "build-info.txt") if binary else ""
        if info and os.path.exists(info):
            with open(info) as f:
                notes.append(f"{binary}: " + "; ".join(l.strip() for l in f if l.strip()))
    header = ("| model | setting | test | llama.cpp t/s | Ferry t/s | Ferry / llama.cpp | "
              "Ferry --routing locality t/s | llama.cpp settings |")
    lines.append(header)
    lines.append("|---|---|---|--:|--:|--:|--:|---|")
    for model in a.model:
        base = os.path.splitext(os.path.basename(model))[0]
        if not a.no_cpu:
            if not llama_cpu:
                notes.append("CPU rows: llama-bench (CPU) could not be built")
            else:
                lcmd = [llama_cpu, "-m", model, "-ngl", "0", "-o", "json", *common, *reps]
                fcmd = [a.ferry, "bench", "-m", model, "--device", "cpu", "-o", "json", *common, *reps]
                per_round = []  # (llama.cpp rows by test, Ferry rows by test), one pair per round
                for rnd in range(a.rounds):
                    sfx = f"-round{rnd}" if a.rounds > 1 else ""
                    tag = f"{base} cpu" + (f" round {rnd}" if a.rounds > 1 else "")
                    lpath = os.path.join(a.raw_dir, f"{base}-cpu-llamacpp{sfx}.json")
                    fpath = os.path.join(a.raw_dir, f"{base}-cpu-ferry{sfx}.json")
                    if a.rounds > 1:
                        log(f"{tag} of {a.rounds}: {'llama.cpp' if rnd % 2 == 0 else 'Ferry'} first")
                    if rnd % 2 == 0:  # alternate the order: both sides see the same minutes of the machine
                        lc, lerr = run_json(lcmd, lpath)
                        fc, ferr = run_json(fcmd, fpath)
                    else:
                        fc, ferr = run_json(fcmd, fpath)
                        lc, lerr = run_json(lcmd, lpath)
                    for err, who in ((lerr, "llama.cpp"), (ferr, "Ferry")):
                        if err:
                            notes.append(f"{tag}: {who}: {err}")
                    per_round.append((by_test(lc), by_test(fc)))
                for k in sorted(set().union(*(set(L) | set(F) for L, F in per_round))):
                    ls = [L.get(k) for L, _ in per_round]
                    fs = [F.get(k) for _, F in per_round]
                    if a.rounds == 1:
                        lt, ft, rt = fmt_ts(ls[0]), fmt_ts(fs[0]), ratio(fs[0], ls[0])
                    else:
                        lt, ft, rt = fmt_ts_rounds(ls), fmt_ts_rounds(fs), ratio_rounds(zip(fs, ls), a.rounds)
                    lines.append(f"| {base} | cpu, {a.threads} threads | {k} | {lt} | {ft} | {rt} | — | -ngl 0 |")
        if not has_gpu:
            continue
        if not llama_gpu:
            notes.append("GPU rows: llama-bench (CUDA) could not be built")
            continue
        # Fully resident.
        lg, lerr = run_json([llama_gpu, "-m", model, "-ngl", "99", "-o", "json", *common, *reps],
                            os.path.join(a.raw_dir, f"{base}-gpu-llamacpp.json"))
        fg, ferr = run_json([a.ferry, "bench", "-m", model, "--device", "cuda", "-o", "json", *common, *reps],
                            os.path.join(a.raw_dir, f"{base}-gpu-ferry.json"))
        for err, who in ((lerr, "llama.cpp"), (ferr, "Ferry")):
            if err:
                notes.append(f"{base} gpu: {who}: {err}")
        L, F = by_test(lg), by_test(fg)
        for k in sorted(set(L) | set(F)):
            lines.append(f"| {base} | gpu, all resident | {k} | {fmt_ts(L.get(k))} | {fmt_ts(F.get(k))} | "
                         f"{ratio(F.get(k), L.get(k))} | — | -ngl 99 |")
        layers = n_layers(a.ferry, model)
        for budget in [b for b in a.budgets.split(",") if b]:
            bmib = parse_size_mib(budget)
            ncm, peak = best_n_cpu_moe(llama_gpu, model, ["-t", str(a.threads), "-p", str(a.n_prompt), "-n", "16"], bmib,
                                       layers, a.raw_dir, f"{base}-{budget}")
            L = {}
            if ncm is None:
                notes.append(f"{base} {budget}: llama.cpp does not fit even with --n-cpu-moe {layers} (peak {peak} MiB)")
            else:
                lb, lerr = run_json([llama_gpu, "-m", model, "-ngl", "99", "--n-cpu-moe", str(ncm), "-o", "json", *common,
                                     *reps], os.path.join(a.raw_dir, f"{base}-{budget}-llamacpp.json"))
                if lerr:
                    notes.append(f"{base} {budget}: llama.cpp: {lerr}")
                L = by_test(lb)
            fb, ferr = run_json([a.ferry, "bench", "-m", model, "--device", "cuda", "--vram", budget, "-o", "json",
                                 *common, *reps], os.path.join(a.raw_dir, f"{base}-{budget}-ferry.json"))
            fl, lerr2 = run_json([a.ferry, "bench", "-m", model, "--device", "cuda", "--vram", budget, "--routing",
                                  "locality", "-o", "json", *common, *reps],
                                 os.path.join(a.raw_dir, f"{base}-{budget}-ferry-locality.json"))
            for err, who in ((ferr, "Ferry"), (lerr2, "Ferry --routing locality")):
                if err:
                    notes.append(f"{base} {budget}: {who}: {err}")
            F, FL = by_test(fb), by_test(fl)
            settings = f"-ngl 99 --n-cpu-moe {ncm} (peak {peak} MiB)" if ncm is not None else "does not fit"
            for k in sorted(set(L) | set(F) | set(FL)):
                lines.append(f"| {base} | gpu, {budget} budget | {k} | {fmt_ts(L.get(k))} | {fmt_ts(F.get(k))} | "
                             f"{ratio(F.get(k), L.get(k))} | {fmt_ts(FL.get(k))} | {settings} |")
    if not has_gpu and not a.no_gpu:
        notes.append(f"GPU rows skipped: {gpu_msg}")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rounds = ""
    if a.rounds > 1 and not a.no_cpu:
        rounds = (f", rounds {a.rounds} (CPU rows: llama.cpp and Ferry alternate which runs first; t/s = median ± half "
                  f"the range over rounds; ratio = median of per-round ratios (min–max))")
    out = [f"Ferry vs llama.cpp, {now}, {platform.node()}, threads {a.threads}, -p {a.n_prompt} -n {a.n_gen} "
           f"-r {a.repetitions}{rounds}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", ""] + lines
    if notes:
        out += [""] + [f"- {n}" for n in notes]
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
