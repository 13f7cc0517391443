#!/usr/bin/env python3
"""qwen3moe logits against llama.cpp.

A tiny synthetic qwen3moe (`ferry synth`) at F32 and, made from it by llama.cpp's own quantizer,
Q8_0 and Q4_K_M. For each file, Ferry's logits at every position of a 128-token sequence (one
prefill batch, `ferry logits`) are compared with llama.cpp's (Llama(logits_all=True).eval):
  F32:        NMSE <= 1e-5, argmax equal at >= 99% of positions;
  quantized:  NMSE <= 5e-4, argmax equal at >= 99% of positions.
(The issue's bounds. On the pinned AVX2 llama.cpp build the oracle uses, all three are in fact
bit-identical — NMSE 0 — because Ferry's CPU kernels add in ggml's orders, including the ones
that depend on the product's shape: kernels/cpu/dot_ref.cpp, matmul.hpp; printed below.)
Decode: `ferry logits --decode` (one token at a time through the KV cache) vs llama.cpp evaluating
the same tokens one at a time, every file, 48 tokens, the same bounds (bit-identical as well: for a
single token ggml takes other kernels — vec_dot, 1-row Q4_K — and Ferry follows them).
Also (F32): decode vs the prefill batch, NMSE <= 1e-5, with F16 and F32 caches; F32 cache vs
llama.cpp with an F32 cache (type_k/type_v).
"""
import os
import sys

try:
    import numpy as np
    import llama_cpp
except ImportError as e:  # the venv is still being populated
    print(f"SKIPPED: numpy/llama_cpp unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ferry, llama_decode_logits, llama_quantize, nmse, scratch  # noqa: E402

N_TOKENS = 128
N_DECODE = 48
SEED = 3
QUANTS = ("q8_0", "q4_k_m")
GGML_TYPE_F32 = 0
failures = []


def check(cond, msg):
    print(("ok:   " if cond else "FAIL: ") + msg)
    if not cond:
        failures.append(msg)


def llama_logits(path, tokens, f32_cache=False):
    kw = dict(type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32) if f32_cache else {}
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=512, n_batch=512, n_threads=2,
                          verbose=False, **kw)
    llm.eval(tokens)
    out = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    del llm
    return out


def ferry_logits(path, tokens, tag, *extra, env=None):
    out = scratch(f"qwen3moe-logits-{tag}.npy")
    ferry("logits", "-m", path, "--tokens", ",".join(map(str, tokens)), "-o", out, "-t", "2", *extra,
          env=env)
    return np.load(out).astype(np.float64)


def compare(label, ours, ref, quantized):
    total = nmse(ours, ref)
    agree = ours.argmax(1) == ref.argmax(1)
    identical = np.array_equal(ours.astype(np.float32), ref.astype(np.float32))
    print(f"{label}: NMSE {total:.3g}, argmax equal {agree.mean():.2%} ({(~agree).sum()} of {len(agree)} differ), "
          f"bit-identical: {identical}")
    bound = 5e-4 if quantized else 1e-5
    check(total <= bound, f"{label}: NMSE {total:.3g} <= {bound:g}")
    check(agree.mean() >= 0.99, f"{label}: argmax agreement {agree.mean():.2%} >= 99%")


def main():
    f32 = scratch("qwen3moe-tiny-f32.gguf")
    ferry("synth", "--arch", "qwen3moe", "--preset", "tiny", "--quant", "f32", "--seed", "11", "-q",
          "-t", "2", "-o", f32)
    files = {"f32": f32}
    for q in QUANTS:
        files[q] = scratch(f"qwen3moe-tiny-{q}.gguf")
        llama_quantize(f32, files[q], q)
    rng = np.random.default_rng(SEED)
    n_vocab = llama_cpp.Llama(model_path=f32, vocab_only=True, verbose=False).n_vocab()
    tokens = [int(t) for t in rng.integers(0, n_vocab, N_TOKENS)]

    for name, path in files.items():
        ref = llama_logits(path, tokens)
        ours = ferry_logits(path, tokens, name)
        compare(f"{name} prefill vs llama.cpp", ours, ref, quantized=name != "f32")
        dec_tokens = tokens[:N_DECODE]
        compare(f"{name} decode vs llama.cpp decode", ferry_logits(path, dec_tokens, name + "-dec", "--decode"),
                llama_decode_logits(path, dec_tokens), quantized=name != "f32")

    # Prefill vs decode through the KV cache, both cache types; F32 cache vs llama.cpp's F32 cache.
    for cache in ("f16", "f32"):
        pre = ferry_logits(f32, tokens, f"pre-{cache}", "-ctk", cache, "-ctv", cache)
        dec = ferry_logits(f32, tokens, f"dec-{cache}", "-ctk", cache, "-ctv", cache, "--decode")
        e = nmse(dec, pre)
        check(e <= 1e-5, f"f32 model, {cache} cache: decode vs prefill NMSE {e:.3g} <= 1e-5")
        if cache == "f32":
            compare("f32 model, f32 cache vs llama.cpp f32 cache", pre, llama_logits(f32, tokens, True), False)

    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all qwen3moe logits checks passed")


if __name__ == "__main__":
    main()
