#!/usr/bin/env python3
"""The trained KJV models of tests/data/trained/ against llama.cpp.

Small qwen3moe and qwen35moe trained on the King James Bible (scripts/train/, cards beside the
files), at F32 and Q8_0 as llama.cpp's converter wrote them, and a qwen3moe whose matrices are all
256 wide (the K-quant model of the quality tables) at F16 and Q8_0. Checks:
  - every GGUF's sha256 is the one in tests/data/trained/SHA256SUMS (runs without the venv too);
  - Ferry's tokenizer gives llama.cpp's ids for a held-out passage (Ruth 1:16-17, a book the models
    never saw);
  - Ferry's logits at every position of that passage (one prefill batch) and of its first 32 tokens
    evaluated one at a time (decode) against llama.cpp's: NMSE <= 1e-6, argmax equal at >= 99% of
    positions; the held-out perplexity of the passage from both, which must agree within 0.1%.
Unlike the synthetic models' tests, these weights are trained: routing is peaked rather than
near-tied, and the logits are those of a model that predicts text.
"""
import hashlib
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import SOURCE  # noqa: E402

DATA = os.path.join(SOURCE, "tests", "data", "trained")
MODELS = ["kjv-qwen3moe-f32.gguf", "kjv-qwen3moe-q8_0.gguf", "kjv-qwen35moe-f32.gguf",
          "kjv-qwen35moe-q8_0.gguf", "kjv-qwen3moe-w256-f16.gguf", "kjv-qwen3moe-w256-q8_0.gguf"]
# Ruth 1:16-17, held out from training.
PASSAGE = ("And Ruth said, Intreat me not to leave thee, or to return from following after thee: for "
           "whither thou goest, I will go; and where thou lodgest, I will lodge: thy people shall be my "
           "people, and thy God my God:\nWhere thou diest, will I die, and there will I be buried: the "
           "LORD do so to me, and more also, if ought but death part thee and me.\n")
NMSE_BOUND = 1e-6
N_DECODE = 32


def check_sums():
    want = {}
    with open(os.path.join(DATA, "SHA256SUMS")) as f:
        for line in f:
            h, name = line.split()
            want[name] = h
    fails = []
    for name in MODELS:
        path = os.path.join(DATA, name)
        if name not in want:
            fails.append(f"{name}: not in SHA256SUMS")
            continue
        if not os.path.exists(path):
            fails.append(f"{name}: missing")
            continue
        got = hashlib.sha256(open(path, "rb").read()).hexdigest()
        print(f"{name}: sha256 {got} {'ok' if got == want[name] else 'MISMATCH, expected ' + want[name]}")
        if got != want[name]:
            fails.append(f"{name}: sha256 mismatch")
    return fails


def main():
    fails = check_sums()
    try:
        import numpy as np
        import llama_cpp
    except ImportError as e:  # the venv is still being populated
        for f in fails:
            print("FAIL:", f)
        if fails:
            return 1
        print(f"SKIPPED: numpy/llama_cpp unavailable ({e}); sha256 checked")
        return 77
    from common import ferry, llama_decode_logits, nmse, scratch

    def passage_ppl(logits, tokens):
        lg = logits[:-1]
        m = lg.max(axis=1, keepdims=True)
        lp = lg - m - np.log(np.exp(lg - m).sum(axis=1, keepdims=True))
        return math.exp(-lp[np.arange(len(tokens) - 1), tokens[1:]].mean())

    for name in MODELS:
        path = os.path.join(DATA, name)
        llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=512, n_batch=512, n_threads=2,
                              verbose=False)
        tokens = llm.tokenize(PASSAGE.encode(), add_bos=False, special=False)
        ours_ids = ferry("tokenize", "-m", path, "-p", PASSAGE, "--ids").stdout.strip()
        ours_ids = [int(t) for t in ours_ids.strip("[]").split(",") if t.strip()]
        if ours_ids != tokens:
            fails.append(f"{name}: ferry tokenize differs from llama.cpp ({len(ours_ids)} vs {len(tokens)} ids)")
        llm.eval(tokens)
        ref = np.array(llm.scores[: len(tokens)], dtype=np.float64)
        del llm
        checks = [("prefill", tokens, ref, [])]
        dec = tokens[:N_DECODE]
        checks.append(("decode", dec, llama_decode_logits(path, dec), ["--decode"]))
        for label, toks, want, extra in checks:
            out = scratch(f"trained-{name}-{label}.npy")
            ferry("logits", "-m", path, "--tokens", ",".join(map(str, toks)), "-o", out, "-t", "2", *extra)
            got = np.load(out).astype(np.float64)
            e = nmse(got, want)
            agree = (got.argmax(1) == want.argmax(1)).mean()
            ppl_ours, ppl_ref = passage_ppl(got, toks), passage_ppl(want, toks)
            print(f"{name} {label} ({len(toks)} tokens): NMSE {e:.3e}, argmax {agree * 100:.1f}%, "
                  f"passage ppl ferry {ppl_ours:.4f} llama.cpp {ppl_ref:.4f}, "
                  f"bit-identical: {np.array_equal(got.astype(np.float32), want.astype(np.float32))}")
            if not np.all(np.isfinite(got)):
                fails.append(f"{name} {label}: non-finite logits")
            if not e <= NMSE_BOUND:
                fails.append(f"{name} {label}: NMSE {e:.3e} > {NMSE_BOUND:g}")
            if agree < 0.99:
                fails.append(f"{name} {label}: argmax agreement {agree:.3f} < 0.99")
            if not abs(ppl_ours / ppl_ref - 1) <= 1e-3:
                fails.append(f"{name} {label}: passage perplexity {ppl_ours:.4f} vs {ppl_ref:.4f}")
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
