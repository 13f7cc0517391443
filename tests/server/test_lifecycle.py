"""Disconnects and shutdown: a client that goes away mid-stream stops its generation (the slot is
freed, far fewer tokens are generated than asked); SIGTERM lets a running stream finish to
[DONE], refuses new requests with 503 meanwhile, and exits 0; with --shutdown-grace 0 the running
stream is cancelled with a typed error event; SIGINT behaves as SIGTERM."""
import http.client
import json
import signal
import time

from serverlib import Server, check

LONG = {"prompt": "In the beginning", "max_tokens": 3000, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
        "seed": 5, "stream": True}


def open_stream(port, body=LONG):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    check(r.status == 200, f"stream status {r.status}")
    return c, r


def read_events(r, n=None):
    out = []
    while n is None or len(out) < n:
        line = r.readline().decode()
        if not line:
            break
        if line.startswith("data: "):
            out.append(line[6:].strip())
            if out[-1] == "[DONE]":
                break
    return out


def test_disconnect_cancels():
    with Server("-np", "1", "-c", "4096") as srv:
        # How far an uninterrupted run goes (3000 tokens unless it ends its text first).
        c, r = open_stream(srv.port)
        full = read_events(r)
        c.close()
        done = json.loads(full[-2])
        full_n = srv.request("GET", "/metrics.json")[1]["tokens_predicted_total"]
        check(full_n >= 1000, f"the uninterrupted run is too short to show a cancel: {full_n} tokens ({done})")
        c, r = open_stream(srv.port)
        read_events(r, 2)
        c.sock.shutdown(2)
        c.close()
        deadline = time.time() + 10
        while time.time() < deadline:
            m = srv.request("GET", "/metrics.json")[1]
            if m["requests_cancelled_total"] == 1 and m["requests_processing"] == 0:
                break
            time.sleep(0.02)
        check(m["requests_cancelled_total"] == 1 and m["requests_processing"] == 0, f"not cancelled: {m}")
        second = m["tokens_predicted_total"] - full_n
        check(second < full_n / 4, f"the disconnected request went on: {second} tokens of {full_n}")
        # The slot is free: a new request is answered.
        status, resp = srv.request("POST", "/v1/completions", {"prompt": "And", "max_tokens": 3})
        check(status == 200, f"after the cancel: {status} {resp}")


def test_disconnect_cancels_whole_reply():
    # A non-streamed reply writes nothing until its end: the server polls the client's socket.
    # Offloaded on the sim device (about a millisecond a token), 3000 tokens take seconds.
    import socket
    with Server("-np", "1", "-c", "4096", "-b", "64", "--device", "sim", "--vram", "5M") as srv:
        body = dict(LONG, stream=False)
        data = json.dumps(body).encode()
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                  + str(len(data)).encode() + b"\r\n\r\n" + data)
        deadline = time.time() + 10
        while time.time() < deadline and srv.request("GET", "/metrics.json")[1]["requests_processing"] == 0:
            time.sleep(0.01)
        t0 = time.time()
        s.close()
        while time.time() < deadline:
            m = srv.request("GET", "/metrics.json")[1]
            if m["requests_processing"] == 0:
                break
            time.sleep(0.02)
        freed = time.time() - t0
        check(m["requests_cancelled_total"] == 1 and m["requests_processing"] == 0, f"not cancelled: {m}")
        check(m["tokens_predicted_total"] < 1500, f"the abandoned reply went on: {m['tokens_predicted_total']} tokens")
        check(freed < 2.0, f"the slot was freed {freed:.2f} s after the client left")


def test_sigterm_finishes_running_stream():
    srv = Server("-np", "1", "-c", "4096", "--shutdown-grace", "30")
    c, r = open_stream(srv.port)
    read_events(r, 2)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    status, resp = srv.request("POST", "/v1/completions", {"prompt": "And", "max_tokens": 3})
    check(status in (503, 0), f"a new request during shutdown: {status} {resp}")
    if status == 503:
        check(resp["error"]["type"] == "unavailable_error", f"{resp}")
    rest = read_events(r)
    c.close()
    check(rest and rest[-1] == "[DONE]", f"the running stream did not finish: {rest[-2:]}")
    check(json.loads(rest[-2])["choices"][0]["finish_reason"] in ("stop", "length"), f"{rest[-2]}")
    check(srv.stop() == 0, "exit code after SIGTERM")


def test_grace_zero_cancels():
    for sig in (signal.SIGINT, signal.SIGTERM):
        srv = Server("-np", "1", "-c", "4096", "--shutdown-grace", "0", "--ping-interval", "100")
        c, r = open_stream(srv.port)
        read_events(r, 2)
        t0 = time.time()
        srv.proc.send_signal(sig)
        rest = read_events(r)
        c.close()
        rc = srv.proc.wait(30)
        check(rc == 0, f"exit code {rc} after {sig.name}")
        errors = [json.loads(e) for e in rest if e != "[DONE]" and "error" in json.loads(e)]
        # Cancelled (the reply is thousands of tokens from its end): one typed error event.
        check(len(errors) == 1, f"{sig.name}: the stream did not end with an error event: {rest[-2:]}")
        check(errors[0]["error"]["code"] == 503 and errors[0]["error"]["type"] == "unavailable_error", f"{errors[0]}")
        check(time.time() - t0 < 10, f"{sig.name}: stopping took {time.time() - t0:.1f} s")
        srv.reader.join(5)


def main():
    from serverlib import run_tests
    run_tests([test_disconnect_cancels, test_disconnect_cancels_whole_reply, test_sigterm_finishes_running_stream,
               test_grace_zero_cancels])


if __name__ == "__main__":
    main()
