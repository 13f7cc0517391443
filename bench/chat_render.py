#!/usr/bin/env python3
"""Time of one chat-template render: Ferry's interpreter (runtime/chat, through the test helper
build/tests/chat_render_tool --repeat) against jinja2 in transformers' environment, on one long
conversation (system + 20 rounds of user / assistant with <think> and a tool call / tool result,
tools given), for each template named.

  bench/chat_render.py [--tool build/tests/chat_render_tool] [--repeat 300] TEMPLATE.jinja...

Prints one markdown row per template: prompt bytes, Ferry us/render for the bare template and for
render_chat (request normalisation + the tools-ignored check, a second render), jinja2 us/render.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "chat"))
import test_template_parity as parity  # noqa: E402  (the oracle environment and the tools)


def conversation():
    msgs = [{"role": "system", "content": "You are helpful."}]
    for k in range(20):
        msgs.append({"role": "user", "content": f"question {k} " + "lorem ipsum " * 40})
        msgs.append({"role": "assistant", "content": f"<think>\nthinking {k}\n</think>\n\nanswer " + "dolor sit " * 60,
                     "tool_calls": [{"id": f"c{k:08d}", "type": "function",
                                     "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{k:08d}", "content": "sunny " * 20})
    msgs.append({"role": "user", "content": "last question"})
    return {"messages": msgs, "tools": parity.TOOLS, "add_generation_prompt": True}


def ferry_us(tool, case, repeat):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([case], f)
    r = subprocess.run([tool, f.name, "--repeat", str(repeat)], capture_output=True, text=True, check=True)
    os.unlink(f.name)
    out = json.loads(r.stdout)[0]
    if not out["ok"]:
        raise SystemExit(f"render failed: {out}")
    return len(out["text"].encode()), float(r.stderr.split(":")[-1].split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default="build/tests/chat_render_tool")
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("templates", nargs="+")
    a = ap.parse_args()
    req = conversation()
    env = parity.make_env()
    print("| template | prompt bytes | Ferry template us | Ferry render_chat us | jinja2 us |")
    print("|---|--:|--:|--:|--:|")
    for path in a.templates:
        ctx = dict(req, bos_token="", eos_token="")
        nbytes, t_tmpl = ferry_us(a.tool, {"template": path, "mode": "template", "context": ctx}, a.repeat)
        _, t_chat = ferry_us(a.tool, {"template": path, "mode": "chat", "request": req}, a.repeat)
        tmpl = env.from_string(open(path, encoding="utf-8").read())
        t0 = time.perf_counter()
        for _ in range(a.repeat):
            tmpl.render(**ctx)
        t_j = (time.perf_counter() - t0) / a.repeat * 1e6
        print(f"| {os.path.basename(path)} | {nbytes} | {t_tmpl:.0f} | {t_chat:.0f} | {t_j:.0f} |")


if __name__ == "__main__":
    main()
