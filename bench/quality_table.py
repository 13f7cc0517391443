#!/usr/bin/env python3
"""Quality of weight ftypes x KV cache types on the trained reference models (tests/data/trained).

For each model: its unquantized file (F32, or F16 for the w256 model) with an F16 KV cache writes
the base log-probabilities of the held-out books (`ferry perplexity --kl-divergence-base`); each
ftype (made from that file by llama.cpp's own quantizer) with each -ctk/-ctv pair is then scored
against it (`--kl-divergence`). Prints one markdown table: ftype, KV K/V, PPL ± err, ΔPPL %, mean
KLD, 99% KLD, same top p.

usage: .venv/bin/python bench/quality_table.py FERRY_BIN [-c 128] [--chunks N] [--out DIR]
                                               [--models kjv-qwen3moe,kjv-qwen35moe,kjv-qwen3moe-w256]
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
from common import llama_quantize  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINED = os.path.join(ROOT, "tests", "data", "trained")
FTYPES = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0", "iq4_xs", "q3_k_m", "q2_k")
MODELS = ("kjv-qwen3moe", "kjv-qwen35moe", "kjv-qwen3moe-w256")
KV = (("f16", "f16"), ("q8_0", "q8_0"), ("q8_0", "q5_0"), ("q8_0", "q4_0"), ("q5_0", "q5_0"), ("q4_0", "q4_0"))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def field(text, pattern):
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"no match for {pattern!r} in:\n{text}")
    return m.groups()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry")
    ap.add_argument("-c", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("--out", default=os.path.join(ROOT, ".cache", "quality"))
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    chosen = a.models.split(",")
    unknown = [m for m in chosen if m not in MODELS]
    if unknown:
        sys.exit(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    os.makedirs(a.out, exist_ok=True)
    text = os.path.join(TRAINED, "heldout.txt")
    common = ["-c", str(a.c), "-t", str(a.t)] + (["--chunks", str(a.chunks)] if a.chunks > 0 else [])
    print("| model | ftype | KV K/V | PPL ± err | ΔPPL % | mean KLD | 99% KLD | same top p % |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name in MODELS:
        if name not in chosen:
            continue
        # the unquantized file the model is kept as (tests/data/trained: F32, or F16 for w256)
        base_type = next(t for t in ("f32", "f16") if os.path.exists(os.path.join(TRAINED, f"{name}-{t}.gguf")))
        unquantized = os.path.join(TRAINED, f"{name}-{base_type}.gguf")
        base = os.path.join(a.out, f"{name}-{base_type}.kld")
        out = run([a.ferry, "perplexity", "-m", unquantized, "-f", text, "--kl-divergence-base", base] + common)
        ppl, err = field(out, r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")
        print(f"| {name} | {base_type.upper()} (base) | f16/f16 | {ppl} ± {err} | 0 | 0 | 0 | 100 |")
        for ft in FTYPES:
            model = os.path.join(a.out, f"{name}-{ft}.gguf")
            if not os.path.exists(model):
                llama_quantize(unquantized, model, ft)
            for k, v in KV:
                out = run([a.ferry, "perplexity", "-m", model, "--kl-divergence-base", base, "--kl-divergence",
                           "-ctk", k, "-ctv", v] + common)
                ppl, err = field(out, r"Mean PPL\(Q\)\s+:\s+([0-9.]+) ± +([0-9.]+)")
                ratio, = field(out, r"Mean PPL\(Q\)/PPL\(base\)\s+:\s+([0-9.]+)")
                kld, = field(out, r"Mean    KLD:\s+([-0-9.]+)")
                k99, = field(out, r"99\.0%   KLD:\s+([-0-9.]+)")
                top, = field(out, r"Same top p:\s+([0-9.]+)")
                print(f"| {name} | {ft.upper()} | {k}/{v} | {float(ppl):.4f} ± {float(err):.4f} | "
                      f"{(float(ratio) - 1) * 100:+.3f} | {float(kld):.6f} | {float(k99):.6f} | {float(top):.2f} |",
                      flush=True)


if __name__ == "__main__":
    main()
