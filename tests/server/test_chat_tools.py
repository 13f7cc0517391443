"""`ferry serve` with a real chat template, reasoning and tool calls, through the openai client.

The model is a tiny synthetic qwen35moe (`ferry synth`, whose vocabulary has Qwen's <think>,
</think>, <tool_call>, </tool_call>, <|im_start|>, <|im_end|> specials) with the committed Qwen3.5
template injected by `ferry gguf-copy --set tokenizer.chat_template=...` (`ferry chat` is given it
with `--chat-template-file`). Its random weights say nothing, so each reply is scripted
with the test-only forcing sampler (FERRY_TEST_FORCE_TOKENS names a file the server reads at each
request: the reply is that text's tokens, then <|im_end|>). The script is the test's input; what is
checked is the server's work on it: reasoning split into reasoning_content, tool calls parsed
(Hermes JSON and Qwen3.5 XML, schema-typed), streamed as llama-server streams them, malformed calls
returned as content, and an agent round trip whose prompts equal jinja2's rendering (transformers'
environment, tests/chat/test_template_parity.py's oracle). About 5 s.
"""
import json
import os
import subprocess
import sys

import openai

from serverlib import SOURCE_DIR, Server, check, ferry_bin, run_tests, stopped_cleanly

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "chat"))
from test_template_parity import make_env  # noqa: E402 - the oracle, after the path is set

SCRATCH = os.environ.get("FERRY_SCRATCH", "/tmp/ferry-server-scratch")
TEMPLATE = os.path.join(SOURCE_DIR, "tests", "data", "templates", "Qwen3.5-4B.jinja")
FORCE = os.path.join(SCRATCH, "chat-tools-force.txt")
MODEL = os.path.join(SCRATCH, "chat-tools-qwen35moe.gguf")
MODEL_T = os.path.join(SCRATCH, "chat-tools-qwen35moe-qwen35-template.gguf")

srv = None
client = None
USER = [{"role": "user", "content": "What is the weather in Oslo?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a place.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"},
        "metric": {"type": "boolean"}, "opts": {"type": "object"}},
        "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}]

# The Qwen3.5 XML form (two calls in one message) after the reasoning the prompt opened.
XML_REPLY = ("The user wants weather and time.\n</think>\n\n"
             "<tool_call>\n<function=get_weather>\n<parameter=location>\nOslo\n</parameter>\n"
             "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n0150\n</parameter>\n"
             "<parameter=metric>\ntrue\n</parameter>\n<parameter=opts>\n{\"unit\": \"C\", \"hours\": [6, 12]}\n</parameter>\n"
             "</function>\n</tool_call>\n"
             "<tool_call>\n<function=get_time>\n<parameter=tz>\nEurope/Oslo\n</parameter>\n</function>\n</tool_call>")
XML_CALLS = [("get_weather", {"location": "Oslo", "days": 3, "zip": "0150", "metric": True,
                              "opts": {"unit": "C", "hours": [6, 12]}}),
             ("get_time", {"tz": "Europe/Oslo"})]


def force(text):
    with open(FORCE, "w", encoding="utf-8") as f:
        f.write(text)


def chat(**kw):
    return client.chat.completions.create(model="synth", messages=kw.pop("messages", USER), max_tokens=400, **kw)


def stream(**kw):
    """(reasoning, content, calls {index: [id, name, arguments]}, chunks, finish_reason)."""
    reasoning, content, calls, chunks, finish = "", "", {}, [], None
    for ch in chat(stream=True, **kw):
        chunks.append(ch)
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        reasoning += getattr(d, "reasoning_content", None) or ""
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:  # a call's first delta: id, type and name, as llama-server
                check(tc.id and tc.type == "function" and tc.function.name, f"first delta of a call: {tc}")
                calls[tc.index] = [tc.id, tc.function.name, ""]
            else:
                check(not tc.id and not tc.function.name, f"later delta names the call again: {tc}")
            calls[tc.index][2] += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    return reasoning, content, calls, chunks, finish


def test_props_and_specials():
    status, props = srv.request("GET", "/props")
    with open(TEMPLATE, encoding="utf-8") as f:
        check(props["chat_template"] == f.read(), "/props chat_template is not the injected template")
    check(props["chat_template_origin"] == "gguf", f"origin {props['chat_template_origin']}")
    check(props["eos_token"] == "<|im_end|>", f"eos_token {props['eos_token']!r}")
    for tag in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>"):
        status, r = srv.request("POST", "/tokenize", {"content": tag})
        check(status == 200 and len(r["tokens"]) == 1, f"{tag} is not one token: {r}")


