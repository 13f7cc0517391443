"""`ferry serve` through the official openai client on the trained reference model: chat plain and
streamed, usage and timings, stop sequences, max_tokens, seed reproducibility, completions, models,
logprobs, penalties, and errors as the client's typed exceptions."""
import openai

from serverlib import Server, check, run_tests, stopped_cleanly

srv = None
client = None
MSG = [{"role": "user", "content": "And God said"}]


def test_models():
    models = client.models.list()
    ids = [m.id for m in models.data]
    check(ids == ["kjv-qwen35moe-q8_0.gguf"], f"models: {ids}")


def test_chat_plain_usage_timings():
    r = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=12, temperature=0)
    c = r.choices[0]
    check(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), f"object/id: {r.object} {r.id}")
    check(c.message.role == "assistant" and len(c.message.content) > 0, f"message: {c.message}")
    check(c.finish_reason in ("stop", "length"), c.finish_reason)
    u = r.usage
    check(u.prompt_tokens > 3 and 1 <= u.completion_tokens <= 12, f"usage {u}")
    check(u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage total {u}")
    t = r.model_extra["timings"]
    # The first chat request: nothing to reuse yet (test_prompt_reuse.py covers reuse).
    check(u.prompt_tokens_details.cached_tokens == 0 == t["cache_n"], f"cached {u.prompt_tokens_details}")
    check(t["prompt_n"] == u.prompt_tokens and t["predicted_n"] == u.completion_tokens and t["prompt_ms"] > 0, f"timings {t}")
    check(r.model == "kjv", f"model echoed: {r.model}")


def test_chat_stream_matches_plain():
    plain = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=16, temperature=0)
    chunks = list(client.chat.completions.create(model="kjv", messages=MSG, max_tokens=16, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    check(chunks[0].choices[0].delta.role == "assistant", f"first chunk {chunks[0]}")
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(text == plain.choices[0].message.content, f"stream {text!r} != plain {plain.choices[0].message.content!r}")
    finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    check(len(finals) == 1 and finals[0].choices[0].finish_reason == plain.choices[0].finish_reason, "one final chunk")
    check(chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens,
          f"usage chunk {chunks[-1]}")
    check(all(ch.object == "chat.completion.chunk" for ch in chunks), "chunk objects")


def test_max_tokens_and_length():
    r = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=3, temperature=0)
    check(r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length", f"{r.usage} {r.choices[0]}")
    r = client.chat.completions.create(model="kjv", messages=MSG, max_completion_tokens=2, temperature=0)
    check(r.usage.completion_tokens == 2, f"max_completion_tokens: {r.usage}")


def test_stop_sequences():
    base = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=24, temperature=0).choices[0].message.content
    words = base.split()
    check(len(words) >= 3, f"need a longer reply: {base!r}")
    stop = " " + words[2]
    cut = base[: base.index(stop)]
    for stream in (False, True):
        if stream:
            chunks = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=24, temperature=0, stop=[stop],
                                                    stream=True)
            parts = list(chunks)
            text = "".join(ch.choices[0].delta.content or "" for ch in parts if ch.choices)
            reason = [ch.choices[0].finish_reason for ch in parts if ch.choices and ch.choices[0].finish_reason][0]
        else:
            r = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=24, temperature=0, stop=stop)
            text, reason = r.choices[0].message.content, r.choices[0].finish_reason
        check(text == cut and reason == "stop", f"stop {stop!r} stream={stream}: {text!r} ({reason}), want {cut!r}")


