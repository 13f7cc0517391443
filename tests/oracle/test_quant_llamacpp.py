#!/usr/bin/env python3
"""Ferry's quantization against llama.cpp's, on the same F32 weights.

Models: the tiny synthetic qwen3moe, qwen35moe and qwen3next (8 experts: llama.cpp's Mixtral rule
puts attn_v/attn_k in Q8_0) and 12-layer 4-expert qwen3moe and qwen35moe variants (the ordinary
rules: attn_v / attn_qkv / ffn_down in Q6_K on use_more_bits layers). Each F32 file is quantized
by llama.cpp (llama_model_quantize, no imatrix) to every file type `ferry synth --quant` knows
(common.LLAMA_FTYPE), and `ferry synth` writes the same mixes from the same seed directly. Then:
(a) types: every tensor of Ferry's file has the name, shape and type llama.cpp chose, and
    general.file_type is llama.cpp's.
(b) dequantization: every tensor of llama.cpp's Q8_0, Q4_K_M, Q5_K_M and Q6_K files of the three
    tiny models, dequantized by `ferry dump`, is bit-identical to the gguf package's dequantize
    (gguf.quants, llama.cpp's reference in numpy). (Ferry cannot compute with the other types yet.)
(c) quantization error: per type Ferry quantizes (all but Q2_K and Q3_K), the RMSE against the F32
    values of Ferry's quantizer and of llama.cpp's; Ferry's must be <= 1.05x llama.cpp's. The
    ratios, and the share of tensors whose quantized bytes are identical, are printed; for the
    types ported in runtime/synth/quantize_extra.hpp (Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, IQ4_NL,
    IQ4_XS) every tensor's bytes must be identical.
(d) random blocks (Q2_K, Q3_K, no quantizer in Ferry): dequantized by gguf, every tensor is finite,
    mean within 0.1 of its RMS, and RMS within 0.7-1.4x that of its F32 values.
(e) llama.cpp loads Ferry's file of each other mix (on one of the three tiny models, in turn) and
    gives finite logits of sensible spread for 16 tokens.
A 12-layer one-expert qwen35moe checks llama.cpp's ffn_down layer count for a few mixes.
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
ALL = tuple(LLAMA_FTYPE)
TINY = ("qwen3moe", "qwen35moe", "qwen3next")  # (e) runs each mix on one of them, in turn
MODELS = [  # (label, synth arguments, tiny model: checks (b) and (e) on it, file types)
    ("qwen3moe", ["--arch", "qwen3moe"], True, ALL),
    ("qwen35moe", ["--arch", "qwen35moe"], True, ALL),
    ("qwen3next", ["--arch", "qwen3next"], True, ALL),
    ("qwen3moe-12x4", ["--arch", "qwen3moe", "--layers", "12", "--experts", "4", "--expert-used", "2"], False, ALL),
    ("qwen35moe-12x4", ["--arch", "qwen35moe", "--layers", "12", "--experts", "4", "--expert-used", "2"], False, ALL),
    # One expert: llama.cpp counts ffn_down tensors (two per layer here) instead of reading the layer.
    ("qwen35moe-12x1", ["--arch", "qwen35moe", "--layers", "12", "--experts", "1", "--expert-used", "1"], False,
     ("q4_k_m", "q3_k_m", "iq4_xs", "mxfp4_moe")),
]

# Ferry dumps (b) only these mixes; the types of the others are either the same or not computable.
DUMP_QUANTS = ("q8_0", "q4_k_m", "q5_k_m", "q6_k")
PORTED = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4", "IQ4_NL", "IQ4_XS"}  # bit-exact ports
RANDOM_BLOCKS = {"Q2_K", "Q3_K"}

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


def shape(t):
    """ne without trailing 1s: llama.cpp writes ggml_n_dims dimensions (an expert tensor of one
    expert becomes 2-D), Ferry the tensor's own (3-D, as llama.cpp's loader creates it)."""
    ne = [int(d) for d in t.shape]
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return ne


def file_type(path):
    field = gguf.GGUFReader(path).fields["general.file_type"]
    return int(field.parts[field.data[0]][0])


def check_random_blocks(what, got, ref):
    """Random valid blocks: finite, zero-mean, about the RMS of the weights they stand for."""
    got = got.astype(np.float64)
    rms, ref_rms = np.sqrt(np.mean(got ** 2)), np.sqrt(np.mean(ref ** 2))
    check(bool(np.all(np.isfinite(got))), f"{what}: non-finite random-block values")
    check(abs(float(np.mean(got))) <= 0.1 * rms, f"{what}: random blocks have mean {np.mean(got):.3g}, RMS {rms:.3g}")
    check(0.7 * ref_rms <= rms <= 1.4 * ref_rms, f"{what}: random-block RMS {rms:.3g} vs the weights' {ref_rms:.3g}")


def check_llama_runs(name, path):
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=64, n_threads=2, verbose=False)
    tokens = list(range(40, 56))
    llm.eval(tokens)
    logits = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    del llm
    std = logits.std(axis=1)
    check(bool(np.isfinite(logits).all()), f"{name}: llama.cpp gives non-finite logits on Ferry's file")
    check(bool(np.all((std > 0.1) & (std < 10))), f"{name}: llama.cpp logit spread {std.min():.3g}..{std.max():.3g}")
    print(f"{name}: llama.cpp runs Ferry's file (logit std {std.min():.2f}..{std.max():.2f})")


def ferry_dump(path, name):
    out = scratch("dump.npy")
    r = subprocess.run([FERRY, "dump", "-m", path, "-t", name, "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ferry dump -m {path} -t {name} failed: {r.stderr.strip()}")
    return np.load(out).reshape(-1)


def main():
    sq_err = defaultdict(lambda: [0.0, 0.0, 0])  # type -> [ferry sum sq, llama sum sq, n values]
    n_random = defaultdict(int)                    # type -> random-block tensors checked
    identical = defaultdict(lambda: [0, 0])      # type -> [identical tensors, tensors]
    n_dumped = 0
    for label, args, tiny, quants in MODELS:
        f32_path = synth(label, args, "f32")
        f32 = tensors(f32_path)
        values = {n: np.asarray(t.data, dtype=np.float32).reshape(-1) for n, t in f32.items()}
        for quant in quants:
            name = f"{label}/{quant}"
            llama_path = scratch(f"quant-{label}-{quant}-llama.gguf")
            llama_quantize(f32_path, llama_path, quant)
            ours_path = synth(label, args, quant)
            llama_t, ours_t = tensors(llama_path), tensors(ours_path)

            # (a) the same tensors with the same types, the same general.file_type
            check(sorted(llama_t) == sorted(ours_t), f"{name}: tensor sets differ: "
                  f"{sorted(set(llama_t) ^ set(ours_t))[:5]}")
            check(file_type(ours_path) == file_type(llama_path) == LLAMA_FTYPE[quant],
                  f"{name}: general.file_type {file_type(ours_path)}, llama.cpp's {file_type(llama_path)}")
            for n, lt in llama_t.items():
                ot = ours_t.get(n)
                if ot is None:
                    continue
                check(shape(ot) == shape(lt), f"{name}: {n} shape {shape(ot)} vs llama.cpp {shape(lt)}")
                check(ot.tensor_type == lt.tensor_type, f"{name}: {n} is {ot.tensor_type.name}, llama.cpp chose "
                      f"{lt.tensor_type.name}")

            # (b) ferry dump == gguf dequantize, bit for bit, for every tensor of llama.cpp's file
            for n, lt in llama_t.items() if tiny and quant in DUMP_QUANTS else ():
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

            # (c) quantization error against the F32 weights, per type; (d) random blocks
            for n, lt in llama_t.items():
                ot = ours_t.get(n)
                if ot is None or lt.tensor_type in (QT.F32, QT.F16) or ot.tensor_type != lt.tensor_type:
                    continue
                ref = values[n].astype(np.float64)
                if lt.tensor_type.name in RANDOM_BLOCKS:
                    check_random_blocks(f"{name}: {n}", dequant(ot), ref)
                    n_random[lt.tensor_type.name] += 1
                    continue
                acc = sq_err[lt.tensor_type.name]
                acc[0] += float(np.sum((dequant(ot) - ref) ** 2))
                acc[1] += float(np.sum((dequant(lt) - ref) ** 2))
                acc[2] += ref.size
                ident = identical[lt.tensor_type.name]
                same = np.array_equal(np.asarray(ot.data).view(np.uint8).reshape(-1),
                                      np.asarray(lt.data).view(np.uint8).reshape(-1))
                ident[0] += int(same)
                ident[1] += 1
                if lt.tensor_type.name in PORTED:
                    check(same, f"{name}: {n} ({lt.tensor_type.name}): Ferry's bytes differ from llama.cpp's")
            # (e) llama.cpp runs Ferry's file of the mixes Ferry cannot compute with yet
            if tiny and quant not in DUMP_QUANTS and ALL.index(quant) % 3 == TINY.index(label):
                check_llama_runs(name, ours_path)
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
    print(f"random blocks checked: {dict(sorted(n_random.items()))}")
    check({"Q8_0", "Q4_K", "Q5_K", "Q6_K"} | PORTED <= set(sq_err), f"types covered: {sorted(sq_err)}")
    check(RANDOM_BLOCKS <= set(n_random), f"random-block types covered: {sorted(n_random)}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all quantization checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