def test_reasoning_split():
    force("The user greets me.\n</think>\n\nHello from Ferry.")
    r = chat()
    m = r.choices[0].message
    check(m.reasoning_content == "The user greets me.", f"reasoning_content {m.reasoning_content!r}")
    check(m.content == "Hello from Ferry." and not m.tool_calls, f"message {m}")
    check(r.choices[0].finish_reason == "stop", f"finish_reason {r.choices[0].finish_reason}")
    reasoning, content, calls, _, finish = stream()
    check((reasoning, content, calls, finish) == ("The user greets me.", "Hello from Ferry.", {}, "stop"),
          f"streamed {reasoning!r} {content!r} {calls} {finish}")
    # reasoning_format none: the reply as generated, in the content.
    r = chat(extra_body={"reasoning_format": "none"})
    check(r.choices[0].message.content == "The user greets me.\n</think>\n\nHello from Ferry.",
          f"none: {r.choices[0].message}")
    # Thinking off (the request's chat_template_kwargs): the prompt closed the block, the output
    # starts in the content.
    force("Plain answer.")
    r = chat(extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    m = r.choices[0].message
    check(m.content == "Plain answer." and not getattr(m, "reasoning_content", None), f"thinking off: {m}")


def check_calls(got, want, what):
    check(len(got) == len(want), f"{what}: {len(got)} calls, want {len(want)}: {got}")
    for (cid, name, args), (wname, wargs) in zip(got, want):
        check(cid and name == wname and json.loads(args) == wargs, f"{what}: {name} {args} (want {wname} {wargs})")
        check(type(json.loads(args).get("days", 0)) is int, f"{what}: days not a number: {args}")


def test_tool_calls_xml():
    force(XML_REPLY)
    r = chat(tools=TOOLS)
    c = r.choices[0]
    check(c.finish_reason == "tool_calls", f"finish_reason {c.finish_reason}")
    check(c.message.reasoning_content == "The user wants weather and time.", f"reasoning {c.message}")
    check(not c.message.content, f"content {c.message.content!r}")
    check_calls([(t.id, t.function.name, t.function.arguments) for t in c.message.tool_calls], XML_CALLS, "plain")
    check(len({t.id for t in c.message.tool_calls}) == 2, "call ids are not distinct")
    reasoning, content, calls, _, finish = stream(tools=TOOLS)
    check(finish == "tool_calls" and reasoning == "The user wants weather and time." and not content,
          f"streamed {finish} {reasoning!r} {content!r}")
    check_calls([calls[i] for i in sorted(calls)], XML_CALLS, "streamed")


def test_tool_calls_hermes_and_choice():
    force("Checking.\n</think>\n\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>")
    r = chat(tools=TOOLS, tool_choice="required")
    check_calls([(t.id, t.function.name, t.function.arguments) for t in r.choices[0].message.tool_calls],
                [("get_time", {"tz": "UTC"})], "hermes")
    # tool_choice none: the tools are rendered, the reply is not parsed for calls.
    r = chat(tools=TOOLS, tool_choice="none")
    m = r.choices[0].message
    check(not m.tool_calls and "<tool_call>" in m.content and r.choices[0].finish_reason == "stop", f"none: {m}")
    # required and no call: Ferry cannot force one, so the request fails rather than pretend.
    force("No tools.\n</think>\n\nJust text.")
    try:
        chat(tools=TOOLS, tool_choice="required")
        check(False, "tool_choice required without a call succeeded")
    except openai.InternalServerError as e:
        check("required" in str(e), f"error {e}")


def test_malformed_call_is_content():
    bad = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": }\n</tool_call>"
    for text in (bad, "<tool_call>\n<function=unknown_tool>\n</function>\n</tool_call>"):
        force("Hmm.\n</think>\n\n" + text)
        r = chat(tools=TOOLS)
        m = r.choices[0].message
        check(not m.tool_calls and m.content == text and r.choices[0].finish_reason == "stop", f"malformed: {m}")
        reasoning, content, calls, _, _ = stream(tools=TOOLS)
        check(content == text and not calls, f"malformed streamed: {content!r} {calls}")


def oracle_prompt(messages, tools):
    """jinja2's rendering as llama-server's request normalisation feeds it (arguments parsed)."""
    with open(TEMPLATE, encoding="utf-8") as f:
        tmpl = make_env().from_string(f.read())
    msgs = json.loads(json.dumps(messages))
    for m in msgs:
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return tmpl.render(messages=msgs, tools=tools, add_generation_prompt=True, bos_token="<|endoftext|>",
                       eos_token="<|im_end|>", enable_thinking=True)


def test_agent_round_trip():
    """tool call → tool results → answer; each turn's prompt as jinja2 renders it."""
    force(XML_REPLY)
    first = chat(tools=TOOLS).choices[0].message
    turn2 = USER + [first.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "{\"temp_c\": 4}"},
        {"role": "tool", "tool_call_id": first.tool_calls[1].id, "content": "09:30"}]
    check(isinstance(turn2[1]["tool_calls"][0]["function"]["arguments"], str), "arguments are sent as a string")
    status, applied = srv.request("POST", "/apply-template", {"messages": turn2, "tools": TOOLS})
    want = oracle_prompt(turn2, TOOLS)
    check(status == 200 and applied["prompt"] == want,
          f"/apply-template differs from jinja2:\n{applied}\n---\n{want}")
    check("<function=get_weather>" in want and "<tool_response>" in want, f"the round trip is not in the prompt: {want}")
    force("It is 4 degrees.\n</think>\n\nOslo: 4 °C at 09:30.")
    r = chat(messages=turn2, tools=TOOLS)
    m = r.choices[0].message
    check(m.content == "Oslo: 4 °C at 09:30." and m.reasoning_content == "It is 4 degrees.", f"answer {m}")
    # The prompt the server evaluated is the oracle's, token for token.
    status, tok = srv.request("POST", "/tokenize", {"content": want, "add_special": True})
    check(r.usage.prompt_tokens == len(tok["tokens"]),
          f"prompt_tokens {r.usage.prompt_tokens}, the oracle's prompt has {len(tok['tokens'])}")


