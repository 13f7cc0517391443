"""Starts and stops `ferry serve` for the server tests (loopback only, any free port).

FERRY_BIN names the binary (the ASan pass points it at the sanitizer build); FERRY_SOURCE_DIR the
checkout (for the trained reference model).
"""
import atexit
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

SOURCE_DIR = os.environ.get("FERRY_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
MODEL = os.path.join(SOURCE_DIR, "tests", "data", "trained", "kjv-qwen35moe-q8_0.gguf")


def ferry_bin():
    b = os.environ.get("FERRY_BIN")
    if not b or not os.access(b, os.X_OK):
        sys.exit(f"FERRY_BIN must name the ferry binary (got {b!r})")
    return b


_started = []


@atexit.register
def _kill_leftovers():
    """A failed test must not leave a server behind."""
    for s in _started:
        s.kill()


class Server:
    """ferry serve on 127.0.0.1 and a free port; stderr kept for the assertions."""

    def __init__(self, *args, model=MODEL, timeout=60, env=None):
        self.args = ["serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", "1", *args]
        self.proc = subprocess.Popen([ferry_bin(), *self.args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=env)
        _started.append(self)
        self.lines = []
        self.port = None
        got_port = threading.Event()

        def reader():
            for line in self.proc.stderr:
                self.lines.append(line)
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    got_port.set()
            got_port.set()

        self.reader = threading.Thread(target=reader, daemon=True)
        self.reader.start()
        if not got_port.wait(timeout) or self.port is None:
            self.kill()
            raise RuntimeError("ferry serve did not start:\n" + "".join(self.lines))
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _ = self.request("GET", "/health")
            if status == 200:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise RuntimeError("ferry serve did not become healthy:\n" + "".join(self.lines))

    def request(self, method, path, body=None, headers=None, raw=None, timeout=60):
        """(status, parsed JSON or text); never raises for an HTTP status."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                text = r.read().decode("utf-8")
                status = r.status
                ctype = r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            status = e.code
            ctype = e.headers.get("Content-Type", "")
        except (urllib.error.URLError, ConnectionError):
            return 0, None
        if "json" in ctype:
            return status, json.loads(text)
        return status, text

    def stop(self, timeout=30):
        """SIGTERM; returns the exit code (the server must exit 0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("ferry serve did not stop within %d s after SIGTERM" % timeout)
        self.reader.join(5)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            rc = self.stop()
            if rc != 0:
                raise AssertionError(f"ferry serve exited {rc}:\n" + "".join(self.lines[-30:]))
        else:
            self.kill()


def sse_events(resp_lines):
    """data: payloads of an SSE stream (comments skipped), as parsed JSON or the string [DONE]."""
    out = []
    for line in resp_lines:
        if line.startswith("data: "):
            d = line[6:].strip()
            out.append(d if d == "[DONE]" else json.loads(d))
    return out


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run_tests(tests):
    """Runs test functions in order, prints each result, exits 1 if any failed."""
    failed = 0
    for t in tests:
        t0 = time.time()
        try:
            t()
            print(f"ok   {t.__name__} ({time.time() - t0:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, the rest still run
            failed += 1
            print(f"FAIL {t.__name__}: {type(e).__name__}: {e}", flush=True)
    if failed:
        sys.exit(1)


@contextlib.contextmanager
def stopped_cleanly(srv):
    """Stops `srv` when the block ends; when the block passed, a SIGTERM exit other than 0 fails."""
    try:
        yield srv
    finally:
        rc = srv.stop()
    if rc != 0:
        raise SystemExit(f"ferry serve exited {rc} after SIGTERM")
