"""Every error path of `ferry serve` at the HTTP level: status, llama-server's envelope
{"error": {"code", "message", "type"}}, and the field the message names."""
import socket

from serverlib import Server, check, run_tests, stopped_cleanly

srv = None
CHAT = "/v1/chat/completions"
OK_MSG = [{"role": "user", "content": "hi"}]


def expect(status, body, code, etype, field, what):
    check(status == code, f"{what}: status {status} (want {code}): {body}")
    check(isinstance(body, dict) and set(body) == {"error"}, f"{what}: no envelope: {body}")
    e = body["error"]
    check(e["code"] == code and e["type"] == etype, f"{what}: {e}")
    check(field in e["message"], f"{what}: message {e['message']!r} does not name {field!r}")


def bad_chat(extra, field, what=None):
    body = {"messages": OK_MSG, "max_tokens": 2}
    body.update(extra)
    status, resp = srv.request("POST", CHAT, body)
    expect(status, resp, 400, "invalid_request_error", field, what or str(extra))


def test_malformed_json():
    for raw in (b"{", b"{\"messages\": [}", b"\xff\xfe", b"", b"nul"):
        status, resp = srv.request("POST", CHAT, raw=raw)
        expect(status, resp, 400, "invalid_request_error", "malformed JSON", repr(raw))
    status, resp = srv.request("POST", CHAT, raw=b"[1, 2]")
    expect(status, resp, 400, "invalid_request_error", "body", "array body")


