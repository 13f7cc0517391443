#!/usr/bin/env python3
"""Prompt reuse across turns in `ferry serve`: time to first token of turns 2..N of a chat (the
Qwen3.5 template, thinking on, rendered by the jinja2 oracle of tests/chat) with reuse (the
default) and without (`cache_prompt: false`, the same prompt evaluated from a reset slot), with
cached_tokens and the checkpoint memory /slots reports. Needs the project venv (jinja2).

usage: prompt_reuse_bench.py FERRY MODEL [MODEL ...] [--turns 6] [--repeat 3] [--system-words 600]
                             [--max-tokens 16] [--ctx 8192] [--extra "--checkpoint-min-step 64"]

Per model: `repeat` fresh servers (-np 2: the no-reuse request of a turn goes to the other slot,
the least recently used, and leaves the reusing one alone). Each turn sends the prompt with reuse,
then without, both streamed through /completion; TTFT = time to the first streamed chunk as the
client sees it, prompt ms = the engine's timings.prompt_ms. Medians over the repeats. Prints one
Markdown table per model.
"""
import argparse
import http.client
import json
import os
import shlex
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "chat"))
import test_template_parity as parity  # noqa: E402  (the oracle environment)
from serve_bench import start  # noqa: E402  (this folder: a `ferry serve` on a free port)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TEMPLATE = open(os.path.join(ROOT, "tests", "data", "templates", "Qwen3.5-4B.jinja")).read()
WORDS = ("and the lord spake unto moses saying speak unto the children of israel that they go forward "
         "into the land which i gave unto their fathers").split()
QUESTIONS = ["Who went with Naomi?", "And where did they go?", "Whom did Ruth marry?", "Who was their son?",
             "What was the name of his son?", "And who was the king after him?", "Who wrote the book?",
             "What does Ruth mean?"]


def completion(port, prompt, max_tokens, cache_prompt):
    """(ttft_ms, content, last chunk) of one streamed greedy /completion."""
    body = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "stream": True, "cache_prompt": cache_prompt}
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"/completion failed: {r.status} {r.read()[:300]}")
    ttft, content, last = None, "", None
    for raw in r:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: "):
            continue
        if ttft is None:
            ttft = (time.perf_counter() - t0) * 1e3
        last = json.loads(line[6:])
        content += last.get("content", "")
    c.close()
    return ttft, content, last


def slots_checkpoints(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/slots")
    slots = json.loads(c.getresponse().read())
    return sum(s["n_ctx_checkpoints"] for s in slots), sum(s["ctx_checkpoints_bytes"] for s in slots)


def run_chat(ferry, model, a):
    """Per turn: dict of the measurements of one fresh server."""
    p, port = start(ferry, model, 2, a.ctx, shlex.split(a.extra))
    try:
        system = "Answer from the book of Ruth. " + " ".join(WORDS[i % len(WORDS)] for i in range(a.system_words))
        messages = [{"role": "system", "content": system}]
        env = parity.make_env()
        rows = []
        for turn in range(1, a.turns + 1):
            messages.append({"role": "user", "content": QUESTIONS[(turn - 1) % len(QUESTIONS)]})
            prompt = env.from_string(TEMPLATE).render(messages=messages, add_generation_prompt=True,
                                                      enable_thinking=True, bos_token="", eos_token="")
            ttft, content, last = completion(port, prompt, a.max_tokens, True)
            ttft_no, content_no, last_no = completion(port, prompt, a.max_tokens, False)
            n_ck, ck_bytes = slots_checkpoints(port)
            t, t_no = last["timings"], last_no["timings"]
            rows.append({"turn": turn, "prompt": t["prompt_n"] + t["cache_n"], "cached": t["cache_n"],
                         "ttft": ttft, "ttft_no": ttft_no, "prompt_ms": t["prompt_ms"],
                         "prompt_ms_no": t_no["prompt_ms"], "same": content == content_no,
                         "checkpoints": n_ck, "ck_mib": ck_bytes / 2**20})
            messages.append({"role": "assistant", "content": f"<think>\n{content}\n</think>\n\nThe answer {turn}."})
        return rows
    finally:
        p.terminate()
        p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--system-words", type=int, default=600)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--extra", default="")
    a = ap.parse_args()
    for model in a.models:
        runs = [run_chat(a.ferry, model, a) for _ in range(a.repeat)]
        med = lambda key, i: statistics.median(r[i][key] for r in runs)  # noqa: E731
        print(f"\nmodel `{os.path.relpath(model, ROOT) if model.startswith(ROOT) else model}`, {a.repeat} runs, "
              f"system prompt of {a.system_words} words, {a.max_tokens} tokens per reply, -np 2 -c {a.ctx} {a.extra}\n")
        print("| turn | prompt tokens | cached_tokens | TTFT reuse ms | TTFT no reuse ms | ratio | prompt ms reuse "
              "| prompt ms no reuse | same reply | checkpoints | checkpoint MiB |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|:-:|---:|---:|")
        for i in range(1, a.turns):  # turns 2..N
            r0 = runs[0][i]
            ttft, ttft_no = med("ttft", i), med("ttft_no", i)
            same = all(r[i]["same"] for r in runs)
            print(f"| {r0['turn']} | {r0['prompt']} | {med('cached', i):.0f} | {ttft:.1f} | {ttft_no:.1f} | "
                  f"{ttft_no / ttft:.2f}x | {med('prompt_ms', i):.1f} | {med('prompt_ms_no', i):.1f} | "
                  f"{'yes' if same else 'NO'} | {med('checkpoints', i):.0f} | {med('ck_mib', i):.3f} |")


if __name__ == "__main__":
    main()
