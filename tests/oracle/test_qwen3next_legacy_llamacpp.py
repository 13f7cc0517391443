#!/usr/bin/env python3
"""qwen3next with the legacy fused DeltaNet input projection `ssm_in`.

Older qwen3next GGUFs carry, instead of attn_qkv + attn_gate, one ssm_in whose rows are grouped per
key head g: [q_g (S) | k_g (S) | v of value heads g*r.. (r*S) | z of the same (r*S)]. This test
rewrites a tiny synthetic qwen3next into that layout with the gguf package and checks:
  - llama.cpp gives the same logits for both layouts (the rewrite is the layout llama.cpp reads);
  - Ferry's logits on the legacy file equal Ferry's on the split file exactly (the loader only
    regroups whole rows), at F32 and after llama.cpp's Q8_0 quantization of both files;
  - Ferry vs llama.cpp on the legacy F32 file: NMSE <= 1e-5.
"""
import os
import sys

try:
    import numpy as np
    import gguf
    import llama_cpp
except ImportError as e:  # the venv is still being populated
    print(f"SKIPPED: numpy/gguf/llama_cpp unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ferry, llama_quantize, nmse, scratch  # noqa: E402

ARCH = "qwen3next"


def field_value(reader, name):
    return reader.fields[name].contents()


def write_legacy(src, dst):
    r = gguf.GGUFReader(src)
    S = field_value(r, f"{ARCH}.ssm.state_size")
    hk = field_value(r, f"{ARCH}.ssm.group_count")
    hv = field_value(r, f"{ARCH}.ssm.time_step_rank")
    rep = hv // hk
    w = gguf.GGUFWriter(dst, ARCH)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), f.types[0], sub)
    tensors = {t.name: t for t in r.tensors}
    n_legacy = 0
    for t in r.tensors:
        if t.name.endswith("attn_gate.weight"):
            continue
        if t.name.endswith("attn_qkv.weight"):
            prefix = t.name[: -len("attn_qkv.weight")]
            qkv = np.array(t.data)                                  # (2*hk*S + hv*S, n_embd)
            z = np.array(tensors[prefix + "attn_gate.weight"].data)  # (hv*S, n_embd)
            q, k, v = qkv[: hk * S], qkv[hk * S: 2 * hk * S], qkv[2 * hk * S:]
            groups = []
            for g in range(hk):
                groups += [q[g * S:(g + 1) * S], k[g * S:(g + 1) * S],
                           v[g * rep * S:(g + 1) * rep * S], z[g * rep * S:(g + 1) * rep * S]]
            w.add_tensor(prefix + "ssm_in.weight", np.ascontiguousarray(np.concatenate(groups)))
            n_legacy += 1
            continue
        w.add_tensor(t.name, np.array(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return n_legacy


def llama_logits(path, tokens):
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=256, n_batch=256, n_threads=2,
                          verbose=False)
    llm.eval(tokens)
    out = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    del llm
    return out


def ferry_logits(path, tokens, tag):
    out = scratch(f"legacy-{tag}.npy")
    ferry("logits", "-m", path, "--tokens", ",".join(map(str, tokens)), "-o", out, "-t", "2")
    return np.load(out)


def main():
    split = scratch("q3n-split-f32.gguf")
    legacy = scratch("q3n-legacy-f32.gguf")
    ferry("synth", "--arch", ARCH, "--preset", "tiny", "--quant", "f32", "--seed", "5", "-q", "-o", split)
    n_legacy = write_legacy(split, legacy)
    print(f"rewrote {n_legacy} DeltaNet blocks to ssm_in")
    tokens = [int(t) for t in np.random.default_rng(99).integers(0, 700, 100)]
    fails = []
    if n_legacy == 0:
        fails.append("no DeltaNet block was rewritten")

    e = nmse(llama_logits(legacy, tokens), llama_logits(split, tokens))
    print(f"llama.cpp legacy vs split: NMSE {e:.3e}")
    if not e <= 1e-9:
        fails.append(f"llama.cpp reads the rewritten file differently (NMSE {e:.3e})")

    files = {"f32": (split, legacy)}
    q_split, q_legacy = scratch("q3n-split-q8.gguf"), scratch("q3n-legacy-q8.gguf")
    llama_quantize(split, q_split, "q8_0")
    llama_quantize(legacy, q_legacy, "q8_0")
    files["q8_0"] = (q_split, q_legacy)
    for label, (a, b) in files.items():
        la, lb = ferry_logits(a, tokens, f"{label}-split"), ferry_logits(b, tokens, f"{label}-legacy")
        same = np.array_equal(la, lb)
        print(f"ferry {label} legacy vs split: identical {same}")
        if not same:
            fails.append(f"ferry {label}: legacy and split logits differ (NMSE {nmse(lb, la):.3e})")

    e = nmse(ferry_logits(legacy, tokens, "f32-legacy"), llama_logits(legacy, tokens))
    print(f"ferry vs llama.cpp, legacy F32: NMSE {e:.3e}")
    if not e <= 1e-5:
        fails.append(f"ferry vs llama.cpp on the legacy file: NMSE {e:.3e} > 1e-5")

    for f in fails:
        print("FAIL:", f)
    for p in (split, legacy, q_split, q_legacy):
        os.remove(p)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