def test_seed_reproducible():
    kw = dict(model="kjv", messages=MSG, max_tokens=16, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    a = [client.chat.completions.create(seed=s, extra_body={k: v for k, v in kw.items() if k in ("top_k", "min_p")},
                                        **{k: v for k, v in kw.items() if k not in ("top_k", "min_p")}).choices[0].message.content
         for s in (7, 7, 8, 9)]
    check(a[0] == a[1], f"same seed differs: {a[0]!r} vs {a[1]!r}")
    check(len({a[0], a[2], a[3]}) > 1, f"three seeds gave one text: {a}")


def test_completions():
    r = client.completions.create(model="kjv", prompt="In the beginning", max_tokens=8, temperature=0)
    check(r.object == "text_completion" and len(r.choices[0].text) > 0, f"{r}")
    check(r.usage.completion_tokens <= 8 and r.usage.prompt_tokens >= 2, f"{r.usage}")
    s = list(client.completions.create(model="kjv", prompt="In the beginning", max_tokens=8, temperature=0, stream=True))
    check("".join(c.choices[0].text for c in s) == r.choices[0].text, "completion stream == plain")
    tok = srv.request("POST", "/tokenize", {"content": "In the beginning", "add_special": True})[1]["tokens"]
    t = client.completions.create(model="kjv", prompt=tok, max_tokens=8, temperature=0)
    check(t.choices[0].text == r.choices[0].text, "a prompt of token ids == the same prompt as text")
    lp = client.completions.create(model="kjv", prompt="In the beginning", max_tokens=4, temperature=0, logprobs=2)
    l = lp.choices[0].logprobs
    check(len(l.tokens) == len(l.token_logprobs) == len(l.top_logprobs) == 4, f"legacy logprobs {l}")


def test_logprobs():
    r = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    check(len(content) >= 1, f"logprobs {r.choices[0].logprobs}")
    for e in content:
        check(e.logprob <= 0 and len(e.top_logprobs) == 3, f"entry {e}")
        # Greedy: the chosen token is the most likely one.
        check(abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5, f"greedy token not the top: {e}")
        check(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob, "sorted")
    joined = b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace")
    check(r.choices[0].message.content.startswith(joined[: len(r.choices[0].message.content)][:1]) or joined == "",
          "bytes of the tokens")


def test_penalties_change_greedy_text():
    base = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=40, temperature=0).choices[0].message.content
    pen = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=40, temperature=0, presence_penalty=2.0,
                                         frequency_penalty=2.0).choices[0].message.content
    check(base != pen, f"penalties had no effect: {base!r}")


def test_logit_bias():
    r = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=1, temperature=0, logprobs=True)
    first = srv.request("POST", "/tokenize", {"content": r.choices[0].message.content})[1]["tokens"][0]
    banned = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=1, temperature=0,
                                            logit_bias={str(first): -100})
    check(banned.choices[0].message.content != r.choices[0].message.content, "a banned token was still chosen")
    piece = srv.request("POST", "/tokenize", {"content": " Jerusalem", "with_pieces": True})[1]["tokens"][-1]
    forced = client.chat.completions.create(model="kjv", messages=MSG, max_tokens=3, temperature=0,
                                            logit_bias={str(piece["id"]): 100})
    check(forced.choices[0].message.content == piece["piece"] * 3, f"a +100 bias should force {piece}: {forced.choices[0]}")


