#!/usr/bin/env python3
"""`ferry bench` output formats and accounting on tiny synthetic models (functional, not timed).

- -o json: one object per test (pp16, tg4, pp8+tg2 @ d8) with llama-bench's fields; stdout is
  pure JSON (progress goes to stderr); samples_ns has -r entries; avg_ns, avg_ts, stddev_ts and
  samples_ts follow from samples_ns as llama-bench computes them.
- model_size and model_n_params equal the tensor bytes / elements the gguf package reads.
- weight_bytes_per_token of a tg test is exactly what one decode step reads: every non-expert
  tensor (token_embd only one row, unless it doubles as the output) plus top_k experts per layer,
  from the gguf tensor table; pp reads less per token (experts shared across the batch).
- -o csv / jsonl / md carry the same tests; csv's header is the json keys minus the samples.
- --depth-fill copy reaches a depth past its 256 evaluated tokens (quantized K/V too) and the KV
  bytes per token are printed on stderr.
- sweeps: -t 1,2 and --routing model,uniform multiply the tests; --device sim --vram gives
  offload counters (hit_rate in [0, 1], h2d bytes > 0 when the budget holds only part of the
  experts), the cpu device gives none (null).
- host_cpu_ms_per_token (the CPU time of the one thread that ran the timed evals, per token) is
  > 0 and at most the wall time per token (one thread cannot use more CPU than wall time; with
  -t 2 the process as a whole can), and the cpu device's md table has no host column.
- bad arguments exit non-zero with a message.
"""
import csv
import io
import json
import math
import os
import sys

try:
    import gguf
