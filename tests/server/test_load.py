"""Load: 32 concurrent clients x 8 requests against -np 4 --queue 16, mixed streaming,
non-streaming and early disconnects, distinct prompts, greedy. Every request is answered or
refused with a typed 503, none is lost, none crossed (each answer equals that prompt's answer
from a single client), /health is ok after, and the RSS after a second identical round is within
5% of the first round's. FERRY_BIN may name a sanitizer build (the ASan pass runs this too;
FERRY_LOAD_SKIP_RSS=1 there, where the RSS of the shadow memory means nothing)."""
import http.client
import json
import os
import threading
import time

from serverlib import Server, check, sse_events

CLIENTS, PER_CLIENT, MAX_TOKENS = 32, 8, 10
WORDS = ["light", "water", "land", "king", "house", "fire", "lord", "city", "bread", "son", "earth", "heaven",
         "mountain", "river", "gold", "stone"]


def prompt(i):
    return f"{WORDS[i % 16]} of the {WORDS[(i // 16) % 16]} and the {WORDS[(i * 7 + 3) % 16]}"


def body(i, stream):
    return {"messages": [{"role": "user", "content": prompt(i)}], "max_tokens": MAX_TOKENS, "temperature": 0,
            "stream": stream}


def post(port, b, disconnect_after=None, timeout=300):
    """(status, text or error body); a stream is read to [DONE] unless disconnect_after events."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(b), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return r.status, json.loads(r.read())
        if not b["stream"]:
            return 200, json.loads(r.read())["choices"][0]["message"]["content"]
        lines, events = [], 0
        while True:
            line = r.readline().decode("utf-8")
            if not line:
                break
            lines.append(line)
            if line.startswith("data: "):
                events += 1
                if disconnect_after is not None and events >= disconnect_after:
                    return "disconnected", None
                if line.strip() == "data: [DONE]":
                    break
        ev = sse_events(lines)
        check(ev[-1] == "[DONE]", f"stream without [DONE]: {ev[-3:]}")
        for e in ev[:-1]:
            if "error" in e:
                return 500, e
        return 200, "".join((e["choices"][0]["delta"].get("content") or "") for e in ev[:-1] if e["choices"])
    finally:
        conn.close()


def round_of_load(port, reference):
    results = [[None] * PER_CLIENT for _ in range(CLIENTS)]

    def client(c):
        for k in range(PER_CLIENT):
            i = c * PER_CLIENT + k
            kind = (c + k) % 4  # 0, 1: plain; 2: stream; 3: stream, disconnect after 2 events
            try:
                results[c][k] = (kind, i, post(port, body(i, kind >= 2), disconnect_after=2 if kind == 3 else None))
            except Exception as e:  # noqa: BLE001 - recorded as lost
                results[c][k] = (kind, i, ("exception", repr(e)))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    answered = refused = dropped = 0
    for row in results:
        for kind, i, (status, payload) in row:
            if status == 200:
                answered += 1
                check(payload == reference[i], f"request {i} crossed or changed: {payload!r} != {reference[i]!r}")
            elif status == 503:
                refused += 1
                check(payload["error"]["type"] == "unavailable_error", f"untyped refusal {payload}")
            elif status == "disconnected":
                dropped += 1
            else:
                raise AssertionError(f"request {i} (kind {kind}) lost: {status} {payload}")
    check(answered + refused + dropped == CLIENTS * PER_CLIENT, "a request is missing")
    check(answered >= CLIENTS, f"too few answered: {answered}")
    return answered, refused, dropped


def main():
    with Server("-np", "4", "--queue", "16", "-c", "2048", "--metrics", "--ping-interval", "200") as srv:
        # The single-client answers (one at a time, plain).
        reference = {}
        for i in range(CLIENTS * PER_CLIENT):
            status, text = post(srv.port, body(i, False))
            check(status == 200, f"reference {i}: {status} {text}")
            reference[i] = text
        check(len(set(reference.values())) > 8, "the prompts should give different answers")
        a1 = round_of_load(srv.port, reference)
        rss1 = srv.rss_bytes()
        a2 = round_of_load(srv.port, reference)
        rss2 = srv.rss_bytes()
        print(f"round 1: answered {a1[0]}, refused {a1[1]}, disconnected {a1[2]}; RSS {rss1 / 2**20:.1f} MiB")
        print(f"round 2: answered {a2[0]}, refused {a2[1]}, disconnected {a2[2]}; RSS {rss2 / 2**20:.1f} MiB")
        if os.environ.get("FERRY_LOAD_SKIP_RSS") != "1":
            check(rss2 <= rss1 * 1.05, f"RSS grew from {rss1} to {rss2} bytes over an identical round")
        status, h = srv.request("GET", "/health")
        check(status == 200 and h == {"status": "ok"}, f"/health after load: {status} {h}")
        # Every slot is free again and nothing waits (a disconnected stream's job ends at its next
        # failed write: give it a moment).
        deadline = time.time() + 10
        while True:
            status, m = srv.request("GET", "/metrics.json")
            if (m["requests_processing"] == 0 and m["requests_deferred"] == 0) or time.time() > deadline:
                break
            time.sleep(0.05)
        check(m["requests_processing"] == 0 and m["requests_deferred"] == 0, f"slots not freed: {m}")
        status, slots = srv.request("GET", "/slots")
        check(len(slots) == 4 and not any(s["is_processing"] for s in slots), f"/slots {slots}")
        status, text = srv.request("GET", "/metrics")
        check(status == 200 and "llamacpp:requests_processing 0" in text, "metrics after load")
    print("ok")


if __name__ == "__main__":
    main()
