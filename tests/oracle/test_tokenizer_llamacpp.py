#!/usr/bin/env python3
"""`ferry tokenize` against llama.cpp (llama-cpp-python) on llama.cpp's Qwen test vocabularies.

Random strings -- mixed scripts, digits, whitespace runs, emoji (ZWJ sequences, flags, skin
tones), combining marks, contractions, special and user-defined token text, code points newer
than PCRE2's Unicode tables -- plus hand-picked edge cases are tokenized by both, with special
parsing on and off, and must give identical ids. A few byte strings that are not valid UTF-8 go
through `-f` one by one. Needs .cache/vocab/ (scripts/fetch-test-data.sh); the seed is
FERRY_TOKENIZER_SEED (default 20261129).
"""
import ctypes
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FERRY, SOURCE, scratch  # noqa: E402

VOCABS = ["ggml-vocab-qwen2.gguf", "ggml-vocab-qwen35.gguf"]
N_RANDOM = int(os.environ.get("FERRY_TOKENIZER_CASES", "600"))
WAIT_FOR_LLAMA_CPP_S = int(os.environ.get("FERRY_WAIT_LLAMA_CPP_S", "600"))


def import_llama_cpp():
    """llama-cpp-python may still be compiling into the venv: poll for it for a while."""
    deadline = time.time() + WAIT_FOR_LLAMA_CPP_S
    while True:
        probe = subprocess.run([sys.executable, "-c", "import llama_cpp"], capture_output=True)
        if probe.returncode == 0:
            import llama_cpp
            return llama_cpp
        if time.time() > deadline:
            print("SKIPPED: llama_cpp (llama-cpp-python) is not importable in the venv")
            sys.exit(77)
        print("waiting for llama-cpp-python to finish installing ...", flush=True)
        time.sleep(15)


# Building blocks for the random strings.
WORDS = ["Hello", "world", "the", "THE", "don't", "I'm", "we'll", "they're", "you've", "He'd",
         "IT'S", "naïve", "café", "Straße", "Ελληνικά", "русский", "українська", "עברית",
         "العربية", "हिन्दी", "தமிழ்", "ไทย", "中文", "日本語", "ひらがな", "カタカナ", "한국어",
         "Tiếng Việt", "Vieết", "résumé", "ﬁne", "ǅ", "x²", "½", "Ⅻ", "٣٤", "３４", "၄", "𝟘𝟙"]
PUNCT = list("!?.,;:'\"()[]{}<>/\\|@#$%^&*-_+=~`") + ["...", "—", "–", "«", "»", "„", "“", "”", "、", "。", "・"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u0085",
          "\u200b", "\u1680", "\u2009", "\x0b", "\x0c", "\x1c", "\u180e"]
EMOJI = ["😀", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪", "🇯🇵", "❤️", "✅", "🦙", "😶‍🌫️", "1️⃣", "🫠"]
MARKS = ["\u0301", "\u0300\u0323", "\u0308", "\u20dd", "\u0e31", "\u094d", "\u05b7", "\u0cf3"]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "[PAD151650]", "[PAD151699]", "<|im_",
           "<|", "|>", "<|im_start|>user\n", "<|im_start|>assistant\n", "<think>", "<|endoftext|><|endoftext|>"]
# Letters, digits and marks assigned after Unicode 14 (PCRE2 10.42's tables) that llama.cpp knows.
NEWER = ["\U0001E4F0", "\U0001E4F5", "\U00031350", "\U00031351", "\U0002EBF0", "\u0cf3", "\U00011F50",
         "\U0001E030", "\U0001D2C0", "\U00011F04"]


def random_codepoint(rng):
    while True:
        r = rng.random()
        if r < 0.5:
            cp = rng.randint(0x20, 0x2FFF)
        elif r < 0.8:
            cp = rng.randint(0x3000, 0xFFFF)
        else:
            cp = rng.randint(0x10000, 0x10FFFF)
        if not (0xD800 <= cp <= 0xDFFF):
            return chr(cp)


def random_text(rng):
    parts = []
    for _ in range(rng.randint(1, 24)):
        k = rng.random()
        if k < 0.22:
            parts.append(rng.choice(WORDS))
        elif k < 0.35:
            parts.append(rng.choice(SPACES) * rng.randint(1, 3))
        elif k < 0.45:
            parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 12))))
        elif k < 0.55:
            parts.append("".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4))))
        elif k < 0.63:
            parts.append(rng.choice(EMOJI))
        elif k < 0.70:
            parts.append(rng.choice("aeoun") + rng.choice(MARKS))
        elif k < 0.78:
            parts.append(rng.choice(SPECIAL))
        elif k < 0.84:
            parts.append(rng.choice(NEWER))
        elif k < 0.93:
            parts.append("".join(random_codepoint(rng) for _ in range(rng.randint(1, 6))))
        else:
            parts.append("".join(chr(rng.randint(0x61, 0x7a)) for _ in range(rng.randint(1, 15))))
    return "".join(parts)