except ImportError as e:
    print(f"SKIPPED: gguf unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ferry, scratch  # noqa: E402

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def synth(arch):
    path = scratch(f"bench-{arch}-tiny-q8_0.gguf")
    ferry("synth", "--arch", arch, "--preset", "tiny", "--quant", "q8_0", "--seed", 11, "-t", "2", "-q", "-o", path)
    return path


def expected_tg_bytes(path):
    """Dense weights + one token_embd row + top_k experts in each layer, from the gguf package."""
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    n_layer = int(r.fields[f"{arch}.block_count"].parts[-1][0])
    top_k = int(r.fields[f"{arch}.expert_used_count"].parts[-1][0])
    names = {t.name for t in r.tensors}
    tied = "output.weight" not in names
    dense = experts = 0
    for t in r.tensors:
        nbytes = int(t.n_bytes)
        if t.name.startswith("blk."):
            if int(t.name.split(".")[1]) >= n_layer:
                continue
        if "_exps." in t.name:
            n_expert = int(t.shape[2])
            experts += nbytes // n_expert
        elif t.name == "token_embd.weight":
            dense += nbytes // int(t.shape[1]) + (nbytes if tied else 0)
        else:
            dense += nbytes
    size = sum(int(t.n_bytes) for t in r.tensors)
    params = sum(int(t.n_elements) for t in r.tensors)
    return dense + top_k * experts, size, params


def bench(*args, fmt="json"):
    r = ferry("bench", *args, "-o", fmt)
    check("ferry bench" in r.stderr, f"progress lines on stderr ({args})")
    return r.stdout


def check_stats(row, reps, where):
    ns = row["samples_ns"]
    check(len(ns) == reps and all(isinstance(x, int) and x > 0 for x in ns), f"{where}: samples_ns {ns}")
    n = row["n_prompt"] + row["n_gen"]
    ts = [1e9 * n / x for x in ns]
    check(all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(ts, row["samples_ts"])), f"{where}: samples_ts")
    check(row["avg_ns"] == sum(ns) // len(ns), f"{where}: avg_ns {row['avg_ns']} vs {sum(ns) // len(ns)}")
    mean = sum(ts) / len(ts)
    sd = math.sqrt(sum((x - mean) ** 2 for x in ts) / (len(ts) - 1)) if len(ts) > 1 else 0.0
    check(math.isclose(row["avg_ts"], mean, rel_tol=1e-5), f"{where}: avg_ts {row['avg_ts']} vs {mean}")
    check(math.isclose(row["stddev_ts"], sd, rel_tol=1e-4, abs_tol=1e-5), f"{where}: stddev_ts {row['stddev_ts']} vs {sd}")


LLAMA_FIELDS = ["model_filename", "model_type", "model_size", "model_n_params", "n_batch", "n_threads", "type_k",
                "type_v", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
                "samples_ns", "samples_ts"]
FERRY_FIELDS = ["device", "vram_budget", "routing", "hit_rate", "h2d_bytes_per_token", "gpu_wait_pct",
                "weight_bytes_per_token", "mem_bw_gbps", "speed_of_light_fraction", "launches_per_token",
                "host_cpu_ms_per_token"]


def main():
    for arch in ("qwen3moe", "qwen35moe"):
        path = synth(arch)
        tg_bytes, size, params = expected_tg_bytes(path)
        base = ["-m", path, "-r", "2", "-p", "16", "-n", "4", "-t", "2"]

        rows = json.loads(bench(*base, "-pg", "8,2", "-d", "0,8"))
        tests = sorted((r["n_prompt"], r["n_gen"], r["n_depth"]) for r in rows)
        want = sorted((p, g, d) for d in (0, 8) for (p, g) in ((16, 0), (0, 4), (8, 2)))
        check(tests == want, f"{arch}: tests {tests}, want {want}")
        for r in rows:
            where = f"{arch} p{r['n_prompt']} g{r['n_gen']} d{r['n_depth']}"
            missing = [f for f in LLAMA_FIELDS + FERRY_FIELDS if f not in r]
            check(not missing, f"{where}: missing fields {missing}")
            if missing:
                continue
            check_stats(r, 2, where)
            check(r["model_filename"] == path, f"{where}: model_filename {r['model_filename']}")
            check(r["model_type"].startswith(arch + " "), f"{where}: model_type {r['model_type']}")
            check(r["model_size"] == size, f"{where}: model_size {r['model_size']} vs gguf {size}")
            check(r["model_n_params"] == params, f"{where}: model_n_params {r['model_n_params']} vs gguf {params}")
            check(r["n_threads"] == 2 and r["type_k"] == "f16" and r["device"] == "cpu", f"{where}: settings")
            check(r["hit_rate"] is None and r["h2d_bytes_per_token"] is None, f"{where}: cpu has no offload counters")
            check(r["launches_per_token"] is None, f"{where}: cpu launches no kernels")
            # The step thread's CPU interval lies inside the timed wall interval (bench_run.cpp);
            # 1e-3 relative: the thread CPU clock and CLOCK_MONOTONIC tick from different sources.
            host, tokens = r["host_cpu_ms_per_token"], (r["n_prompt"] + r["n_gen"]) * 2
            wall = sum(r["samples_ns"]) * 1e-6 / tokens
            check(host is not None and 0 < host <= wall * (1 + 1e-3),
                  f"{where}: host_cpu_ms_per_token {host} vs wall {wall} ms per token (one thread)")
            check(r["mem_bw_gbps"] is not None and r["mem_bw_gbps"] > 0, f"{where}: mem_bw_gbps {r['mem_bw_gbps']}")
            # Tiny models fit in the cache, so the fraction may exceed 1; it must follow from the
            # other columns: bytes per token x tokens / timed seconds / bandwidth.
            sol, wb = r["speed_of_light_fraction"], r["weight_bytes_per_token"]
            want = wb * (r["n_prompt"] + r["n_gen"]) * 2 / (sum(r["samples_ns"]) * 1e-9) / (r["mem_bw_gbps"] * 1e9)
            check(sol is not None and math.isclose(sol, want, rel_tol=1e-6), f"{where}: speed_of_light_fraction {sol} vs {want}")
            if r["n_prompt"] == 0:
                check(wb == tg_bytes, f"{where}: weight bytes per decoded token {wb} vs {tg_bytes} (gguf)")
            else:
                check(wb is not None and 0 < wb < tg_bytes, f"{where}: prompt weight bytes per token {wb} < {tg_bytes}")

        # Other formats carry the same tests.
        out = bench(*base, fmt="csv")
        table = list(csv.reader(io.StringIO(out)))
        keys = [k for k in rows[0] if k not in ("samples_ns", "samples_ts")]
        check(table[0] == keys, f"{arch}: csv header {table[0]} vs json keys {keys}")
        check(len(table) == 3, f"{arch}: csv rows {len(table) - 1}")
        for line in table[1:]:
            rec = dict(zip(table[0], line))
            check(rec["hit_rate"] == "" and float(rec["avg_ts"]) > 0, f"{arch}: csv record {rec}")
        jl = [json.loads(x) for x in bench(*base, fmt="jsonl").splitlines() if x.strip()]
        check(sorted((r["n_prompt"], r["n_gen"]) for r in jl) == [(0, 4), (16, 0)], f"{arch}: jsonl tests")
        for r in jl:
            check_stats(r, 2, f"{arch} jsonl")
        md = bench(*base, fmt="md").splitlines()
        check(len(md) == 4 and "t/s" in md[0] and md[1].startswith("|"), f"{arch}: md table {md}")
        check(any("pp16" in x for x in md) and any("tg4" in x for x in md), f"{arch}: md rows {md}")
        check("host ms/tok" not in md[0], f"{arch}: the cpu device's md table has no host column: {md[0]}")
        # --depth-fill copy: a depth past the 256 evaluated tokens, made by copying KV rows.
        r = ferry("bench", "-m", path, "-r", "1", "-p", "0", "-n", "2", "-t", "2", "-d", "600",
                  "--depth-fill", "copy", "-ctk", "q8_0", "-ctv", "q4_0", "-o", "json")
        rows = json.loads(r.stdout)
        check(len(rows) == 1 and rows[0]["n_depth"] == 600 and rows[0]["avg_ts"] > 0, f"{arch}: depth-fill copy {rows}")
        check("bytes per token" in r.stderr, f"{arch}: KV bytes per token on stderr")

    # Sweeps and the offload counters (qwen3moe tiny).
    path = synth("qwen3moe")
    rows = json.loads(bench("-m", path, "-r", "2", "-p", "16", "-n", "4", "-t", "1,2", "--routing", "model,uniform"))
    combos = sorted((r["n_threads"], r["routing"], r["n_prompt"]) for r in rows)
    check(combos == sorted((t, ro, p) for t in (1, 2) for ro in ("model", "uniform") for p in (0, 16)),
          f"sweep combos {combos}")
    rows = json.loads(bench("-m", path, "-r", "2", "-p", "16", "-n", "4", "--device", "sim", "--vram", "none,8M,1G"))
    check(len(rows) == 6, f"sim rows {len(rows)}")
    unconstrained = [x for x in rows if not x["vram_budget"]]
    check(len(unconstrained) == 2, f"--vram none: the unconstrained rows {[x['vram_budget'] for x in rows]}")
    rows = [x for x in rows if x["vram_budget"]]
    for row in rows:
        where = f"sim vram {row['vram_budget']} p{row['n_prompt']}"
        check(row["device"] == "sim" and row["vram_budget"] in (8 << 20, 1 << 30), f"{where}: device/budget")
        hr = row["hit_rate"]
        check(hr is not None and 0 <= hr <= 1, f"{where}: hit_rate {hr}")
        check(row["h2d_bytes_per_token"] is not None and row["gpu_wait_pct"] is not None, f"{where}: counters")
    small = [x for x in rows if x["vram_budget"] == 8 << 20 and x["n_gen"] > 0]
    big = [x for x in rows if x["vram_budget"] == 1 << 30 and x["n_gen"] > 0]
    if small and big:
        check(big[0]["hit_rate"] == 1.0, f"1G budget holds every expert: hit_rate {big[0]['hit_rate']}")
        check(small[0]["hit_rate"] < 1.0, f"8M budget misses: hit_rate {small[0]['hit_rate']}")

    # Bad arguments fail with a message.
    for args in (["-m", path, "-o", "xml"], ["-m", path, "-p", "a"], ["-m", scratch("missing.gguf"), "-p", "4", "-n", "0"],
                 ["-m", path, "-pg", "3"]):
        r = ferry("bench", *args, check=False)
        check(r.returncode != 0 and r.stderr.strip(), f"bench {args}: exit {r.returncode}, stderr {r.stderr[-200:]}")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
