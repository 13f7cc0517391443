#!/usr/bin/env python3
"""Load trained GGUFs in llama.cpp (llama-cpp-python), score the held-out text, generate greedily.

Run with a python that has llama_cpp (the project venv). For each GGUF:
  - tokenizes the held-out text with llama.cpp's tokenizer and compares the ids with the training
    tokenizer's (--hf-tokens, a JSON list written by hf_tokens.py): equal ids mean llama.cpp's
    "qwen2"/"qwen35" pre-tokenizer reproduces ours;
  - held-out perplexity as train.py computes it (non-overlapping windows of --ctx tokens, every
    token after a window's first scored);
  - greedy continuations of a few prompts.
Writes one JSON object (file name -> results) to --out.
"""
import argparse
import json
import math
from pathlib import Path

import numpy as np
import llama_cpp

PROMPTS = [
    "In the beginning",
    "And the LORD said unto Moses,",
    "Blessed are the",
    "And Jesus answered and said unto them,",
]


def heldout_ppl(llm, tokens, ctx):
    total, count = 0.0, 0
    for start in range(0, len(tokens) - 1, ctx):
        window = tokens[start:start + ctx]
        if len(window) < 2:
            break
        llm.reset()
        llm.eval(window)
        logits = np.array(llm.scores[:len(window)], dtype=np.float64)
        m = logits.max(axis=1, keepdims=True)
        lp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
        nll = -lp[np.arange(len(window) - 1), window[1:]]
        total += nll.sum()
        count += len(nll)
    return math.exp(total / count), count


def greedy(llm, prompt, n):
    llm.reset()
    toks = llm.tokenize(prompt.encode(), add_bos=False, special=False)
    out = []
    for t in llm.generate(toks, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        if t == llm.token_eos() or len(out) >= n:
            break
        out.append(t)
    return llm.detokenize(out).decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", nargs="+", type=Path)
    ap.add_argument("--heldout", type=Path, required=True)
    ap.add_argument("--hf-tokens", type=Path, required=True)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--n-predict", type=int, default=48)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    text = args.heldout.read_text(encoding="utf-8")
    hf_tokens = json.loads(args.hf_tokens.read_text())
    results = {"llama_cpp_python": llama_cpp.__version__}
    for path in args.gguf:
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_batch=512, logits_all=True,
                              n_threads=1, seed=0, verbose=False)
        ids = llm.tokenize(text.encode(), add_bos=False, special=False)
        same = ids == hf_tokens
        ppl, n = heldout_ppl(llm, hf_tokens, args.ctx)
        samples = {p: greedy(llm, p, args.n_predict) for p in PROMPTS}
        results[path.name] = {"tokenizer_matches_training": same, "heldout_tokens": len(ids),
                              "heldout_ppl": ppl, "heldout_scored_tokens": n, "samples": samples}
        print(f"{path.name}: tokenizer matches {same}, held-out ppl {ppl:.3f} ({n} tokens)")
        for p, s in samples.items():
            print(f"  {p!r} -> {s!r}")
        del llm
    args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
