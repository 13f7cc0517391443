#!/usr/bin/env python3
"""Long context end to end: 4096-token sequences (the tiny models' whole trained context) through
tiny synthetic qwen3moe and qwen35moe models (F32 weights, F16 KV cache), Ferry's logits at every
position against llama.cpp's: NMSE <= 1e-6 over all positions and over the last 512, top-1
agreement >= 99%. Positions this deep exercise RoPE angles, the KV cache's addressing and the
attention softmax over thousands of keys; the DeltaNet state of qwen35moe runs 4096 steps.
"""
import os
import sys

try:
    import numpy as np
    import llama_cpp
except ImportError as e:
    print(f"SKIPPED: numpy/llama_cpp unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ferry, nmse, scratch  # noqa: E402

N = 4096
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


for arch in ("qwen3moe", "qwen35moe"):
    path = scratch(f"long-{arch}.gguf")
    ferry("synth", "--arch", arch, "--preset", "tiny", "--quant", "f32", "--seed", "11", "--router-skew", "0.5",
          "-q", "-o", path)
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=N, n_batch=512, n_threads=2, verbose=False)
    rng = np.random.default_rng(3)
    tokens = [int(t) for t in rng.integers(0, llm.n_vocab(), N)]
    llm.eval(tokens)
    ref = np.array(llm.scores[:N], dtype=np.float64)
    del llm
    out = scratch(f"long-{arch}.npy")
    ferry("logits", "-m", path, "--tokens", ",".join(map(str, tokens)), "-o", out, "-t", "2", "-c", N)
    ours = np.load(out).astype(np.float64)
    e_all, e_tail = nmse(ours, ref), nmse(ours[-512:], ref[-512:])
    top1 = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    print(f"{arch}: {N} tokens, NMSE all {e_all:.3e}, last 512 {e_tail:.3e}, top-1 {100 * top1:.2f}%")
    check(np.isfinite(ours).all(), f"{arch}: non-finite logits")
    check(e_all <= 1e-6 and e_tail <= 1e-6, f"{arch}: NMSE {e_all:.3e} / {e_tail:.3e} > 1e-6")
    check(top1 >= 0.99, f"{arch}: top-1 agreement {top1:.4f} < 0.99")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("ok")
