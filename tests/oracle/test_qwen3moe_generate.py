#!/usr/bin/env python3
"""Greedy generation: `ferry run --temp 0` produces the same 32 token ids as llama.cpp's greedy loop
(argmax of the last logits, fed back one token at a time) on a tiny synthetic F32 qwen3moe, for a
few prompts, with the default F16 KV cache. Both stop early only at an end-of-generation token.
"""
import os
import re
import sys

try:
    import numpy as np
    import llama_cpp
except ImportError as e:  # the venv is still being populated
    print(f"SKIPPED: numpy/llama_cpp unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ferry, scratch  # noqa: E402

N_PREDICT = 32


def llama_greedy(llm, prompt, eog):
    llm.reset()
    llm.eval(prompt)
    out = []
    for _ in range(N_PREDICT):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(tok)
        if tok in eog:
            break
        llm.eval([tok])
    return out


def main():
    path = scratch("qwen3moe-gen-f32.gguf")
    ferry("synth", "--arch", "qwen3moe", "--preset", "tiny", "--quant", "f32", "--seed", "21", "-q",
          "-t", "2", "-o", path)
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=256, n_threads=2, verbose=False)
    eog = {llm.token_eos()}
    for text in (b"<|im_end|>", b"<|endoftext|>"):
        ids = llm.tokenize(text, add_bos=False, special=True)
        if len(ids) == 1:
            eog.add(ids[0])
    rng = np.random.default_rng(5)
    failures = 0
    full_length = 0
    for case in range(4):
        prompt = [int(t) for t in rng.integers(0, llm.n_vocab(), 6 + 5 * case)]
        ref = llama_greedy(llm, prompt, eog)
        r = ferry("run", "-m", path, "--tokens", ",".join(map(str, prompt)), "-n", N_PREDICT, "--temp", "0",
                  "--print-ids", "--no-display-prompt", "-t", "2", errors="replace")
        m = re.search(r"generated ids: ([0-9,]*)", r.stderr)
        ours = [int(x) for x in m.group(1).split(",") if x] if m else None
        ok = ours == ref
        full_length += len(ref) == N_PREDICT
        print(f"{'ok:  ' if ok else 'FAIL:'} prompt of {len(prompt)} tokens: llama.cpp {ref}")
        if not ok:
            print(f"      ferry     {ours}")
            failures += 1
    if full_length == 0:
        print("FAIL: every case stopped at an end-of-generation token early; the comparison is too weak")
        failures += 1
    if failures:
        sys.exit(1)
    print("greedy generation identical to llama.cpp")


if __name__ == "__main__":
    main()
