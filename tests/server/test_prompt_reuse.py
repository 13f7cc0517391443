"""Prompt reuse across requests (docs/server.md, "Prompt reuse"), on the trained qwen35moe (hybrid:
DeltaNet checkpoints) and qwen3moe (attention: truncation) models. A four-turn chat rendered with
the Qwen3.5 template, thinking on, through /completion: from turn 2 on a turn reuses the previous
one's tokens up to the start of the last assistant turn (hybrid: exactly the checkpoint there),
usage/timings/`/slots` report it, and from turn 3 on the greedy reply equals that of the same
prompt with cache_prompt: false. Then -sps: a prompt extending one slot's cached tokens goes to
that slot rather than the least recently used one. About 10 s."""
import os
import sys

from serverlib import SOURCE_DIR, Server, check, run_tests, stopped_cleanly

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "chat"))
from test_template_parity import make_env  # noqa: E402  the transformers-like jinja2 oracle

TEMPLATE = open(os.path.join(SOURCE_DIR, "tests", "data", "templates", "Qwen3.5-4B.jinja")).read()
QUESTIONS = ["Who went with Naomi?", "And where did they go?", "Whom did Ruth marry?", "Who was their son?"]
srv = None
hybrid = False


def render(messages):
    return make_env().from_string(TEMPLATE).render(messages=messages, add_generation_prompt=True, enable_thinking=True,
                                                   bos_token="", eos_token="")


def tokens(text):
    status, t = srv.request("POST", "/tokenize", {"content": text, "add_special": True})
    check(status == 200, f"/tokenize {t}")
    return t["tokens"]


def complete(prompt, cache_prompt=True):
    status, r = srv.request("POST", "/completion", {"prompt": prompt, "n_predict": 8, "temperature": 0,
                                                    "cache_prompt": cache_prompt}, timeout=120)
    check(status == 200, f"/completion {r}")
    t = r["timings"]
    check(t["cache_n"] == r["tokens_cached"] and t["cache_n"] + t["prompt_n"] == r["tokens_evaluated"], f"counts {r}")
    return r


def lcp(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_turns_reuse_the_prefix():
    messages = [{"role": "system", "content": "Answer from the book of Ruth."}]
    prev = None
    for turn, q in enumerate(QUESTIONS, 1):
        messages.append({"role": "user", "content": q})
        prompt = render(messages)
        r = complete(prompt)
        if prev is not None:
            header = prev[: prev.rindex("<|im_start|>")]  # the previous turn's generation header
            want = len(tokens(header))
            if hybrid:
                check(r["tokens_cached"] == want, f"turn {turn}: cached {r['tokens_cached']}, the checkpoint is at {want}")
            else:
                check(r["tokens_cached"] >= max(want, lcp(tokens(prev), tokens(prompt))), f"turn {turn}: cached {r}")
        if turn >= 3:
            fresh = complete(prompt, cache_prompt=False)
            check(fresh["tokens_cached"] == 0, f"cache_prompt false reused {fresh['tokens_cached']}")
            check(fresh["content"] == r["content"], f"turn {turn}: {r['content']!r} != fresh {fresh['content']!r}")
        messages.append({"role": "assistant", "content": f"<think>\n{r['content']}\n</think>\n\nThe answer {turn}."})
        prev = prompt
    status, slots = srv.request("GET", "/slots")
    check(status == 200 and any(s["n_cache_tokens"] > 0 for s in slots), f"/slots {slots}")
    held = sum(s["ctx_checkpoints_bytes"] for s in slots)
    check((held > 0) == hybrid and all("n_prompt_tokens_cache" in s for s in slots), f"/slots checkpoints {slots}")


def test_slot_with_the_longest_prefix():
    """x then y go to different slots; y extended goes to y's slot (not the least recently used,
    x's) and reuses it; an unrelated prompt then goes to the least recently used one."""
    x = "And Ruth said, Intreat me not to leave thee, or to return from following after thee"
    y = "Then Naomi her mother in law said unto her, My daughter, shall I not seek rest for thee"
    complete(x)
    ry = complete(y)
    check(ry["tokens_cached"] <= 2, f"y reused {ry['tokens_cached']} tokens of x")
    ry2 = complete(y + ry["content"] + " that it may be well with thee")
    check(ry2["tokens_cached"] >= len(tokens(y)) - 1, f"y extended: cached {ry2['tokens_cached']}")


def main():
    global srv, hybrid
    for name, is_hybrid in (("kjv-qwen35moe-q8_0.gguf", True), ("kjv-qwen3moe-q8_0.gguf", False)):
        hybrid = is_hybrid
        srv = Server("-c", "2048", "-np", "2", "--checkpoint-min-step", "16",
                     model=os.path.join(SOURCE_DIR, "tests", "data", "trained", name))
        with stopped_cleanly(srv):
            print(name, flush=True)
            run_tests([test_turns_reuse_the_prefix, test_slot_with_the_longest_prefix])


if __name__ == "__main__":
    main()
