#!/usr/bin/env python3
"""`ferry perplexity` against llama-perplexity's scoring rule applied to llama.cpp's own logits.

For tiny synthetic qwen3moe and qwen35moe models (F32, and Q8_0 made by llama.cpp's quantizer) on
random words, and for the trained reference models (tests/data/trained, F32 and Q8_0 from llama.cpp's
converter) on their held-out books:
(1) perplexity: the text is tokenized by llama.cpp (add_special, no special parsing, as
    llama-perplexity), cut into chunks of C tokens; each chunk is evaluated by llama.cpp from an
    empty cache (BOS first where the vocabulary adds one) and positions C/2 .. C-2 are scored on the
    next token. The PPL from those logits must equal `ferry perplexity`'s within 0.1%, and each
    chunk's running value too.
(2) KL divergence: `ferry perplexity --kl-divergence-base` on the F32 model writes the base file;
    its header and tokens are checked, its records decoded in numpy must give llama.cpp's F32
    log-probabilities within the packing's resolution, and `--kl-divergence` on the Q8_0 model must
    print llama-perplexity's blocks with a mean KLD equal, within 1%, to the KLD computed here from
    llama.cpp's Q8_0 logits against the decoded base records.
(3) A base file written by llama-perplexity itself (tests/data/perplexity, made by the pinned
    build, see its README): `ferry perplexity --kl-divergence` on the trained Q8_0 model against it
    prints every figure of the tool's three statistics blocks within 1% (they are equal).
(4) Bad input: a truncated base file and a text too short for two chunks are refused with a message
    naming the problem, and a failed run leaves no base file behind.
"""
import os
import re
import struct
import sys

try:
    import numpy as np
    import llama_cpp
except ImportError as e:
    print(f"SKIPPED: numpy/llama_cpp unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ferry, llama_quantize, scratch  # noqa: E402

C = 64
CHUNKS = 4  # 4 × 31 scored positions: llama-perplexity prints statistics from 100
WORDS = ("the ferry leaves harbour at seven and crosses grey water while gulls follow its wake "
         "past the lighthouse toward a quiet island where fishermen mend nets beside boats").split()
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def make_text(n_words, seed):
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n_words)) + "\n"