def test_messages():
    status, resp = srv.request("POST", CHAT, {"max_tokens": 2})
    expect(status, resp, 400, "invalid_request_error", "messages", "missing messages")
    bad_chat({"messages": "hi"}, "messages")
    bad_chat({"messages": []}, "messages")
    bad_chat({"messages": [5]}, "messages[0]")
    bad_chat({"messages": [{"content": "x"}]}, "messages[0].role")
    bad_chat({"messages": [{"role": 3, "content": "x"}]}, "messages[0].role")
    bad_chat({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role")
    bad_chat({"messages": [{"role": "assistant", "content": "x", "tool_calls": {}}]}, "messages[0].tool_calls")
    bad_chat({"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "x"}]}, "messages[1].role")
    bad_chat({"messages": [{"role": "user"}]}, "messages[0].content")
    bad_chat({"messages": [{"role": "user", "content": 5}]}, "messages[0].content")
    bad_chat({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
             "messages[0].content[0].type")
    bad_chat({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, "messages[0].content[0].text")


def test_sampling_values():
    for field, value in [("temperature", "hot"), ("temperature", -0.5), ("top_p", 1.5), ("top_p", -1), ("top_k", -3),
                         ("top_k", 2.5), ("min_p", 2), ("presence_penalty", 2.5), ("frequency_penalty", -2.5),
                         ("repeat_penalty", 0), ("repeat_last_n", -2), ("seed", "x"), ("seed", 2 ** 40),
                         ("max_tokens", 0), ("max_tokens", "many"), ("max_completion_tokens", -5), ("n", 2),
                         ("stop", 5), ("stop", [1]), ("stop", [""]), ("stream", "yes"), ("stream_options", 1),
                         ("logprobs", "x"), ("top_logprobs", 30), ("model", 7)]:
        extra = {field: value}
        if field == "top_logprobs":
            extra["logprobs"] = True
        bad_chat(extra, field, f"{field}={value!r}")
    bad_chat({"top_logprobs": 2}, "top_logprobs", "top_logprobs without logprobs")
    for value, field in [(5, "logit_bias"), ({"x": 1}, 'logit_bias["x"]'), ({"1": 200}, 'logit_bias["1"]'),
                         ({"1": True}, 'logit_bias["1"]'), ([[1]], "logit_bias[0]"), ({"999999": 1}, "logit_bias")]:
        bad_chat({"logit_bias": value}, field, f"logit_bias={value!r}")
    # Tools are rendered by the chat template; this model's own is a ChatML without tools, so the
    # request cannot be rendered faithfully: the server's failure (500), never the tools dropped.
    tools = [{"type": "function", "function": {"name": "f"}}]
    status, resp = srv.request("POST", CHAT, {"messages": OK_MSG, "max_tokens": 2, "tools": tools})
    expect(status, resp, 500, "server_error", "tools", "tools to a template without them")
    bad_chat({"tools": [{"type": "function"}]}, "tools[0]", "tool without a function")
    bad_chat({"tools": tools, "tool_choice": "sometimes"}, "tool_choice", "tool_choice")
    bad_chat({"chat_template_kwargs": {"enable_thinking": "yes"}}, "enable_thinking", "enable_thinking")
    status, resp = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, "tools": tools})
    expect(status, resp, 400, "invalid_request_error", "tools", "tools on a completion")
    bad_chat({"response_format": {"type": "json_object"}}, "grammar-constrained", "json mode")
    bad_chat({"response_format": "json"}, "response_format", "response_format type")


def test_completion_prompt():
    for prompt, field in [(None, "prompt"), (5, "prompt"), ([], "prompt"), ("", "prompt"), ([1, "a"], "prompt[1]"),
                          ([10 ** 6], "prompt[0]"), ([-1], "prompt[0]")]:
        body = {"max_tokens": 2}
        if prompt is not None:
            body["prompt"] = prompt
        status, resp = srv.request("POST", "/v1/completions", body)
        expect(status, resp, 400, "invalid_request_error", field, f"prompt={prompt!r}")


def test_context_exceeded():
    status, resp = srv.request("POST", CHAT, {"messages": [{"role": "user", "content": "and " * 600}]})
    expect(status, resp, 400, "exceed_context_size_error", "context", "long prompt")
    e = resp["error"]
    check(e["n_ctx"] == 256 and e["n_prompt_tokens"] > 256, f"n_ctx / n_prompt_tokens: {e}")
    status, resp = srv.request("POST", "/v1/completions", {"prompt": list(range(300))})
    expect(status, resp, 400, "exceed_context_size_error", "context", "long token prompt")


def test_not_found_and_methods():
    for method, path in [("GET", "/nope"), ("POST", "/v1/nothing"), ("GET", CHAT), ("DELETE", "/health")]:
        status, resp = srv.request(method, path)
        expect(status, resp, 404, "not_found_error", "Not Found", f"{method} {path}")


def test_body_too_large():
    status, resp = srv.request("POST", CHAT, raw=b"{\"messages\": \"" + b"a" * 70000 + b"\"}")
    expect(status, resp, 413, "invalid_request_error", "--max-body", "oversized body")
    # cpp-httplib's own cap on form-encoded bodies (what curl -d sends without -H): said so.
    status, resp = srv.request("POST", CHAT, raw=b"{\"messages\": \"" + b"a" * 9000 + b"\"}",
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
    expect(status, resp, 413, "invalid_request_error", "application/json", "form-encoded body over 8 KiB")


def test_native_errors():
    status, resp = srv.request("POST", "/tokenize", {"content": 5})
    expect(status, resp, 400, "invalid_request_error", "content", "/tokenize content")
    status, resp = srv.request("POST", "/detokenize", {"tokens": [1, 10 ** 7]})
    expect(status, resp, 400, "invalid_request_error", "tokens[1]", "/detokenize id")
    status, resp = srv.request("POST", "/apply-template", {"messages": [{"role": "x", "content": "y"}]})
    expect(status, resp, 400, "invalid_request_error", "messages[0].role", "/apply-template role")
    status, resp = srv.request("GET", "/metrics")
    expect(status, resp, 501, "not_supported_error", "--metrics", "/metrics without --metrics")


def test_auth():
    with Server("--api-key", "k3y,other", "-c", "256") as keyed:
        for headers, what in [({}, "Missing"), ({"Authorization": "Bearer nope"}, "Invalid"),
                              ({"Authorization": "Bearer k3y-longer"}, "Invalid"), ({"X-Api-Key": "k3"}, "Invalid")]:
            status, resp = keyed.request("POST", CHAT, {"messages": OK_MSG, "max_tokens": 1}, headers=headers)
            expect(status, resp, 401, "authentication_error", what, f"headers {headers}")
        status, resp = keyed.request("GET", "/metrics.json")
        expect(status, resp, 401, "authentication_error", "Missing", "/metrics.json without key")
        check(keyed.request("GET", "/health")[0] == 200, "/health is public")
        for headers in ({"Authorization": "Bearer k3y"}, {"X-Api-Key": "k3y"}, {"Authorization": "Bearer other"}):
            status, resp = keyed.request("POST", CHAT, {"messages": OK_MSG, "max_tokens": 1}, headers=headers)
            check(status == 200, f"right key {headers}: {status} {resp}")


def test_queue_full():
    # -np 1 --queue 0: a second request while one streams is refused with 503.
    with Server("-np", "1", "--queue", "0", "-c", "512", "--ping-interval", "100") as one:
        s = socket.create_connection(("127.0.0.1", one.port))
        body = b'{"messages":[{"role":"user","content":"and"}],"max_tokens":400,"stream":true,"temperature":1,"seed":1}'
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        s.recv(100)  # the stream started: the slot is taken
        status, resp = one.request("POST", CHAT, {"messages": OK_MSG, "max_tokens": 1})
        expect(status, resp, 503, "unavailable_error", "busy", "queue full")
        check(one.request("GET", "/health")[0] == 200, "/health while busy")
        s.close()


def test_refused_when_not_loopback_without_key():
    import subprocess
    from serverlib import MODEL, ferry_bin
    r = subprocess.run([ferry_bin(), "serve", "-m", MODEL, "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True,
                       timeout=30)
    check(r.returncode != 0 and "--insecure-no-key" in r.stderr, f"non-loopback without key: rc {r.returncode} {r.stderr}")


def main():
    global srv
    srv = Server("-c", "256", "--max-body", "65536")
    with stopped_cleanly(srv):
        run_tests([test_malformed_json, test_messages, test_sampling_values, test_completion_prompt, test_context_exceeded,
                   test_not_found_and_methods, test_body_too_large, test_native_errors, test_auth, test_queue_full,
                   test_refused_when_not_loopback_without_key])


if __name__ == "__main__":
    main()
