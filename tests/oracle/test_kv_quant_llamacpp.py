#!/usr/bin/env python3
"""Quantized KV caches (-ctk/-ctv) against llama.cpp with flash attention on.

llama.cpp needs flash attention for a quantized V; on the CPU that is one op
(ggml_compute_forward_flash_attn_ext_f16_one_chunk) for every pair that is not F16/F32 only, and
Ferry's CPU attention follows it for those pairs. On tiny synthetic qwen3moe and qwen35moe models
(`ferry synth --quant f32`), Ferry's logits at every position of a 96-token prefill are compared
with llama.cpp's (Llama(flash_attn=True, type_k=..., type_v=...)) for -ctk q8_0 with each of the
nine -ctv types, and for q4_0/q4_0, f16/q8_0, bf16/bf16, iq4_nl/q5_1; two pairs also as 40 decode
steps. Bounds: NMSE <= 1e-4 and argmax agreement >= 99% (the issue's); bit-identity is printed
(llama.cpp 0.3.36 Hadamard-rotates quantized K/V rows, and Q and the output with them; Ferry does
the same, and most pairs come out bit-identical).
Also: an unknown -ctk type is refused with the list of valid names.
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
from common import ferry, nmse, scratch  # noqa: E402

N_PREFILL = 96
N_DECODE = 40
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
GGML_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20,
             "bf16": 30}
PAIRS = [("q8_0", v) for v in TYPES] + [("q4_0", "q4_0"), ("f16", "q8_0"), ("bf16", "bf16"),
                                        ("iq4_nl", "q5_1")]
DECODE_PAIRS = [("q8_0", "q4_0"), ("f16", "q8_0")]


def llama(path, tk, tv):
    return llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=256, n_batch=256, n_threads=2,
                           flash_attn=True, type_k=GGML_TYPE[tk], type_v=GGML_TYPE[tv], verbose=False)


def llama_prefill(path, tokens, tk, tv):
    llm = llama(path, tk, tv)
    llm.eval(tokens)
    out = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    del llm
    return out


def llama_decode(path, tokens, tk, tv):
    llm = llama(path, tk, tv)
    rows = []
    for t in tokens:
        llm.eval([t])
        rows.append(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64))
    del llm
    return np.array(rows)


def ferry_logits(path, tokens, tk, tv, decode=False):
    out = scratch(f"kvq-{os.path.basename(path)}-{tk}-{tv}-{int(decode)}.npy")
    ferry("logits", "-m", path, "--tokens", ",".join(map(str, tokens)), "-o", out, "-t", "2",
          "-ctk", tk, "-ctv", tv, *(["--decode"] if decode else []))
    return np.load(out).astype(np.float64)


def compare(label, ours, ref):
    e = nmse(ours, ref)
    agree = float((ours.argmax(1) == ref.argmax(1)).mean())
    same = np.array_equal(ours.astype(np.float32), ref.astype(np.float32))
    print(f"{label}: NMSE {e:.3e}, argmax {agree * 100:.1f}% of {len(ours)}, bit-identical: {same}")
    fails = []
    if not np.all(np.isfinite(ours)):
        fails.append(f"{label}: non-finite logits")
    if not e <= 1e-4:
        fails.append(f"{label}: NMSE {e:.3e} > 1e-4")
    if agree < 0.99:
        fails.append(f"{label}: argmax agreement {agree:.3f} < 0.99")
    return fails


def main():
    fails = []
    rng = np.random.default_rng(1616)
    for arch in ("qwen3moe", "qwen35moe"):
        path = scratch(f"kvq-{arch}-tiny-f32.gguf")
        ferry("synth", "--arch", arch, "--preset", "tiny", "--quant", "f32", "--seed", "16", "-q", "-o", path)
        probe = llama_cpp.Llama(model_path=path, n_ctx=16, verbose=False)
        vocab = probe.n_vocab()
        del probe
        tokens = [int(t) for t in rng.integers(0, vocab, N_PREFILL)]
        for tk, tv in PAIRS:
            fails += compare(f"{arch} -ctk {tk} -ctv {tv} prefill", ferry_logits(path, tokens, tk, tv),
                             llama_prefill(path, tokens, tk, tv))
        for tk, tv in DECODE_PAIRS:
            dec = tokens[:N_DECODE]
            fails += compare(f"{arch} -ctk {tk} -ctv {tv} decode", ferry_logits(path, dec, tk, tv, decode=True),
                             llama_decode(path, dec, tk, tv))
        os.remove(path)

    r = ferry("run", "-ctk", "q4_k", "-n", "1", "-p", "hi", check=False)
    msg = r.stdout + r.stderr
    if r.returncode == 0 or "iq4_nl" not in msg or "q5_1" not in msg:
        fails.append(f"-ctk q4_k: expected a refusal listing the valid types, got rc {r.returncode}: {msg.strip()}")
    else:
        print(f"-ctk q4_k refused: {msg.strip().splitlines()[-1]}")

    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