def test_ferry_chat_reasoning():
    """`ferry chat` renders with the same template and shows the reasoning as llama-cli does."""
    force("The user greets.\n</think>\n\nHello!")
    base = [ferry_bin(), "chat", "-m", MODEL, "-t", "1", "--chat-template-file", TEMPLATE]
    env = dict(os.environ, FERRY_TEST_FORCE_TOKENS=FORCE)
    shown = subprocess.run(base, input="hi\n", capture_output=True, text=True, env=env, timeout=60)
    check(shown.returncode == 0 and shown.stdout == "<think>\nThe user greets.\n</think>\n\nHello!\n",
          f"ferry chat: {shown.stdout!r} {shown.stderr[-400:]}")
    hidden = subprocess.run(base + ["--hide-reasoning"], input="hi\n", capture_output=True, text=True, env=env,
                            timeout=60)
    check(hidden.returncode == 0 and hidden.stdout == "Hello!\n", f"--hide-reasoning: {hidden.stdout!r}")


def test_reasoning_budget_zero_server():
    """--reasoning-budget 0: every prompt closes the thinking block; a request may reopen it."""
    force("Plain answer.")
    env = dict(os.environ, FERRY_TEST_FORCE_TOKENS=FORCE)
    with Server("-c", "1024", "--reasoning-budget", "0", model=MODEL_T, env=env) as off:
        status, r = off.request("POST", "/apply-template", {"messages": USER})
        check(status == 200 and r["prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), f"prompt {r}")
        status, r = off.request("POST", "/apply-template",
                                {"messages": USER, "chat_template_kwargs": {"enable_thinking": True}})
        check(status == 200 and r["prompt"].endswith("<|im_start|>assistant\n<think>\n"), f"reopened {r}")
        status, r = off.request("POST", "/v1/chat/completions", {"messages": USER})
        m = r["choices"][0]["message"]
        check(status == 200 and m["content"] == "Plain answer." and "reasoning_content" not in m, f"budget 0: {m}")


def main():
    global srv, client
    os.makedirs(SCRATCH, exist_ok=True)
    subprocess.run([ferry_bin(), "synth", "--arch", "qwen35moe", "--preset", "tiny", "--quant", "q8_0", "--seed", "27",
                    "-t", "1", "-q", "-o", MODEL], check=True)
    with open(TEMPLATE, encoding="utf-8") as f:
        subprocess.run([ferry_bin(), "gguf-copy", MODEL, MODEL_T, "--set", "tokenizer.chat_template=str:" + f.read()],
                       check=True, stdout=subprocess.DEVNULL)
    force("")
    env = dict(os.environ, FERRY_TEST_FORCE_TOKENS=FORCE)
    srv = Server("-c", "4096", "--jinja", model=MODEL_T, env=env)
    with stopped_cleanly(srv):
        check(any("FERRY_TEST_FORCE_TOKENS" in line for line in srv.lines), "no test-mode warning on stderr")
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120)
        run_tests([test_props_and_specials, test_reasoning_split, test_tool_calls_xml, test_tool_calls_hermes_and_choice,
                   test_malformed_call_is_content, test_agent_round_trip, test_ferry_chat_reasoning,
                   test_reasoning_budget_zero_server])


if __name__ == "__main__":
    main()
