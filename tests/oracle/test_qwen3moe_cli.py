#!/usr/bin/env python3
"""`ferry run`, `ferry chat` and `ferry logits` as a user meets them (no llama.cpp needed; lives with
the oracle tests for the shared Python harness):
  run: streams text and prints llama.cpp-style timings; -n beyond the context is clipped with a
       warning; a prompt longer than the context, an unsupported architecture, a GGUF without a
       tokenizer and a bad -ctk are clear one-line errors with a non-zero exit; without -m a
       synthetic model is made once in the cache directory and reused.
  chat: driven through a pipe: replies per line, the KV cache is kept between turns (the second
       turn evaluates only its new tokens), /reset starts over, EOF exits 0; SIGINT stops the
       current reply without ending the session.
  logits: -p TEXT works like --tokens of its tokenization; the .npy has the documented shape.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError as e:
    print(f"SKIPPED: numpy unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FERRY, ferry, scratch  # noqa: E402

failures = []


def check(cond, msg, detail=""):
    print(("ok:   " if cond else "FAIL: ") + msg)
    if not cond:
        if detail:
            print("      " + detail.replace("\n", "\n      "))
        failures.append(msg)


def run(*args, **kw):
    return ferry(*args, check=False, errors="replace", **kw)


def main():
    model = scratch("qwen3moe-cli-f32.gguf")
    ferry("synth", "--arch", "qwen3moe", "--preset", "tiny", "--quant", "q8_0", "--seed", "4", "-q", "-t", "2",
          "-o", model)

    r = run("run", "-m", model, "-p", "The ferry", "-n", "16", "-t", "2", "-s", "1")
    check(r.returncode == 0 and r.stdout.startswith("The ferry"), "run: exit 0, prompt echoed", r.stderr[-800:])
    check(re.search(r"prompt eval time = .* / +\d+ tokens", r.stderr) is not None
          and re.search(r"eval time = .* / +15 runs", r.stderr) is not None, "run: llama.cpp-style timings (15 decode runs)",
          r.stderr[-800:])
    r2 = run("run", "-m", model, "-p", "The ferry", "-n", "16", "-t", "2", "-s", "1")
    check(r2.stdout == r.stdout, "run: same seed, same text")

    r = run("run", "-m", model, "-p", "a b c d e", "-n", "100", "-c", "24", "-t", "2", "--temp", "0", "--print-ids",
            "--no-display-prompt")
    ids = re.search(r"generated ids: ([0-9,]*)", r.stderr)
    n_gen = len(ids.group(1).split(",")) if ids and ids.group(1) else 0
    check(r.returncode == 0 and "does not fit in the context" in r.stderr, "run: -n beyond the context warns", r.stderr[-600:])
    check(0 < n_gen <= 24 - 5, f"run: at most ctx - prompt tokens generated ({n_gen})")

    r = run("run", "-m", model, "-p", "word " * 40, "-c", "16", "-t", "2")
    check(r.returncode != 0 and "prompt is too long" in r.stderr and "Traceback" not in r.stderr,
          "run: prompt longer than the context is an error", r.stderr[-400:])

    bad_arch = scratch("qwen3moe-cli-llama-arch.gguf")
    ferry("gguf-copy", model, bad_arch, "--set", "general.architecture=str:llama")
    r = run("run", "-m", bad_arch, "-p", "hi")
    check(r.returncode == 1 and "architecture 'llama'" in r.stderr and "not supported" in r.stderr,
          "run: unsupported architecture is a clear error", r.stderr[-400:])

    no_tok = scratch("qwen3moe-cli-no-tokenizer.gguf")
    ferry("gguf-copy", model, no_tok, "--drop", "tokenizer.ggml.model")
    r = run("run", "-m", no_tok, "-p", "hi")
    check(r.returncode == 1 and "tokenizer" in r.stderr, "run: GGUF without a tokenizer is a clear error", r.stderr[-400:])
    out = scratch("qwen3moe-cli-notok.npy")
    r = run("logits", "-m", no_tok, "--tokens", "1,2,3", "-o", out)
    check(r.returncode == 0 and np.load(out).shape == (3, 768), "logits: --tokens needs no tokenizer")

    r = run("run", "-m", model, "-p", "hi", "-ctk", "q4_k")
    check(r.returncode == 1 and "-ctk q4_k" in r.stderr and "q8_0" in r.stderr, "run: unsupported -ctk is a clear error", r.stderr[-300:])
    r = run("run", "-m", scratch("does-not-exist.gguf"), "-p", "hi")
    check(r.returncode == 1 and "does-not-exist.gguf" in r.stderr, "run: missing file names the path", r.stderr[-300:])

    # Without -m: a synthetic model in $XDG_CACHE_HOME/ferry, made once.
    cache = scratch("xdg-cache")
    shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    r = run("run", "-n", "4", "-t", "2", env=env)
    r2 = run("run", "-n", "4", "-t", "2", env=env)
    check(r.returncode == 0 and "writing a synthetic" in r.stderr and r2.returncode == 0
          and "using the built-in synthetic model" in r2.stderr and os.path.isdir(os.path.join(cache, "ferry")),
          "run without -m: synthetic model written once, then reused", (r.stderr + r2.stderr)[-800:])

    # logits -p == logits --tokens of the same tokenization
    tok = ferry("tokenize", "-m", model, "-p", "The ferry leaves", "--ids").stdout.strip()
    ids = [int(x) for x in re.findall(r"\d+", tok)]
    a, b = scratch("qwen3moe-cli-p.npy"), scratch("qwen3moe-cli-t.npy")
    ferry("logits", "-m", model, "-p", "The ferry leaves", "-o", a, "-t", "2")
    ferry("logits", "-m", model, "--tokens", ",".join(map(str, ids)), "-o", b, "-t", "2")
    la, lb = np.load(a), np.load(b)
    check(la.shape == (len(ids), 768) and np.array_equal(la, lb), f"logits: -p equals --tokens ({len(ids)} tokens)")

    # chat through a pipe: three turns with a reset; --timings shows what each turn evaluated.
    r = subprocess.run([FERRY, "chat", "-m", model, "-t", "2", "-s", "2", "-n", "8", "--timings"],
                       input="Hello there\nWhat is a ferry?\n/reset\nHello there\n", capture_output=True,
                       text=True, errors="replace", timeout=120)
    turns = re.findall(r"prompt (\d+) tokens in .* (\d+) in context", r.stderr)
    check(r.returncode == 0 and len(turns) == 3, "chat: three replies, exit 0 on EOF", r.stderr[-800:])
    if len(turns) == 3:
        (p1, c1), (p2, c2), (p3, c3) = [(int(a), int(b)) for a, b in turns]
        check(c2 > c1 and p2 < c2 - c1 + 1 and p2 < c2, f"chat: turn 2 evaluates only its new tokens ({p2} of {c2})")
        check(p3 == p1 and c3 == c1, f"chat: /reset starts over (turn 3 = turn 1: {p3}/{c3} vs {p1}/{c1})")
        replies = [l for l in r.stdout.split("\n") if l]
        check(len(replies) >= 2, "chat: replies on stdout")
    r = subprocess.run([FERRY, "chat", "-m", model, "-t", "2", "-s", "2", "-n", "8", "--temp", "0"],
                       input="/quit\nnever read\n", capture_output=True, text=True, errors="replace", timeout=60)
    check(r.returncode == 0 and r.stdout.strip() == "", "chat: /quit exits before reading further input")

    # SIGINT stops a long reply and the session goes on to the next line.
    p = subprocess.Popen([FERRY, "chat", "-m", model, "-t", "2", "-n", "-1", "-c", "4096", "--temp", "0"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         errors="replace")
    p.stdin.write("Tell me a very long story\n")
    p.stdin.flush()
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    try:
        out, err = p.communicate("Hi again\n", timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    check(p.returncode == 0 and "reply stopped" in err, "chat: SIGINT stops the reply, the session continues",
          err[-600:])
    check(len([l for l in out.split("\n") if l]) >= 2, "chat: a reply after the interrupted one")

    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all CLI checks passed")


if __name__ == "__main__":
    main()