def test_message_forms():
    a = client.chat.completions.create(model="kjv", max_tokens=8, temperature=0,
                                       messages=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Amen"}])
    b = client.chat.completions.create(model="kjv", max_tokens=8, temperature=0,
                                       messages=[{"role": "system", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
                                                 {"role": "user", "content": "Amen"}])
    check(a.choices[0].message.content == b.choices[0].message.content, "developer == system, text parts joined")
    p = srv.request("POST", "/apply-template", {"messages": [{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}]})
    check(p == (200, {"prompt": "<|im_start|>system\nx<|im_end|>\n<|im_start|>user\ny<|im_end|>\n<|im_start|>assistant\n"}), f"{p}")


def test_typed_errors():
    def raises(exc, **kw):
        try:
            client.chat.completions.create(model="kjv", **kw)
        except exc as e:
            return e
        raise AssertionError(f"{kw} did not raise {exc.__name__}")

    e = raises(openai.BadRequestError, messages=[])
    check(e.status_code == 400 and "messages" in e.message, e.message)
    e = raises(openai.BadRequestError, messages=[{"role": "wizard", "content": "x"}])
    check("messages[0].role" in e.message and e.body["type"] == "invalid_request_error", f"{e.body}")
    e = raises(openai.BadRequestError, messages=MSG, temperature=-1)
    check("temperature" in e.message, e.message)
    e = raises(openai.BadRequestError, messages=[{"role": "user", "content": "word " * 3000}])
    check(e.body["type"] == "exceed_context_size_error" and e.body["n_ctx"] > 0 and e.body["n_prompt_tokens"] > e.body["n_ctx"],
          f"{e.body}")
    bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0)
    keyed = Server("--api-key", "sekret", "-c", "1024")
    try:
        bad = openai.OpenAI(base_url=keyed.base + "/v1", api_key="wrong", max_retries=0)
        try:
            bad.chat.completions.create(model="kjv", messages=MSG, max_tokens=2)
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError as e:
            check(e.status_code == 401 and e.body["type"] == "authentication_error", f"{e.body}")
        good = openai.OpenAI(base_url=keyed.base + "/v1", api_key="sekret", max_retries=0)
        check(len(good.chat.completions.create(model="kjv", messages=MSG, max_tokens=2).choices) == 1, "right key")
    finally:
        check(keyed.stop() == 0, "keyed server exit code")


def test_native_completion():
    """llama-server's /completion: content, stop_type, tokens_predicted, timings; the stream's
    pieces join to the whole content and its last chunk says stop."""
    import http.client
    import json as js
    body = {"prompt": "And God said", "n_predict": 8, "temperature": 0}
    status, whole = srv.request("POST", "/completion", body)
    check(status == 200 and whole["stop"] and whole["stop_type"] == "limit" and whole["tokens_predicted"] == 8, f"{whole}")
    check(whole["tokens_evaluated"] >= 3 and whole["timings"]["predicted_n"] == 8, f"{whole}")
    word = whole["content"].split()[1]
    status, cut = srv.request("POST", "/completion", dict(body, stop=[word], n_probs=2))
    check(cut["stop_type"] == "word" and cut["stopping_word"] == word and cut["content"] == whole["content"][: whole["content"].index(word)],
          f"stop word: {cut}")
    check(len(cut["completion_probabilities"][0]["top_logprobs"]) == 2, "n_probs")
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/completion", js.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
    lines = c.getresponse().read().decode().splitlines()
    chunks = [js.loads(l[6:]) for l in lines if l.startswith("data: ")]
    check(chunks[-1]["stop"] and not any(ch["stop"] for ch in chunks[:-1]), "only the last chunk stops")
    check("".join(ch["content"] for ch in chunks) == whole["content"], "stream == whole")


def test_native_endpoints():
    status, t = srv.request("POST", "/tokenize", {"content": "And God said", "with_pieces": True})
    check(status == 200 and "".join(p["piece"] for p in t["tokens"]) == "And God said", f"/tokenize pieces {t}")
    ids = [p["id"] for p in t["tokens"]]
    check(srv.request("POST", "/detokenize", {"tokens": ids}) == (200, {"content": "And God said"}), "/detokenize round trip")
    status, p = srv.request("GET", "/props")
    check(status == 200 and p["total_slots"] == 2 and p["default_generation_settings"]["n_ctx"] == 512, f"/props {p}")
    check("<|im_start|>" in p["chat_template"], "/props chat_template")
    status, sl = srv.request("GET", "/slots")
    check(status == 200 and [x["id"] for x in sl] == [0, 1] and all(x["n_ctx"] == 512 for x in sl), f"/slots {sl}")
    status, text = srv.request("GET", "/metrics")
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:prompt_seconds_total", "llamacpp:tokens_predicted_total",
                 "llamacpp:tokens_predicted_seconds_total", "llamacpp:n_decode_total", "llamacpp:prompt_tokens_seconds",
                 "llamacpp:predicted_tokens_seconds", "llamacpp:requests_processing", "llamacpp:requests_deferred"):
        check(f"\n{name} " in text, f"/metrics lacks {name}")
    n = int(text.split("\nllamacpp:tokens_predicted_total ")[1].split()[0])
    check(n > 50, f"tokens_predicted_total {n} after the tests above")


def main():
    global srv, client
    srv = Server("-c", "1024", "-np", "2", "--metrics")
    with stopped_cleanly(srv):
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120)
        run_tests([test_models, test_chat_plain_usage_timings, test_chat_stream_matches_plain, test_max_tokens_and_length,
                   test_stop_sequences, test_seed_reproducible, test_completions, test_logprobs,
                   test_penalties_change_greedy_text, test_logit_bias, test_message_forms, test_native_completion, test_native_endpoints, test_typed_errors])


if __name__ == "__main__":
    main()