def llama_chunk_logits(llm, chunk):
    llm.reset()
    llm.eval(chunk)
    return np.array(llm.scores[:len(chunk)], dtype=np.float64)


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def scored(path, tokens):
    """llama.cpp's log-probabilities of the scored positions of every chunk: (chunks, C/2-1, V), targets."""
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=C, n_batch=C, n_threads=2, verbose=False)
    bos = llm.token_bos() if llm._model.add_bos_token() else -1
    lps, targets = [], []
    first = C // 2
    for c in range(len(tokens) // C)[:CHUNKS]:
        chunk = list(tokens[c * C:(c + 1) * C])
        targets.append(chunk[first + 1:C])
        if bos >= 0:
            chunk[0] = bos
        lps.append(log_softmax(llama_chunk_logits(llm, chunk))[first:C - 1])
    del llm
    return np.array(lps), np.array(targets)


def decode_base(path, n_vocab):
    with open(path, "rb") as f:
        data = f.read()
    check(data[:8] == b"_logits_", "base file magic")
    n_ctx, nv_file, n_chunk = struct.unpack("<iii", data[8:20])
    tokens = np.frombuffer(data, dtype="<i4", count=n_ctx * n_chunk, offset=20)
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rec = np.frombuffer(data, dtype="<u2", offset=20 + 4 * n_ctx * n_chunk).reshape(n_chunk, n_ctx - 1 - n_ctx // 2, nv)
    scale = rec[..., 0:2].copy().view("<f4")[..., 0]
    min_lp = rec[..., 2:4].copy().view("<f4")[..., 0]
    lp = scale[..., None].astype(np.float64) * rec[..., 4:4 + n_vocab] + min_lp[..., None]
    return (n_ctx, nv_file, n_chunk), tokens, lp, rec[..., 4:4 + n_vocab]


def synthetic(arch):
    f32 = scratch(f"ppl-{arch}-f32.gguf")
    q8 = scratch(f"ppl-{arch}-q8_0.gguf")
    ferry("synth", "--arch", arch, "--preset", "tiny", "--quant", "f32", "--seed", 3, "--router-skew", "0.5",
          "-t", "2", "-q", "-o", f32)
    llama_quantize(f32, q8, "q8_0")
    text = scratch(f"ppl-{arch}.txt")
    with open(text, "w") as f:
        f.write(make_text(600, 1))
    return f32, q8, text


def run_pair(arch, f32, q8, text):

    vocab_llm = llama_cpp.Llama(model_path=f32, vocab_only=True, verbose=False)
    tokens = vocab_llm.tokenize(open(text, "rb").read(), add_bos=True, special=False)
    n_vocab = vocab_llm.n_vocab()
    del vocab_llm
    check(len(tokens) >= CHUNKS * C, f"{arch}: the text gives {len(tokens)} tokens, fewer than {CHUNKS * C}")

    # (1) perplexity, F32 and Q8_0
    for path, name in ((f32, "f32"), (q8, "q8_0")):
        lp, tgt = scored(path, tokens)
        nll = -np.take_along_axis(lp, tgt[..., None], axis=-1)[..., 0]
        want_running = [float(np.exp(nll[:c + 1].mean())) for c in range(nll.shape[0])]
        r = ferry("perplexity", "-m", path, "-f", text, "-c", C, "--chunks", CHUNKS, "-t", "2")
        got_running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", r.stdout)]
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", r.stdout)
        check(m is not None, f"{arch} {name}: no final estimate in {r.stdout!r}")
        if not m:
            continue
        got = float(m.group(1))
        rel = abs(got - want_running[-1]) / want_running[-1]
        print(f"{arch} {name}: ferry PPL {got:.4f} ± {m.group(2)}, llama.cpp logits {want_running[-1]:.4f} "
              f"(rel {rel:.2e}); chunks {got_running} vs {[round(v, 4) for v in want_running]}")
        check(rel <= 1e-3, f"{arch} {name}: PPL {got} vs {want_running[-1]} (rel {rel:.2e} > 0.1%)")
        check(len(got_running) == len(want_running) and
              all(abs(a - b) / b <= 1e-3 for a, b in zip(got_running, want_running)),
              f"{arch} {name}: per-chunk values {got_running} vs {want_running}")
        err = float(m.group(2))
        want_err = float(np.exp(nll.mean()) * np.sqrt(nll.var() / (nll.size - 1)))
        check(abs(err - want_err) <= 1e-3 * want_err + 1e-5, f"{arch} {name}: error {err} vs {want_err}")

    # (2) KL divergence: base from F32 written by ferry, Q8_0 against it
    base = scratch(f"ppl-{arch}-f32.kld")
    if os.path.exists(base):
        os.remove(base)
    ferry("perplexity", "-m", f32, "-f", text, "-c", C, "--chunks", CHUNKS, "-t", "2", "--kl-divergence-base", base)
    (n_ctx, nv_file, n_chunk), base_tokens, base_lp, q = decode_base(base, n_vocab)
    check((n_ctx, nv_file, n_chunk) == (C, n_vocab, CHUNKS), f"{arch}: base header {(n_ctx, nv_file, n_chunk)}")
    check(list(base_tokens) == list(tokens[:C * CHUNKS]), f"{arch}: base file tokens differ from llama.cpp's")
    lp32, tgt = scored(f32, tokens)
    top = lp32.max(axis=-1, keepdims=True)
    keep = lp32 > top - 15.9  # inside the packed window
    res = np.abs(base_lp - lp32)[keep].max()
    # The packing's step (<= 16/65535) plus Ferry's F32 logits against llama.cpp's (equal to NMSE
    # ~1e-10, not bit for bit, on the trained files: ~1e-4 at logits of 20-30).
    check(res < 16 / 65535 * 0.6 + 2e-3, f"{arch}: base log-probs off by {res:.2e}")
    lpq, _ = scored(q8, tokens)
    p_base = np.where(base_lp > -16, np.exp(base_lp), 0.0)
    kld = (p_base * (base_lp - lpq)).sum(axis=-1)
    r = ferry("perplexity", "-m", q8, "--kl-divergence-base", base, "--kl-divergence", "-t", "2")
    for block in ("====== Perplexity statistics ======", "====== KL divergence statistics ======",
                  "====== Token probability statistics ======"):
        check(block in r.stdout, f"{arch}: no '{block}' in the KLD output")
    m = re.search(r"Mean    KLD:\s+([0-9.eE+-]+)", r.stdout)
    check(m is not None, f"{arch}: no mean KLD in {r.stdout!r}")
    if m:
        got = float(m.group(1))
        print(f"{arch}: q8_0 vs f32 mean KLD ferry {got:.6f}, from llama.cpp's logits {kld.mean():.6f}")
        check(abs(got - kld.mean()) <= 0.01 * kld.mean() + 2e-6, f"{arch}: mean KLD {got} vs {kld.mean()}")
    m = re.search(r"Same top p:\s+([0-9.]+)", r.stdout)
    same = 100.0 * np.mean(lpq.argmax(-1) == lp32.argmax(-1))
    check(m is not None and abs(float(m.group(1)) - same) <= 100.0 / kld.size + 1e-3,
          f"{arch}: same top p {m.group(1) if m else None} vs {same:.3f}")

    # (3) bad input
    bad = scratch(f"ppl-{arch}-truncated.kld")
    with open(base, "rb") as f, open(bad, "wb") as g:
        g.write(f.read()[:-100])
    r = ferry("perplexity", "-m", q8, "--kl-divergence-base", bad, "--kl-divergence", check=False)
    check(r.returncode != 0 and "truncated" in r.stderr, f"{arch}: truncated base file: rc {r.returncode}, {r.stderr!r}")
    short = scratch("ppl-short.txt")
    with open(short, "w") as f:
        f.write("the ferry")
    out = scratch(f"ppl-{arch}-never.kld")
    r = ferry("perplexity", "-m", f32, "-f", short, "-c", C, "--kl-divergence-base", out, check=False)
    check(r.returncode != 0 and "at least" in r.stderr, f"{arch}: short text: rc {r.returncode}, {r.stderr!r}")
    check(not os.path.exists(out) and not os.path.exists(out + ".tmp"), f"{arch}: a failed run left {out}")


TRAINED = os.path.join(os.environ.get("FERRY_SOURCE_DIR", "."), "tests", "data", "trained")
for arch in ("qwen3moe", "qwen35moe"):
    run_pair(arch, *synthetic(arch))
    run_pair(f"kjv-{arch}", os.path.join(TRAINED, f"kjv-{arch}-f32.gguf"), os.path.join(TRAINED, f"kjv-{arch}-q8_0.gguf"),
             os.path.join(TRAINED, "heldout.txt"))

# (3) llama-perplexity's own file and figures
FIX = os.path.join(os.environ.get("FERRY_SOURCE_DIR", "."), "tests", "data", "perplexity")
r = ferry("perplexity", "-m", os.path.join(TRAINED, "kjv-qwen3moe-q8_0.gguf"), "--kl-divergence-base",
          os.path.join(FIX, "kjv-qwen3moe-f32-c64.kld"), "--kl-divergence", "-t", "2")
want = open(os.path.join(FIX, "kjv-qwen3moe-q8_0-kld.txt")).read()
NUM = re.compile(r"(?<![\w.])-?[0-9]+\.[0-9]+")
wl = [l for l in want.splitlines() if NUM.search(l)]
gl = [l for l in r.stdout.splitlines() if NUM.search(l) and ":" in l and not l.lstrip().startswith(("1 ", "2 ", "3 ", "4 "))]
gl = gl[-len(wl):]
check(len(gl) == len(wl), f"llama-perplexity file: {len(gl)} statistics lines vs the tool's {len(wl)}")
worst = 0.0
for w, g in zip(wl, gl):
    check(w.split(":")[0].strip() == g.split(":")[0].strip(), f"llama-perplexity file: line '{g}' vs '{w}'")
    for a, b in zip(NUM.findall(g), NUM.findall(w)):
        a, b = float(a), float(b)
        dev = abs(a - b) / max(abs(b), 1e-3)  # figures printed to 3-6 decimals: tiny ones by 1e-3
        worst = max(worst, dev)
        check(dev <= 0.01, f"llama-perplexity file: '{g.strip()}' vs the tool's '{w.strip()}'")
print(f"llama-perplexity's own base file: {len(wl)} statistics lines, largest relative difference {worst:.2e}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("ok")
