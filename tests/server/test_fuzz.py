"""Hostile input: at least 2,000 generated malformed or odd requests (a seeded generator of our
own: random bytes, truncated and mutated JSON, wrong types in every field, deep nesting, odd
paths, methods and headers) against a server with a small context and -n. No crash, no hang
(each answered within its timeout), every refusal typed in the error envelope; the server is
healthy after and exits 0 on SIGTERM. Deterministic (fixed seed), under 3 minutes."""
import http.client
import json
import random
import socket
import threading
import time

from serverlib import Server, check

N_REQUESTS = 2400
N_THREADS = 8
TIMEOUT_S = 30
READ_TIMEOUT_S = 3  # the server's -to
ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize", "/apply-template", "/chat/completions",
             "/completion"]
FIELDS = ["messages", "prompt", "temperature", "top_p", "top_k", "min_p", "seed", "max_tokens", "max_completion_tokens",
          "stop", "stream", "stream_options", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
          "repeat_penalty", "repeat_last_n", "n", "model", "content", "tokens", "add_special", "with_pieces", "n_predict",
          "logit_bias", "n_probs", "tools", "response_format"]
TYPES = {"invalid_request_error", "exceed_context_size_error", "not_found_error", "unavailable_error", "authentication_error",
         "not_supported_error"}