EDGE_CASES = [
    "", " ", "  ", "\n", "\t\n", "   Hello", "Hello   ", "a  b", "a\n\n\n b", "\r\n\r\n", "'s", "'S'S'LL",
    "x'ye", "3333333", "12,345.67", "<|im_start|>system\nYou are helpful.<|im_end|>\n",
    "<|im_start|><|im_end|>", "[PAD151650][PAD151651]", "<<|im_end|>>", "\u3000\u3000x", "e\u0301\u0301",
    "\u0301abc", "🇩🇪🇯🇵", "👨‍👩‍👧‍👦x", "a\x00b", "\x1c\x1d\x1e\x1f", "a" * 3000, " " * 500 + "x",
    "!" * 700, "\n" * 300, "中" * 400, "abc" * 2000 + " " + "😀" * 100,
]
# Not valid UTF-8: each byte that does not start a well-formed sequence becomes U+FFFD in both.
INVALID = [b"a\xffb", b"\xc3", b"abc\xe2\x82", b"\xed\xa0\x80x", b"\xc0\xafy", b"\x80\x80 z", b"hi \xf0\x9f\x98"]


def ferry_jsonl(vocab, texts, flags):
    path = scratch(f"tok-{os.path.basename(vocab)}-{'_'.join(flags) or 'default'}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
    r = subprocess.run([FERRY, "tokenize", "-m", vocab, "--jsonl", path, *flags], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise RuntimeError(f"ferry tokenize --jsonl failed ({r.returncode})")
    lines = [l for l in r.stdout.splitlines() if l.strip()]
    # Blank texts are written as "" and come back as [] (json.dumps never writes an empty line).
    assert len(lines) == len(texts), (len(lines), len(texts))
    return [json.loads(l) for l in lines]


def ferry_file(vocab, data: bytes):
    path = scratch("tok-bytes.txt")
    with open(path, "wb") as f:
        f.write(data)
    r = subprocess.run([FERRY, "tokenize", "-m", vocab, "-f", path, "--ids"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise RuntimeError("ferry tokenize -f failed")
    return json.loads(r.stdout)


def llama_piece(llama_cpp, llm, token):
    # llama-cpp-python's own token_to_piece/detokenize use a 32-byte buffer and mangle longer
    # pieces (whitespace runs); call the C API with room to spare.
    buf = ctypes.create_string_buffer(1024)
    n = llama_cpp.llama_token_to_piece(llm._model.vocab, token, buf, len(buf), 0, True)
    assert 0 <= n <= len(buf), n
    return buf.raw[:n]


def ferry_pieces(vocab, data: bytes):
    path = scratch("tok-pieces.txt")
    with open(path, "wb") as f:
        f.write(data)
    r = subprocess.run([FERRY, "tokenize", "-m", vocab, "-f", path], capture_output=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr.decode(errors="replace"))
        raise RuntimeError("ferry tokenize -f failed")
    return r.stdout


def main():
    vocab_dir = os.path.join(SOURCE, ".cache", "vocab")
    missing = [v for v in VOCABS[:1] if not os.path.exists(os.path.join(vocab_dir, v))]
    if missing:
        print(f"FAILED: {missing} not in {vocab_dir}: run scripts/fetch-test-data.sh")
        return 1
    llama_cpp = import_llama_cpp()
    seed = int(os.environ.get("FERRY_TOKENIZER_SEED", "20261129"))
    rng = random.Random(seed)
    texts = EDGE_CASES + [random_text(rng) for _ in range(N_RANDOM)]

    failures = 0
    for name in VOCABS:
        vocab = os.path.join(vocab_dir, name)
        if not os.path.exists(vocab):
            print(f"{name}: not shipped by this llama-cpp-python release, skipped")
            continue
        llm = llama_cpp.Llama(model_path=vocab, vocab_only=True, verbose=False)
        for flags, special, add_bos in (([], True, False), (["--no-parse-special"], False, False),
                                        (["--add-bos"], True, True)):
            got = ferry_jsonl(vocab, texts, flags)
            bad = 0
            for t, g in zip(texts, got):
                want = llm.tokenize(t.encode("utf-8"), add_bos=add_bos, special=special)
                if g != want:
                    bad += 1
                    if bad <= 5:
                        print(f"MISMATCH {name} {flags} text={t!r}\n  ferry: {g}\n  llama: {want}")
            print(f"{name} {' '.join(flags) or '(parse special)'}: {len(texts) - bad}/{len(texts)} match")
            failures += bad
        bad = 0
        for data in INVALID:
            g = ferry_file(vocab, data)
            want = llm.tokenize(data, add_bos=False, special=True)
            if g != want:
                bad += 1
                print(f"MISMATCH {name} bytes={data!r}\n  ferry: {g}\n  llama: {want}")
        print(f"{name} invalid UTF-8: {len(INVALID) - bad}/{len(INVALID)} match")
        failures += bad
        # Decoding: the pieces `ferry tokenize` prints (token bytes, control tokens rendered) must be
        # llama.cpp's token_to_piece(special=True), byte for byte, for every token of the texts.
        joined = "".join(texts[:300]).encode("utf-8")
        ids = llm.tokenize(joined, add_bos=False, special=True)
        want = b"".join(b"%6d -> '" % i + llama_piece(llama_cpp, llm, i) + b"'\n" for i in ids)
        got = ferry_pieces(vocab, joined)
        if got != want:
            failures += 1
            at = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
            print(f"PIECES {name}: output differs at byte {at}: ferry {got[at - 40:at + 40]!r} llama {want[at - 40:at + 40]!r}")
        else:
            print(f"{name} pieces of {len(ids)} tokens ({len(set(ids))} distinct): identical")
    print("PASSED" if failures == 0 else f"FAILED: {failures} mismatches")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
