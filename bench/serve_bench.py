#!/usr/bin/env python3
"""`ferry serve` throughput: requests/s, generated tokens/s and time to first token at -np 1, 2, 4
with 1, 2, 4, 8 concurrent streaming clients; optionally under --device sim --vram (the offload
counters of /metrics.json are reported per run). Stdlib only; loopback.

usage: serve_bench.py FERRY MODEL [--requests N] [--max-tokens N] [--slots 1,2,4] [--clients 1,2,4,8]
                      [--extra "--device sim --vram 2800K -b 64"] [--ctx C]

Prints one Markdown table: slots, clients, requests/s, tokens/s, TTFT median / p90 (ms), and with
offload the hit rate and H2D bytes per token over the run.
"""
import argparse
import http.client
import json
import re
import shlex
import signal
import statistics
import subprocess
import threading
import time

PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "Blessed are the meek", "And it came to pass",
           "Thus saith the LORD", "Behold, I send", "Now the serpent was"]


def start(ferry, model, slots, ctx, extra):
    cmd = [ferry, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-np", str(slots), "-c", str(ctx),
           "--queue", "64", *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    for line in p.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready:" in line:
            break
    if port is None:
        raise SystemExit(f"ferry serve did not start: {' '.join(cmd)}")
    threading.Thread(target=lambda: p.stderr.read(), daemon=True).start()
    return p, port


def get_json(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path)
    return json.loads(c.getresponse().read())


def one_request(port, i, max_tokens):
    """(ttft_s, total_s, completion_tokens) of one streamed chat request."""
    body = {"messages": [{"role": "user", "content": f"{PROMPTS[i % len(PROMPTS)]} ({i})"}], "max_tokens": max_tokens,
            "temperature": 0.8, "seed": i, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"request failed: {r.status} {r.read()[:200]}")
    ttft, tokens = None, 0
    while True:
        line = r.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        d = line[6:].strip()
        if d == b"[DONE]":
            break
        j = json.loads(d)
        if j.get("usage"):
            tokens = j["usage"]["completion_tokens"]
        elif ttft is None and j["choices"] and j["choices"][0].get("delta", {}).get("content"):
            ttft = time.perf_counter() - t0
    c.close()
    return ttft if ttft is not None else time.perf_counter() - t0, time.perf_counter() - t0, tokens


def run(port, clients, requests, max_tokens):
    results = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def worker():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            r = one_request(port, i, max_tokens)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    ttfts = sorted(r[0] * 1e3 for r in results)
    tokens = sum(r[2] for r in results)
    return {"rps": len(results) / wall, "tps": tokens / wall, "ttft_med": statistics.median(ttfts),
            "ttft_p90": ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))], "tokens": tokens}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry")
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--slots", default="1,2,4")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--extra", default="")
    a = ap.parse_args()
    extra = shlex.split(a.extra)
    print(f"model `{a.model}`, {a.requests} streamed requests of max_tokens {a.max_tokens} per row, -c {a.ctx} {a.extra}\n")
    print("| -np | clients | requests/s | tokens/s | TTFT median ms | TTFT p90 ms | offload hit rate | H2D/token |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for slots in [int(x) for x in a.slots.split(",")]:
        p, port = start(a.ferry, a.model, slots, a.ctx, extra)
        try:
            one_request(port, 0, 4)  # warm-up
            for clients in [int(x) for x in a.clients.split(",")]:
                before = get_json(port, "/metrics.json")["offload"]
                r = run(port, clients, a.requests, a.max_tokens)
                after = get_json(port, "/metrics.json")["offload"]
                hit = h2d = "–"
                if after.get("counted"):
                    dh, dm = after["hits"] - before["hits"], after["misses"] - before["misses"]
                    dt = after["tokens"] - before["tokens"]
                    hit = f"{100 * dh / max(1, dh + dm):.1f} %"
                    h2d = f"{(after['h2d_bytes'] - before['h2d_bytes']) / max(1, dt) / 1024:.1f} KiB"
                print(f"| {slots} | {clients} | {r['rps']:.2f} | {r['tps']:.1f} | {r['ttft_med']:.1f} | {r['ttft_p90']:.1f} "
                      f"| {hit} | {h2d} |", flush=True)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(60)


if __name__ == "__main__":
    main()
