#!/usr/bin/env python3
"""Synthetic models (`ferry synth`) against llama.cpp and the gguf package.

(1) llama.cpp loads every tiny arch x quant file (qwen3moe, qwen35moe, qwen3next x f32, f16, q8_0,
    q4_k_m, q5_k_m, q6_k; router skew on) and evaluates a 48-token sequence. Its logits must be
    finite and non-degenerate: per-position std in [0.3, 5] (neither flat nor exploding), the
    argmax varying along the sequence, a median top-2 margin above 0.02, and no position where all
    logits are equal. Files of the same seed are the same model at different precisions: logits
    of f16 stay within NMSE 1e-3 of f32's, every quantized mix within 0.1 (tiny random MoE models
    are sensitive: one quantization-induced expert flip moves later positions; see
    test_qwen35moe_llamacpp.py), and the mean logit correlation with f32 stays above 0.95.
    llama.cpp's tokenizer sees our vocabulary as intended: the specials are single control tokens
    at the ids the metadata names, and text round-trips through tokenize/detokenize.
    Real vocabularies: reduced `small` models (real width and vocabulary, few layers and experts) of
    qwen3moe (151936 tokens) and qwen35moe (248320) load too, with the specials at Qwen's ids.
(2) gguf.GGUFReader reads the same files with metadata (keys in order, types, values) and tensor
    table (names, shapes, types, sizes, bytes at the offsets) identical to `ferry inspect --json`.
"""
import json
import os
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGUFValueType as VT
    import llama_cpp