def rand_value(rng, depth=0):
    k = rng.randrange(12 if depth < 3 else 8)
    if k == 0:
        return None
    if k == 1:
        return rng.choice([True, False])
    if k == 2:
        return rng.choice([0, -1, 1, 2, 7, 2 ** 31, -2 ** 31, 2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1, 10 ** 30])
    if k == 3:
        return rng.choice([0.0, -0.5, 0.5, 1e308, -1e308, 1e-308, 3.5, 2.0000001])
    if k == 4:
        return rng.choice(["", "a", "<|im_end|>", "<|im_start|>assistant\n", "\u2028", "ü" * 50, "\x00", "x" * 3000, "𝄞"])
    if k == 5:
        return "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(20)))
    if k == 6:
        return rng.randrange(-5, 3000)
    if k == 7:
        return rng.choice(["user", "system", "assistant", "developer", "tool", "text", "image_url"])
    if k in (8, 9):
        return [rand_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {rng.choice(FIELDS + ["role", "content", "type", "text", "include_usage"]): rand_value(rng, depth + 1)
            for _ in range(rng.randrange(5))}


def valid_body(rng, ep):
    if ep in ("/v1/chat/completions", "/chat/completions", "/apply-template"):
        b = {"messages": [{"role": rng.choice(["user", "system", "developer"]), "content": "and the light"}]}
    elif ep in ("/v1/completions", "/completion"):
        b = {"prompt": rng.choice(["In the beginning", [1, 2, 3]])}
    elif ep == "/tokenize":
        b = {"content": "and God said"}
    else:
        b = {"tokens": [1, 2, 3]}
    b["max_tokens"] = rng.randrange(1, 6)
    if rng.random() < 0.3:
        b["stream"] = True
    return b


def make_request(rng):
    """(method, path, headers, body bytes)."""
    ep = rng.choice(ENDPOINTS)
    kind = rng.randrange(10)
    headers = {"Content-Type": "application/json"}
    if kind == 0:  # random bytes
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
    elif kind == 1:  # truncated valid JSON
        s = json.dumps(valid_body(rng, ep)).encode()
        body = s[: rng.randrange(len(s))]
    elif kind in (2, 3, 4):  # one field of a valid body replaced by a random value
        b = valid_body(rng, ep)
        b[rng.choice(FIELDS)] = rand_value(rng)
        body = json.dumps(b).encode()
    elif kind == 5:  # random JSON structure
        body = json.dumps(rand_value(rng)).encode()
    elif kind == 6:  # messages with random members
        b = valid_body(rng, ep)
        b["messages"] = [rand_value(rng) if rng.random() < 0.3 else {"role": rand_value(rng), "content": rand_value(rng)}
                         for _ in range(rng.randrange(4))]
        body = json.dumps(b).encode()
    elif kind == 7:  # deep nesting
        d = rng.choice([100, 1000, 20000])
        body = (b'{"messages":' + b"[" * d + b"]" * d + b"}") if rng.random() < 0.5 else b"[" * d
    elif kind == 8:  # byte flips in a valid body
        s = bytearray(json.dumps(valid_body(rng, ep)).encode())
        for _ in range(rng.randrange(1, 4)):
            s[rng.randrange(len(s))] = rng.randrange(256)
        body = bytes(s)
    else:  # a valid request (the engine runs it) with odd sampling
        b = valid_body(rng, ep)
        b.update({"temperature": rng.choice([0, 0.7, 2.0]), "top_k": rng.choice([0, 1, 5]), "seed": rng.randrange(100),
                  "stop": rng.choice([[], ["the"], ["\n", "and"]]), "logprobs": True, "top_logprobs": rng.randrange(3)})
        body = json.dumps(b).encode()
    method = "POST"
    path = ep
    r = rng.random()
    if r < 0.04:
        method = rng.choice(["GET", "PUT", "DELETE", "PATCH"])
    elif r < 0.07:
        path = rng.choice(["/", "/v1", "/../etc/passwd", "/v1/chat/completions/", "/%00", "/slots?x=1", "/metrics.json",
                           "/props", "/v1/models", "/health"])
        method = "GET"
    elif r < 0.09:
        headers["Content-Type"] = rng.choice(["text/plain", "application/x-www-form-urlencoded", ""])
    return method, path, headers, body


def send(port, req):
    method, path, headers, body = req
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        conn.request(method, path, body=body if method in ("POST", "PUT", "PATCH") else None, headers=headers)
        r = conn.getresponse()
        data = r.read()
        return r.status, r.headers.get("Content-Type", ""), data
    finally:
        conn.close()


RAW = [b"GARBAGE\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
       b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n{",
       b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{",  # never completed: -to ends it
       b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\n\r\n", b"\x00\x01\x02\r\n\r\n", b"GET / HTTP/1.1\r\n"]


def raw_garbage(port, data):
    """Broken HTTP itself: the server answers or closes the connection (at the latest after its
    read timeout -to), never hangs or dies."""
    s = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S + 10)
    try:
        s.sendall(data)
        try:
            s.recv(4096)  # an answer, or b"" when the server closed
        except socket.timeout:
            raise AssertionError(f"no answer and no close for {data[:60]!r} within -to + 10 s")
    finally:
        s.close()


def try_raw(port, data):
    try:
        raw_garbage(port, data)
        return True
    except (AssertionError, OSError) as e:
        print(f"raw request {data[:60]!r}: {e}")
        return False


def main():
    t0 = time.time()
    with Server("-c", "128", "-n", "4", "-np", "2", "--queue", "32", "--max-body", "262144", "--metrics",
                "-to", str(READ_TIMEOUT_S)) as srv:
        rng = random.Random(2026)
        reqs = [make_request(rng) for _ in range(N_REQUESTS)]
        results = [None] * len(reqs)
        errors = []

        def worker(w):
            for i in range(w, len(reqs), N_THREADS):
                try:
                    results[i] = send(srv.port, reqs[i])
                except Exception as e:  # noqa: BLE001
                    errors.append((i, reqs[i][:2], repr(e)))

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(N_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not errors, f"{len(errors)} requests got no answer, e.g. {errors[:3]}")
        statuses = {}
        for i, (status, ctype, data) in enumerate(results):
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200:
                continue
            check(status in (400, 404, 413, 501, 503), f"request {i} {reqs[i][:2]}: status {status}: {data[:200]!r}")
            check("json" in ctype, f"request {i}: untyped refusal ({ctype}): {data[:200]!r}")
            e = json.loads(data)["error"]
            check(e["code"] == status and e["type"] in TYPES and e["message"], f"request {i}: envelope {e}")
        raw_threads = [threading.Thread(target=lambda d=d: errors.append(("raw", d)) if not try_raw(srv.port, d) else None)
                       for d in RAW]
        for t in raw_threads:
            t.start()
        for t in raw_threads:
            t.join()
        check(not errors, f"broken HTTP: {errors}")
        status, h = srv.request("GET", "/health")
        check(status == 200 and h == {"status": "ok"}, f"/health after the fuzz: {status} {h}")
        check(srv.proc.poll() is None, "the server died")
        print(f"{len(reqs)} requests in {time.time() - t0:.1f} s: statuses {dict(sorted(statuses.items()))}")
        check(statuses.get(200, 0) > 100 and statuses.get(400, 0) > 1000, "the generator should hit both paths")
    check(time.time() - t0 < 180, f"took {time.time() - t0:.0f} s (limit 180)")
    print("ok")


if __name__ == "__main__":
    main()
