#!/usr/bin/env python3
"""CPU prompt and decode speed: Ferry vs llama.cpp (llama-cpp-python) on the same GGUF, same threads.

  .venv/bin/python bench/cpu_decode.py --ferry build/ferry [--model FILE | --preset small --quant q4_k_m]
        [--threads 2] [--prompt-tokens 64] [--gen 32] [--repeats 3] [--out bench/results/DATE-cpu-decode.md]

Without --model a synthetic qwen3moe (`ferry synth`, default: small Q4_K_M, ~1.6 GB) is made once in
--data-dir. Both engines get the same prompt token ids; each repeat runs Ferry then llama.cpp after
a warm-up of both (page cache filled). Ferry's figures come from its own timing lines (prompt eval =
the prefill batch, eval = single-token steps), llama.cpp's from wall time around llama_decode calls
(eval of the prompt, then greedy single-token evals). Reported: best and median of the repeats,
tok/s, and the weight bytes a decode step reads per token / time = achieved GB/s.
"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import numpy as np


def lscpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        return m.group(1).strip() if m else platform.processor()
    except OSError:
        return platform.processor()


def active_bytes_per_token(path):
    """Bytes of weights one decode step reads: dense tensors + top-k/n_expert of the expert tensors
    (the embedding row is negligible and excluded)."""
    import gguf
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    k = int(r.fields[f"{arch}.expert_used_count"].parts[-1][0])
    n = int(r.fields[f"{arch}.expert_count"].parts[-1][0])
    total = 0.0
    for t in r.tensors:
        if t.name == "token_embd.weight":
            continue
        total += t.n_bytes * (k / n if "_exps" in t.name else 1.0)
    return total


def run_ferry(ferry, model, tokens, gen, threads):
    r = subprocess.run([ferry, "run", "-m", model, "--tokens", ",".join(map(str, tokens)), "-n", str(gen),
                        "--temp", "0", "--no-display-prompt", "-t", str(threads), "-c", "1024"],
                       capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        sys.exit(f"ferry failed:\n{r.stderr}")
    pe = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", r.stderr)
    ev = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", r.stderr.split("prompt eval time")[1])
    return int(pe.group(2)) / (float(pe.group(1)) / 1e3), int(ev.group(2)) / (float(ev.group(1)) / 1e3)


class Llama:
    def __init__(self, model, threads):
        import llama_cpp
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=1024, n_batch=512, n_threads=threads,
                                   n_threads_batch=threads, verbose=False)

    def run(self, tokens, gen):
        llm = self.llm
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens)
        t1 = time.perf_counter()
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t2 = time.perf_counter()
        for _ in range(gen - 1):  # as Ferry: gen tokens sampled, gen - 1 decode steps
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t3 = time.perf_counter()
        return len(tokens) / (t1 - t0), (gen - 1) / (t3 - t2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--model")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--quant", default="q4_k_m")
    ap.add_argument("--data-dir", default="build/bench-data")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()

    model = a.model
    if not model:
        os.makedirs(a.data_dir, exist_ok=True)
        model = os.path.join(a.data_dir, f"qwen3moe-{a.preset}-{a.quant}.gguf")
        if not os.path.exists(model):
            subprocess.run([a.ferry, "synth", "--arch", "qwen3moe", "--preset", a.preset, "--quant", a.quant,
                            "--seed", "1", "-q", "-o", model], check=True)
    rng = np.random.default_rng(1)
    tokens = [int(t) for t in rng.integers(0, 256, a.prompt_tokens)]  # byte tokens: valid in any vocab

    llama = Llama(model, a.threads)
    run_ferry(a.ferry, model, tokens, 4, a.threads)  # warm-up: page cache, allocator
    llama.run(tokens, 4)
    res = {"ferry": [], "llama.cpp": []}
    load = []
    for i in range(a.repeats):
        load.append(os.getloadavg()[0])
        res["ferry"].append(run_ferry(a.ferry, model, tokens, a.gen, a.threads))
        res["llama.cpp"].append(llama.run(tokens, a.gen))
        print(f"repeat {i + 1}: ferry prompt {res['ferry'][-1][0]:.2f} decode {res['ferry'][-1][1]:.2f} tok/s | "
              f"llama.cpp prompt {res['llama.cpp'][-1][0]:.2f} decode {res['llama.cpp'][-1][1]:.2f} tok/s",
              file=sys.stderr)

    bpt = active_bytes_per_token(model)
    lines = [f"| engine | prompt tok/s (best / median) | decode tok/s (best / median) | decode weight GB/s (best) |",
             "|---|---|---|---|"]
    for eng, rs in res.items():
        p = [x[0] for x in rs]
        d = [x[1] for x in rs]
        lines.append(f"| {eng} | {max(p):.2f} / {statistics.median(p):.2f} | {max(d):.2f} / {statistics.median(d):.2f} "
                     f"| {max(d) * bpt / 1e9:.2f} |")
        ratio_d = max(x[1] for x in res["ferry"]) / max(x[1] for x in res["llama.cpp"])
        ratio_p = max(x[0] for x in res["ferry"]) / max(x[0] for x in res["llama.cpp"])
    table = "\n".join(lines)
    head = (f"model {os.path.basename(model)} ({os.path.getsize(model) / 1e9:.2f} GB, {bpt / 1e6:.0f} MB of weights "
            f"read per decoded token), {a.threads} threads, prompt {a.prompt_tokens} tokens, {a.gen} generated, "
            f"{a.repeats} repeats; machine: {lscpu_model()}, {os.cpu_count()} logical CPUs, "
            f"load average during the runs {min(load):.1f}-{max(load):.1f}")
    summary = f"Ferry / llama.cpp (best): decode {ratio_d:.2f}x, prompt {ratio_p:.2f}x"
    print(head)
    print()
    print(table)
    print()
    print(summary)
    if a.out:
        cmd = " ".join(["bench/cpu_decode.py"] + sys.argv[1:])
        with open(a.out, "a") as f:
            f.write(f"\n## {datetime.date.today().isoformat()} — {os.path.basename(model)}\n\n{head}\n\n"
                    f"Command: `.venv/bin/python {cmd}`\n\n{table}\n\n{summary}\n")


if __name__ == "__main__":
    main()
