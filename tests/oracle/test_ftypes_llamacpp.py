#!/usr/bin/env python3
"""The GGUF file types people download, made by llama.cpp's own quantizer, against llama.cpp.

A tiny synthetic qwen3moe and qwen35moe at F32 (`ferry synth`), each quantized by
llama_model_quantize (no imatrix, what llama-quantize does by default) to Q2_K, Q3_K_S/M/L, Q4_0,
Q4_1, Q4_K_S, Q5_0, Q5_1, Q5_K_S, IQ4_NL, IQ4_XS and MXFP4_MOE; a tiny qwen3next to IQ4_XS. For
each file, Ferry's logits are compared with llama.cpp's on the same tokens:
  prefill: one batch of 96 tokens (Llama(logits_all=True));
  decode: 32 tokens evaluated one at a time on both sides (`ferry logits --decode`).
Ferry's CPU kernels add in the orders of the pinned llama.cpp's x86 kernels
(docs/decisions/0006), so the logits must be bit-identical; the test also prints NMSE and argmax
agreement, and names the types each file holds (the quantizer's per-tensor choices, so a type that
llama.cpp's rules never pick on these shapes would show here). `ferry inspect --json` must report
each layer's expert types and bytes as the file's tensors give them.
"""
import json
import os
import re
import sys
from collections import Counter

try:
    import numpy as np
    import gguf
    import llama_cpp
except ImportError as e:  # the venv is still being populated
    print(f"SKIPPED: numpy/gguf/llama_cpp unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ferry, llama_decode_logits, llama_quantize, nmse, scratch  # noqa: E402

FTYPES = ("q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_0", "q4_1", "q4_k_s", "q5_0", "q5_1",
          "q5_k_s", "iq4_nl", "iq4_xs", "mxfp4_moe")
RUNS = [("qwen3moe", FTYPES), ("qwen35moe", FTYPES), ("qwen3next", ("iq4_xs",))]
N_PREFILL, N_DECODE = 96, 32
SEED = 11

failures = []


def llama_logits(path, tokens):
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=256, n_batch=256, n_threads=2,
                          verbose=False)
    llm.eval(tokens)
    out = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    del llm
    return out


def ferry_logits(path, tokens, tag, decode=False):
    out = scratch(f"ftype-logits-{tag}.npy")
    ferry("logits", "-m", path, "--tokens", ",".join(map(str, tokens)), "-o", out, "-t", "2",
          *(["--decode"] if decode else []))
    return np.load(out).astype(np.float64)


def compare(label, ours, ref):
    e = nmse(ours, ref)
    agree = float((ours.argmax(1) == ref.argmax(1)).mean())
    identical = ours.shape == ref.shape and np.array_equal(ours.astype(np.float32), ref.astype(np.float32))
    print(f"{label}: NMSE {e:.3e}, argmax {agree * 100:.1f}% of {len(ours)}, bit-identical: {identical}")
    if not np.all(np.isfinite(ours)):
        failures.append(f"{label}: non-finite logits")
    if not identical:
        failures.append(f"{label}: not bit-identical to llama.cpp (NMSE {e:.3e}, argmax {agree:.3f})")


def types_of(path):
    return Counter(t.tensor_type.name for t in gguf.GGUFReader(path).tensors)


def check_inspect(label, path):
    """`ferry inspect --json`'s per-layer expert types and bytes against the file's own tensors."""
    info = json.loads(ferry("inspect", "--json", path).stdout)["per_expert"]
    want_types, want_bytes = {}, Counter()
    for t in gguf.GGUFReader(path).tensors:
        m = re.fullmatch(r"blk\.(\d+)\.ffn_(\w+)_exps\.weight", t.name)
        if m:
            want_types.setdefault(m.group(1), {})[m.group(2)] = t.tensor_type.name
            want_bytes[m.group(1)] += int(t.n_bytes) // int(t.shape[-1])  # one expert
    if info["types_by_layer"] != want_types:
        failures.append(f"{label}: inspect's expert types {info['types_by_layer']} vs {want_types}")
    if {k: v for k, v in info["bytes_by_layer"].items()} != dict(want_bytes):
        failures.append(f"{label}: inspect's expert bytes {info['bytes_by_layer']} vs {dict(want_bytes)}")


def main():
    rng = np.random.default_rng(99)
    for arch, ftypes in RUNS:
        f32 = scratch(f"ftypes-{arch}-f32.gguf")
        ferry("synth", "--arch", arch, "--preset", "tiny", "--quant", "f32", "--seed", SEED,
              "--router-skew", "0.5", "-t", "2", "-q", "-o", f32)
        probe = llama_cpp.Llama(model_path=f32, n_ctx=16, verbose=False)
        vocab = probe.n_vocab()
        del probe
        tokens = [int(t) for t in rng.integers(0, vocab, N_PREFILL)]
        for ft in ftypes:
            path = scratch(f"ftypes-{arch}-{ft}.gguf")
            llama_quantize(f32, path, ft)
            mix = ", ".join(f"{n} {c}" for n, c in sorted(types_of(path).items()))
            print(f"{arch} {ft}: {mix}")
            check_inspect(f"{arch} {ft}", path)
            compare(f"{arch} {ft} prefill", ferry_logits(path, tokens, f"{arch}-{ft}"),
                    llama_logits(path, tokens))
            dec = tokens[:N_DECODE]
            compare(f"{arch} {ft} decode", ferry_logits(path, dec, f"{arch}-{ft}-dec", decode=True),
                    llama_decode_logits(path, dec))
            os.remove(path)
        os.remove(f32)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
