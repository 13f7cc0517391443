#!/usr/bin/env python3
"""Ferry's quantization against llama.cpp's, on the same F32 weights.

Models: the tiny synthetic qwen3moe, qwen35moe and qwen3next (8 experts: llama.cpp's Mixtral rule
puts attn_v/attn_k in Q8_0) and 12-layer 4-expert qwen3moe and qwen35moe variants (the ordinary
rules: attn_v / attn_qkv / ffn_down in Q6_K on use_more_bits layers). Each F32 file is quantized
by llama.cpp (llama_model_quantize, no imatrix) to Q8_0, Q4_K_M, Q5_K_M and Q6_K, and `ferry synth`
writes the same mixes from the same seed directly. Then:
(a) types: every tensor of Ferry's file has the name, shape and type llama.cpp chose.
(b) dequantization: every tensor of llama.cpp's files of the three tiny models, dequantized by
    `ferry dump`, is bit-identical to the gguf package's dequantize (gguf.quants, llama.cpp's
    reference in numpy).
(c) quantization error: per type, the RMSE against the F32 values of Ferry's quantizer and of
    llama.cpp's; Ferry's must be <= 1.05x llama.cpp's. The ratios, and the share of tensors whose
    quantized bytes are identical, are printed.
"""
import ctypes
import os
import subprocess
import sys
from collections import defaultdict

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as QT
    import llama_cpp
except ImportError as e:  # the venv is still being populated
    print(f"SKIPPED: numpy/gguf/llama_cpp unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FERRY, LLAMA_FTYPE, ferry, llama_quantize, scratch  # noqa: E402

SEED = 3
MODELS = [  # (label, synth arguments, check (b) on it)
    ("qwen3moe", ["--arch", "qwen3moe"], True),
    ("qwen35moe", ["--arch", "qwen35moe"], True),
    ("qwen3next", ["--arch", "qwen3next"], True),
    ("qwen3moe-12x4", ["--arch", "qwen3moe", "--layers", "12", "--experts", "4", "--expert-used", "2"], False),
    ("qwen35moe-12x4", ["--arch", "qwen35moe", "--layers", "12", "--experts", "4", "--expert-used", "2"], False),
]

failures = []

# llama_model_quantize logs every tensor; keep the test output readable.
_quiet_log = llama_cpp.llama_log_callback(lambda level, text, user_data: None)
llama_cpp.llama_log_set(_quiet_log, ctypes.c_void_p(0))


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def synth(label, args, quant):
    path = scratch(f"quant-{label}-{quant}.gguf")
    ferry("synth", *args, "--preset", "tiny", "--quant", quant, "--seed", SEED, "-t", "2", "-q", "-o", path)
    return path


def tensors(path):
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def dequant(t):
    if t.tensor_type == QT.F32:
        return np.asarray(t.data, dtype=np.float32).reshape(-1)
    return gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)


def ferry_dump(path, name):
    out = scratch("dump.npy")
    r = subprocess.run([FERRY, "dump", "-m", path, "-t", name, "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ferry dump -m {path} -t {name} failed: {r.stderr.strip()}")
    return np.load(out).reshape(-1)


def main():
    sq_err = defaultdict(lambda: [0.0, 0.0, 0])  # type -> [ferry sum sq, llama sum sq, n values]
    identical = defaultdict(lambda: [0, 0])      # type -> [identical tensors, tensors]
    n_dumped = 0
    for label, args, check_dump in MODELS:
        f32_path = synth(label, args, "f32")
        f32 = tensors(f32_path)
        values = {n: np.asarray(t.data, dtype=np.float32).reshape(-1) for n, t in f32.items()}
        for quant in LLAMA_FTYPE:
            name = f"{label}/{quant}"
            llama_path = scratch(f"quant-{label}-{quant}-llama.gguf")
            llama_quantize(f32_path, llama_path, quant)
            ours_path = synth(label, args, quant)
            llama_t, ours_t = tensors(llama_path), tensors(ours_path)

            # (a) the same tensors with the same types
            check(sorted(llama_t) == sorted(ours_t), f"{name}: tensor sets differ: "
                  f"{sorted(set(llama_t) ^ set(ours_t))[:5]}")
            for n, lt in llama_t.items():
                ot = ours_t.get(n)
                if ot is None:
                    continue
                check(list(ot.shape) == list(lt.shape), f"{name}: {n} shape {list(ot.shape)} vs llama.cpp {list(lt.shape)}")
                check(ot.tensor_type == lt.tensor_type, f"{name}: {n} is {ot.tensor_type.name}, llama.cpp chose "
                      f"{lt.tensor_type.name}")

            # (b) ferry dump == gguf dequantize, bit for bit, for every tensor of llama.cpp's file
            for n, lt in llama_t.items() if check_dump else ():
                want = dequant(lt)
                got = ferry_dump(llama_path, n)
                n_dumped += 1
                same = got.dtype == np.float32 and got.shape == want.shape and \
                    np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))
                if not same and got.shape == want.shape:
                    bad = int(np.sum(got.view(np.uint32) != want.astype(np.float32).view(np.uint32)))
                    check(False, f"{name}: ferry dump {n} ({lt.tensor_type.name}) differs from gguf in {bad} values")
                else:
                    check(same, f"{name}: ferry dump {n} shape/dtype {got.shape}/{got.dtype} vs {want.shape}")

            # (c) quantization error against the F32 weights, per type
            for n, lt in llama_t.items():
                ot = ours_t.get(n)
                if ot is None or lt.tensor_type in (QT.F32, QT.F16) or ot.tensor_type != lt.tensor_type:
                    continue
                ref = values[n].astype(np.float64)
                acc = sq_err[lt.tensor_type.name]
                acc[0] += float(np.sum((dequant(ot) - ref) ** 2))
                acc[1] += float(np.sum((dequant(lt) - ref) ** 2))
                acc[2] += ref.size
                ident = identical[lt.tensor_type.name]
                ident[0] += int(np.array_equal(np.asarray(ot.data).view(np.uint8), np.asarray(lt.data).view(np.uint8)))
                ident[1] += 1
            print(f"{name}: types match llama.cpp for {len(llama_t)} tensors")

    print(f"ferry dump vs gguf dequantize: {n_dumped} tensors compared")
    print("quantization RMSE vs the F32 weights (Ferry / llama.cpp):")
    for t, (ours, theirs, n) in sorted(sq_err.items()):
        r_ours, r_theirs = np.sqrt(ours / n), np.sqrt(theirs / n)
        ratio = r_ours / r_theirs
        ident, total = identical[t]
        print(f"  {t:5s}: ferry {r_ours:.6e}  llama.cpp {r_theirs:.6e}  ratio {ratio:.4f}  "
              f"identical bytes in {ident}/{total} tensors")
        check(ratio <= 1.05, f"{t}: Ferry's quantization RMSE is {ratio:.3f}x llama.cpp's")
    check({"Q8_0", "Q4_K", "Q5_K", "Q6_K"} <= set(sq_err), f"types covered: {sorted(sq_err)}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all quantization checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
