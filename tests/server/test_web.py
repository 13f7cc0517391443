"""The built-in page in Debian's headless Chromium, driven over the DevTools protocol: served with
--device sim and a --vram below the model so the offload panel has counters. The page loads with
no console error and no request outside the server, a chat message streams into it, the panel
shows non-zero expert hits and misses, and the screenshot (kept under the build tree) is not
blank (pixel variance)."""
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

import websocket
from PIL import Image, ImageStat

from serverlib import Server, check

# Below the 2.7 MiB model: with -c 512 -b 64 the dense weights, state and workspace take 2.42 MiB,
# leaving 16 of the 64 experts a slot in "VRAM"; the rest are misses (CPU experts, copies).
VRAM = "2800K"


class Chromium:
    def __init__(self, scratch):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        check(exe is not None, "chromium is not installed (scripts/install-deps.sh installs it)")
        self.profile = tempfile.mkdtemp(prefix="ferry-chromium-", dir=scratch)
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             "--window-size=1200,800", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                url = m.group(1)
                break
        check(url is not None, "chromium did not start its DevTools endpoint")
        threading.Thread(target=lambda: self.proc.stderr.read(), daemon=True).start()
        port = int(re.search(r":(\d+)/", url).group(1))
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = [p for p in pages if p["type"] == "page"][0]
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def eval(self, js):
        r = self.call("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"evaluating {js!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def close(self):
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - best effort: the process is killed below
            pass
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def main():
    scratch = os.environ.get("FERRY_SCRATCH") or tempfile.mkdtemp()
    os.makedirs(scratch, exist_ok=True)
    with Server("--device", "sim", "--vram", VRAM, "-c", "512", "-b", "64", "-n", "24") as srv:
        status, m = srv.request("GET", "/metrics.json")
        check(status == 200 and m["offload"]["offloading"], f"the server is not offloading: {m}")
        br = Chromium(scratch)
        try:
            for domain in ("Runtime", "Log", "Network", "Page"):
                br.call(f"{domain}.enable")
            br.call("Page.navigate", url=srv.base + "/")
            deadline = time.time() + 30
            while time.time() < deadline and br.eval("document.readyState") != "complete":
                time.sleep(0.1)
            br.eval("document.getElementById('input').value = 'And God said'; "
                    "document.getElementById('send').click(); true")
            deadline = time.time() + 60
            reply = ""
            while time.time() < deadline:
                reply = br.eval("(document.querySelector('.msg.assistant') || {}).textContent || ''")
                errors = br.eval("document.querySelectorAll('.msg.error').length")
                if errors:
                    raise AssertionError("the page shows an error: " + br.eval("document.querySelector('.msg.error').textContent"))
                if reply and br.eval("history.length") == 2:
                    break
                time.sleep(0.2)
            check(len(reply) > 0, "no streamed reply in the page")
            time.sleep(1.5)  # one panel refresh after the reply
            hits = br.eval("Number((document.querySelector('td.expert-hits') || {}).textContent)")
            misses = br.eval("Number((document.querySelector('td.expert-misses') || {}).textContent)")
            check(hits > 0 and misses > 0, f"offload panel: hits {hits}, misses {misses}")
            shot = br.call("Page.captureScreenshot", format="png")["data"]
            import base64
            png = base64.b64decode(shot)
            path = os.path.join(scratch, "web_page.png")
            with open(path, "wb") as f:
                f.write(png)
            img = Image.open(io.BytesIO(png)).convert("L")
            var = ImageStat.Stat(img).var[0]
            check(var > 100, f"screenshot looks blank: pixel variance {var:.1f} ({path})")
            # What the browser did: every request to the server, no console error, no exception.
            br.call("Runtime.evaluate", expression="1")  # drain pending events
            urls = [e["params"]["request"]["url"] for e in br.events if e["method"] == "Network.requestWillBeSent"]
            check(urls and all(u.startswith(srv.base) or u.startswith("data:") for u in urls),
                  f"external requests: {[u for u in urls if not u.startswith(srv.base)]}")
            errs = [e for e in br.events if e["method"] == "Runtime.exceptionThrown" or
                    (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error") or
                    (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
            check(not errs, f"console errors: {errs[:3]}")
            print(f"reply {reply!r}; panel hits {hits} misses {misses}; screenshot {path} variance {var:.0f}; "
                  f"{len(urls)} requests, all to the server")
        finally:
            br.close()
    print("ok")


if __name__ == "__main__":
    main()
