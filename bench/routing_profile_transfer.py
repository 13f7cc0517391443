#!/usr/bin/env python3
"""How much of a routing a static expert set chosen from another routing holds, on the trained
reference models (tests/data/trained): the question behind the static cache of
thecodacus/llama.cpp#5 (docs/simulator.md, model revision 11), whose profile comes from a
representative prompt while llama-bench's tg test decodes random token ids (its `test_gen`:
`token = std::rand() % n_vocab` every step).

usage: bench/routing_profile_transfer.py [build/ferry]

For each trained model it records the routing of the first 3000 bytes of heldout text (prompt and
64 decoded tokens, `ferry run --record-routing`) and of 1024 random token ids (`--tokens`, ids from
random.Random(1)), takes each layer's top N experts (N = E · 124/256, the fork's share) of a
profile, and prints the share of another routing's selections in it: text profile (first half) on
the later text, the same profile on the random ids, and a random-id profile (first half) on later
random ids. Deterministic (greedy decoding, fixed ids); ~10 s on 2 cores.
"""
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FERRY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "ferry")
TRAINED = os.path.join(ROOT, "tests", "data", "trained")


def read_trace(path):
    """Per layer, the token-by-token expert ids of an FRRT file (runtime/moe/routing_trace.hpp)."""
    b = open(path, "rb").read()
    magic, _, n_layer, n_expert, top_k, _ = struct.unpack_from("<4sIIIII", b, 0)
    if magic != b"FRRT":
        sys.exit(f"{path}: not a routing trace")
    seq, off = [[] for _ in range(n_layer)], 24
    while off < len(b):
        layer, n = struct.unpack_from("<iI", b, off)
        off += 8
        ids = struct.unpack_from(f"<{n * top_k}i", b, off)
        off += 8 * n * top_k  # ids, then as many f32 weights
        seq[layer] += [ids[i * top_k:(i + 1) * top_k] for i in range(n)]
    return n_expert, seq


def top_set(tokens, n_expert, n):
    count = [0] * n_expert
    for row in tokens:
        for e in row:
            count[e] += 1
    return set(sorted(range(n_expert), key=lambda e: (-count[e], e))[:n])


def held(tokens, s):
    uses = [e for row in tokens for e in row]
    return sum(e in s for e in uses) / len(uses)


def vocab_size(gguf):
    """The tokenizer's size, from `ferry inspect` ("tokenizer ... N tokens")."""
    out = subprocess.run([FERRY, "inspect", gguf], capture_output=True, text=True, check=True).stdout
    m = re.search(r"^tokenizer .*?, (\d+) tokens", out, re.M)
    if not m:
        sys.exit(f"no tokenizer size in `ferry inspect {gguf}`")
    return int(m.group(1))


def main():
    tmp = tempfile.mkdtemp(prefix="ferry-transfer-")
    text = os.path.join(tmp, "held3k.txt")
    with open(os.path.join(TRAINED, "heldout.txt"), "rb") as f:
        open(text, "wb").write(f.read(3000))
    print("| model | experts, top-k | N | text profile → later text | text profile → random ids | "
          "random profile → later random ids |")
    print("|---|---|---:|---:|---:|---:|")
    for arch in ("qwen35moe", "qwen3moe"):
        model = os.path.join(TRAINED, f"kjv-{arch}-q8_0.gguf")
        n_vocab = vocab_size(model)
        rng = random.Random(1)
        ids = ",".join(str(rng.randrange(n_vocab)) for _ in range(1024))
        t_path, r_path = os.path.join(tmp, f"text-{arch}.frrt"), os.path.join(tmp, f"rand-{arch}.frrt")
        for extra, path in ((f"-f {text} -n 64", t_path), (f"--tokens {ids} -n 1", r_path)):
            r = subprocess.run(f"{FERRY} run -m {model} {extra} --temp 0 -t 2 --record-routing {path}",
                               shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, errors="replace")
            if r.returncode != 0:
                sys.exit(f"ferry run failed:\n{r.stderr}")
        n_expert, tseq = read_trace(t_path)
        _, rseq = read_trace(r_path)
        n = round(n_expert * 124 / 256)
        tt, tr, rr = [], [], []
        for lt, lr in zip(tseq, rseq):
            prof = top_set(lt[:len(lt) // 2], n_expert, n)
            tt.append(held(lt[len(lt) // 2:], prof))
            tr.append(held(lr, prof))
            rr.append(held(lr[len(lr) // 2:], top_set(lr[:len(lr) // 2], n_expert, n)))
        mean = lambda x: 100 * sum(x) / len(x)
        print(f"| kjv-{arch} | {n_expert}, top-{len(tseq[0][0])} | {n} | {mean(tt):.1f}% | {mean(tr):.1f}% | "
              f"{mean(rr):.1f}% |")


if __name__ == "__main__":
    main()