except ImportError as e:  # the venv is still being populated
    print(f"SKIPPED: numpy/gguf/llama_cpp unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ferry, nmse, scratch  # noqa: E402

ARCHS = ("qwen3moe", "qwen35moe", "qwen3next")
QUANTS = ("f32", "f16", "q8_0", "q6_k", "q5_k_m", "q4_k_m")
SEED = 5
TEXT = b"The ferry leaves the harbour at seven; def route(hidden, top_k):\n    return 42"
FERRY_TYPE = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
              VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "string",
              VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64"}

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def synth(arch, quant):
    path = scratch(f"synth-{arch}-{quant}-s{SEED}.gguf")
    ferry("synth", "--arch", arch, "--preset", "tiny", "--quant", quant, "--seed", SEED,
          "--router-skew", "0.5", "-t", "2", "-q", "-o", path)
    return path


def llama_eval(path):
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=256, n_batch=256, n_threads=2,
                          verbose=False)
    tokens = llm.tokenize(TEXT, add_bos=False, special=True)
    tokens = (tokens * 4)[:48]
    llm.eval(tokens)
    logits = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    specials = {s: llm.tokenize(s.encode(), add_bos=False, special=True)
                for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")}
    text_tokens = llm.tokenize(TEXT, add_bos=False, special=False)
    round_trip = llm.detokenize(text_tokens)
    n_vocab = llm.n_vocab()
    del llm
    return logits, specials, round_trip, text_tokens, n_vocab


def check_logits(name, logits, n_vocab, live=None):
    """live: mask of the real (not [PADn]) tokens, whose logits carry the spread."""
    check(logits.shape[1] == n_vocab, f"{name}: logits width {logits.shape[1]} != n_vocab {n_vocab}")
    check(np.isfinite(logits).all(), f"{name}: non-finite logits")
    if live is not None:
        check(bool(np.all(live[logits.argmax(axis=1)])), f"{name}: a [PADn] token wins the argmax")
        logits = logits[:, live]
    std = logits.std(axis=1)
    check(std.min() > 0.3 and std.max() < 5.0, f"{name}: per-position logit std {std.min():.3f}..{std.max():.3f} "
          "outside [0.3, 5]")
    argmax = logits.argmax(axis=1)
    check(len(set(argmax.tolist())) >= 10, f"{name}: argmax takes only {len(set(argmax.tolist()))} values")
    top2 = np.sort(logits, axis=1)[:, -2:]
    margin = np.median(top2[:, 1] - top2[:, 0])
    check(margin > 0.02, f"{name}: median top-2 margin {margin:.4f} (flat logits)")
    return margin


def metadata_of(tokens_meta, path):
    """(key, type string, value-or-count) of `ferry inspect --json` vs gguf.GGUFReader."""
    info = json.loads(ferry("inspect", "--json", path).stdout)
    reader = gguf.GGUFReader(path)
    fields = [f for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    check(len(fields) == len(info["metadata"]), f"{path}: {len(fields)} keys in gguf vs {len(info['metadata'])} in inspect")
    for field, m in zip(fields, info["metadata"]):
        check(field.name == m["key"], f"{path}: key order {field.name} vs {m['key']}")
        if field.types[0] == VT.ARRAY:
            want_type = f"array[{FERRY_TYPE[field.types[1]]}]"
            contents = field.contents()
            if "count" in m:
                check(m["count"] == len(contents), f"{path}: {m['key']} count {m['count']} vs {len(contents)}")
            else:
                check(m["value"] == contents, f"{path}: {m['key']} = {m['value']} vs {contents}")
            tokens_meta[m["key"]] = contents
        else:
            want_type = FERRY_TYPE[field.types[0]]
            value = field.contents()
            if field.types[0] == VT.FLOAT32:
                value = float(np.float32(value))
                got = float(np.float32(m["value"]))
            else:
                got = m["value"]
            check(got == value, f"{path}: {m['key']} = {got!r} in inspect vs {value!r} in gguf")
        check(m["type"] == want_type, f"{path}: {m['key']} type {m['type']} vs {want_type}")

    check(len(reader.tensors) == info["tensor_count"] == len(info["tensors"]),
          f"{path}: tensor count {len(reader.tensors)} vs {info['tensor_count']}")
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    for t, it in zip(reader.tensors, info["tensors"]):
        check(t.name == it["name"], f"{path}: tensor order {t.name} vs {it['name']}")
        check([int(x) for x in t.shape] == it["shape"], f"{path}: {t.name} shape {list(t.shape)} vs {it['shape']}")
        check(t.tensor_type.name == it["type"], f"{path}: {t.name} type {t.tensor_type.name} vs {it['type']}")
        check(int(t.n_bytes) == it["bytes"], f"{path}: {t.name} bytes {t.n_bytes} vs {it['bytes']}")
        start = info["data_offset"] + it["offset"]
        check(int(t.data_offset) == start, f"{path}: {t.name} at {t.data_offset} vs {start}")
        same = np.array_equal(np.frombuffer(t.data.tobytes(), dtype=np.uint8), raw[start:start + it["bytes"]])
        check(same, f"{path}: {t.name} bytes differ between gguf and inspect's offset")
    return info


def check_real_vocab():
    for arch, layers, special_base in (("qwen3moe", "1", 151643), ("qwen35moe", "4", 248044)):
        path = scratch(f"synth-{arch}-small-reduced.gguf")
        ferry("synth", "--arch", arch, "--preset", "small", "--layers", layers, "--experts", "4",
              "--expert-used", "2", "--quant", "q4_k_m", "--seed", SEED, "-t", "2", "-q", "-o", path)
        name = f"{arch}/small-reduced"
        logits, specials, round_trip, _, n_vocab = llama_eval(path)
        check(n_vocab == (151936 if arch == "qwen3moe" else 248320), f"{name}: n_vocab {n_vocab}")
        types = np.array(gguf.GGUFReader(path).fields["tokenizer.ggml.token_type"].contents())
        check_logits(name, logits, n_vocab, live=types != 5)
        for i, s in enumerate(("<|endoftext|>", "<|im_start|>", "<|im_end|>")):
            check(specials[s] == [special_base + i], f"{name}: {s} -> {specials[s]}, want {special_base + i}")
        check(round_trip == TEXT, f"{name}: detokenize(tokenize(text)) = {round_trip!r}")
        print(f"{name}: vocabulary of {n_vocab} tokens, specials at {special_base}..{special_base + 2}")
        os.remove(path)


def main():
    for arch in ARCHS:
        ref = None
        for quant in QUANTS:
            path = synth(arch, quant)
            name = f"{arch}/{quant}"
            logits, specials, round_trip, text_tokens, n_vocab = llama_eval(path)
            margin = check_logits(name, logits, n_vocab)

            tokens_meta = {}
            info = metadata_of(tokens_meta, path)
            vocab = tokens_meta["tokenizer.ggml.tokens"]
            for s, ids in specials.items():
                check(len(ids) == 1 and vocab[ids[0]] == s, f"{name}: {s} tokenizes to {ids}")
            check(specials["<|im_end|>"][0] == info["tokenizer"]["eos_token_id"], f"{name}: eos is not <|im_end|>")
            check(round_trip == TEXT, f"{name}: detokenize(tokenize(text)) = {round_trip!r}")
            check(len(text_tokens) < len(TEXT) * 0.6, f"{name}: merges barely used ({len(text_tokens)} tokens "
                  f"for {len(TEXT)} bytes)")

            if quant == "f32":
                ref = logits
                print(f"{name}: logit std {logits.std(axis=1).mean():.3f}, median top-2 margin {margin:.3f}")
                continue
            e = nmse(logits, ref)
            corr = np.mean([np.corrcoef(a, b)[0, 1] for a, b in zip(logits, ref)])
            agree = float(np.mean(logits.argmax(1) == ref.argmax(1)))
            print(f"{name}: NMSE vs f32 {e:.2e}, mean correlation {corr:.4f}, argmax agreement {agree:.2f}")
            check(e < (1e-3 if quant == "f16" else 0.1), f"{name}: NMSE vs f32 {e:.3e}")
            check(corr > 0.95, f"{name}: mean logit correlation with f32 {corr:.3f}")
    check_real_vocab()
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all synth/llama.cpp checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
