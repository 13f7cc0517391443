#!/usr/bin/env python3
"""GGUF compatibility with the reference implementations.

(a) A file written by the `gguf` package (every value type, F32/F16/Q8_0 tensors) is read by
    `ferry inspect --json` with identical metadata and tensor table.
(b) `ferry gguf-copy` of it is read back by gguf.GGUFReader with identical metadata, tensor infos
    and tensor bytes (and is byte-identical to the source); --set/--drop edits land as asked.
(c) llama.cpp's own GGUF parser (libggml-base from llama-cpp-python, through ctypes) accepts the
    copy and sees the same keys, values and tensors.
(d) A corrupt file makes `ferry inspect` fail with one error line and exit 1.
Runs for alignment 32 and 64.
"""
import ctypes
import importlib.util
import json
import os
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFValueType as VT
except ImportError as e:  # the venv is still being populated
    print(f"SKIPPED: gguf package unavailable ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ferry, scratch  # noqa: E402

FERRY_TYPE = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
              VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "string",
              VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64"}
NP_TYPE = {VT.UINT8: np.uint8, VT.INT8: np.int8, VT.UINT16: np.uint16, VT.INT16: np.int16,
           VT.UINT32: np.uint32, VT.INT32: np.int32, VT.FLOAT32: np.float32, VT.BOOL: np.bool_,
           VT.UINT64: np.uint64, VT.INT64: np.int64, VT.FLOAT64: np.float64}
ARCH = "testarch"


def canonical(vtype, value):
    """The exact value a reader must return for `value` stored as `vtype` (floats rounded to f32)."""
    if vtype == VT.FLOAT32:
        return float(np.float32(value))
    if vtype == VT.BOOL:
        return bool(value)
    if vtype in (VT.FLOAT64,):
        return float(value)
    if vtype == VT.STRING:
        return value
    return int(value)


def build_metadata(rng):
    """(key, type, sub_type, value) in file order, every scalar and array type."""
    f32 = [float(x) for x in rng.standard_normal(5).astype(np.float32)]
    md = [
        (f"{ARCH}.u8", VT.UINT8, None, 201),
        (f"{ARCH}.i8", VT.INT8, None, -117),
        (f"{ARCH}.u16", VT.UINT16, None, 65000),
        (f"{ARCH}.i16", VT.INT16, None, -31000),
        (f"{ARCH}.u32", VT.UINT32, None, 4_000_000_001),
        (f"{ARCH}.i32", VT.INT32, None, -2_000_000_003),
        (f"{ARCH}.u64", VT.UINT64, None, 2**64 - 5),
        (f"{ARCH}.i64", VT.INT64, None, -(2**63) + 9),
        (f"{ARCH}.f32", VT.FLOAT32, None, f32[0]),
        (f"{ARCH}.f64", VT.FLOAT64, None, float(rng.standard_normal()) * 1e200),
        (f"{ARCH}.bool_t", VT.BOOL, None, True),
        (f"{ARCH}.bool_f", VT.BOOL, None, False),
        (f"{ARCH}.str", VT.STRING, None, "héllo ✓ <|im_start|>"),
        (f"{ARCH}.str_empty", VT.STRING, None, ""),
        ("general.name", VT.STRING, None, "ferry round-trip test"),
        ("tokenizer.ggml.model", VT.STRING, None, "gpt2"),
        ("tokenizer.ggml.pre", VT.STRING, None, "qwen2"),
        ("tokenizer.ggml.tokens", VT.ARRAY, VT.STRING, ["a", "b", "", "Ġthe", "<|endoftext|>"]),
        ("tokenizer.ggml.eos_token_id", VT.UINT32, None, 4),
        (f"{ARCH}.arr_f32", VT.ARRAY, VT.FLOAT32, f32[1:]),
        (f"{ARCH}.arr_f64", VT.ARRAY, VT.FLOAT64, [1e-300, -2.5, 1 / 3]),
        (f"{ARCH}.arr_bool", VT.ARRAY, VT.BOOL, [True, False, True, True]),
        (f"{ARCH}.arr_str", VT.ARRAY, VT.STRING, ["x", "", "ü"]),
        (f"{ARCH}.arr_long", VT.ARRAY, VT.UINT32, [int(x) for x in rng.integers(0, 2**32, 100)]),
    ]
    ranges = {VT.UINT8: (0, 2**8), VT.INT8: (-(2**7), 2**7), VT.UINT16: (0, 2**16),
              VT.INT16: (-(2**15), 2**15), VT.UINT32: (0, 2**32), VT.INT32: (-(2**31), 2**31),
              VT.UINT64: (0, 2**64), VT.INT64: (-(2**63), 2**63)}
    for t, (lo, hi) in ranges.items():
        vals = [lo, hi - 1] + [int(x) for x in rng.integers(lo // 2, hi // 2, 3, dtype=np.int64 if lo < 0 else np.uint64)]
        md.append((f"{ARCH}.arr_{FERRY_TYPE[t]}", VT.ARRAY, t, vals))
    return md


def build_tensors(rng):
    """name → (ggml type, ne, raw bytes)."""
    f32 = rng.standard_normal((3, 7)).astype(np.float32)            # ne [7, 3]
    f16 = rng.standard_normal((2, 16)).astype(np.float16)           # ne [16, 2]
    q8 = rng.integers(0, 256, (4, 2, 2 * 34), dtype=np.uint8)       # ne [64, 2, 4] as Q8_0 bytes
    norm = rng.standard_normal(5).astype(np.float32)                # ne [5]
    return {
        "token_embd.weight": (QT.F32, [7, 3], f32),
        "blk.0.attn_q.weight": (QT.F16, [16, 2], f16),
        "blk.0.ffn_up_exps.weight": (QT.Q8_0, [64, 2, 4], q8),
        "output_norm.weight": (QT.F32, [5], norm),
    }


def write_source(path, alignment, md, tensors):
    w = gguf.GGUFWriter(path, ARCH)
    if alignment != 32:
        w.add_custom_alignment(alignment)
    for key, vtype, sub, value in md:
        w.add_key_value(key, value, vtype, sub_type=sub)
    for name, (qt, _ne, arr) in tensors.items():
        if qt == QT.Q8_0:
            w.add_tensor(name, arr, raw_dtype=qt)
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def expected_metadata(alignment, md):
    """[(key, ferry type string, canonical value)] in file order, as the gguf writer emits them."""
    out = [("general.architecture", "string", ARCH)]
    if alignment != 32:
        out.append(("general.alignment", "u32", alignment))
    for key, vtype, sub, value in md:
        if vtype == VT.ARRAY:
            out.append((key, f"array[{FERRY_TYPE[sub]}]", [canonical(sub, v) for v in value]))
        else:
            out.append((key, FERRY_TYPE[vtype], canonical(vtype, value)))
    return out


def reader_metadata(path):
    """The same list as seen by gguf.GGUFReader (skipping its synthetic GGUF.* header fields)."""
    r = gguf.GGUFReader(path)
    out = []
    for field in r.fields.values():
        if field.name.startswith("GGUF."):
            continue
        main = field.types[0]
        if main == VT.ARRAY:
            sub = field.types[-1] if len(field.types) > 1 else VT.INT32  # empty arrays
            vals = field.contents() if field.data else []
            out.append((field.name, f"array[{FERRY_TYPE[sub]}]", [canonical(sub, v) for v in vals]))
        else:
            out.append((field.name, FERRY_TYPE[main], canonical(main, field.contents())))
    return r, out


def check_equal(what, got, want):
    if got != want:
        raise AssertionError(f"{what}:\n  got  {got!r}\n  want {want!r}")


def check_inspect(path, alignment, md, tensors):
    j = json.loads(ferry("inspect", path, "--json").stdout)
    check_equal("version", j["version"], 3)
    check_equal("alignment", j["alignment"], alignment)
    check_equal("architecture", j["architecture"], ARCH)
    check_equal("file_size", j["file_size"], os.path.getsize(path))
    want = expected_metadata(alignment, md)
    check_equal("metadata keys", [e["key"] for e in j["metadata"]], [k for k, _, _ in want])
    for e, (key, tstr, value) in zip(j["metadata"], want):
        check_equal(f"type of {key}", e["type"], tstr)
        if key in ("tokenizer.ggml.tokens", f"{ARCH}.arr_long"):  # summarised, never dumped
            check_equal(f"count of {key}", e.get("count"), len(value))
            assert "value" not in e, f"{key} was dumped"
        else:
            check_equal(f"value of {key}", e["value"], value)
    check_equal("hyperparameters", j["hyperparameters"][f"{ARCH}.u64"], 2**64 - 5)
    assert "tokenizer.ggml.pre" not in j["hyperparameters"]
    check_equal("tokenizer", j["tokenizer"],
                {"model": "gpt2", "pre": "qwen2", "n_tokens": 5, "eos_token_id": 4})

    r = gguf.GGUFReader(path)
    check_equal("tensor count", j["tensor_count"], len(r.tensors))
    for jt, rt in zip(j["tensors"], r.tensors):
        check_equal("tensor name", jt["name"], rt.name)
        check_equal(f"{rt.name} type", jt["type"], rt.tensor_type.name)
        check_equal(f"{rt.name} shape", jt["shape"], [int(x) for x in rt.shape])
        check_equal(f"{rt.name} shape (source)", jt["shape"], tensors[rt.name][1])
        check_equal(f"{rt.name} offset", jt["offset"] + j["data_offset"], rt.data_offset)
        check_equal(f"{rt.name} bytes", jt["bytes"], int(rt.n_bytes))
    check_equal("expert bytes", j["expert_bytes"], 4 * 2 * 68)
    check_equal("non-expert bytes", j["non_expert_bytes"], 7 * 3 * 4 + 16 * 2 * 2 + 5 * 4)
    check_equal("per-expert bytes", j["per_expert"]["typical_bytes"], 2 * 68)
    check_equal("experts per layer", j["per_expert"]["experts_per_layer"], 4)
    check_equal("bytes by type", j["bytes_by_type"],
                {"F32": {"tensors": 2, "bytes": 7 * 3 * 4 + 5 * 4}, "F16": {"tensors": 1, "bytes": 64},
                 "Q8_0": {"tensors": 1, "bytes": 4 * 2 * 68}})
    check_equal("largest", [t["name"] for t in j["largest_tensors"]],
                ["blk.0.ffn_up_exps.weight", "token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"])
    text = ferry("inspect", path).stdout
    for needle in ("architecture  testarch", "tokenizer     \"gpt2\", pre \"qwen2\", 5 tokens",
                   "per expert", "blk.0.ffn_up_exps.weight", "(5 entries)"):
        assert needle in text, f"'{needle}' missing from inspect output:\n{text}"


def check_copy(src, dst, alignment, md):
    ferry("gguf-copy", src, dst)
    _, want = reader_metadata(src)
    r, got = reader_metadata(dst)
    check_equal("copied metadata", got, want)
    check_equal("copied metadata vs source", got, expected_metadata(alignment, md))
    rs = gguf.GGUFReader(src)
    check_equal("copied tensor count", len(r.tensors), len(rs.tensors))
    for a, b in zip(r.tensors, rs.tensors):
        check_equal("tensor info", (a.name, a.tensor_type, list(a.shape), int(a.n_bytes), a.data_offset),
                    (b.name, b.tensor_type, list(b.shape), int(b.n_bytes), b.data_offset))
        assert a.data.tobytes() == b.data.tobytes(), f"tensor bytes of {a.name} differ"
    with open(src, "rb") as f1, open(dst, "rb") as f2:
        assert f1.read() == f2.read(), "gguf-copy output is not byte-identical to the gguf package's file"
    assert not os.path.exists(dst + ".tmp")


def check_edit(src, dst):
    ferry("gguf-copy", src, dst, "--set", f"{ARCH}.u32=u32:7", "--set", "new.flag=bool:true",
          "--set", "new.scale=f32:0.1", "--set", "new.name=str:a=b:c", "--drop", f"{ARCH}.i8")
    _, got = reader_metadata(dst)
    d = {k: (t, v) for k, t, v in got}
    check_equal("--set replaced", d[f"{ARCH}.u32"], ("u32", 7))
    check_equal("--set added bool", d["new.flag"], ("bool", True))
    check_equal("--set added f32", d["new.scale"], ("f32", float(np.float32(0.1))))
    check_equal("--set added str", d["new.name"], ("string", "a=b:c"))
    assert f"{ARCH}.i8" not in d, "--drop did not remove the key"
    keys = [k for k, _, _ in got]
    assert keys.index(f"{ARCH}.u32") < keys.index(f"{ARCH}.u64"), "--set moved a replaced key"
    r = ferry("gguf-copy", src, dst, "--set", "x=u8:300", check=False)
    assert r.returncode != 0 and "out of range" in r.stderr, r.stderr
    r = ferry("gguf-copy", src, dst, "--drop", "no.such.key", check=False)
    assert r.returncode != 0 and "no.such.key" in r.stderr, r.stderr


def load_ggml_base():
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "lib", "libggml-base.so")
    if not os.path.exists(path):
        return None
    lib = ctypes.CDLL(path)
    P, I64, SZ = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t

    class InitParams(ctypes.Structure):
        _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]

    sig = {
        "gguf_init_from_file": (P, [ctypes.c_char_p, InitParams]), "gguf_free": (None, [P]),
        "gguf_get_version": (ctypes.c_uint32, [P]), "gguf_get_alignment": (SZ, [P]),
        "gguf_get_data_offset": (SZ, [P]), "gguf_get_n_kv": (I64, [P]),
        "gguf_get_key": (ctypes.c_char_p, [P, I64]), "gguf_get_kv_type": (ctypes.c_int, [P, I64]),
        "gguf_get_arr_type": (ctypes.c_int, [P, I64]), "gguf_get_arr_n": (SZ, [P, I64]),
        "gguf_get_arr_data": (P, [P, I64]), "gguf_get_arr_str": (ctypes.c_char_p, [P, I64, SZ]),
        "gguf_get_val_data": (P, [P, I64]), "gguf_get_val_str": (ctypes.c_char_p, [P, I64]),
        "gguf_get_n_tensors": (I64, [P]), "gguf_get_tensor_name": (ctypes.c_char_p, [P, I64]),
        "gguf_get_tensor_offset": (SZ, [P, I64]), "gguf_get_tensor_type": (ctypes.c_int, [P, I64]),
        "gguf_get_tensor_size": (SZ, [P, I64]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    lib.InitParams = InitParams
    return lib


def check_llama_cpp(path, alignment):
    lib = load_ggml_base()
    if lib is None:
        print("llama.cpp check skipped: llama-cpp-python's libggml-base.so not found")
        return
    ctx = lib.gguf_init_from_file(path.encode(), lib.InitParams(True, None))
    assert ctx, f"llama.cpp's gguf_init_from_file rejected {path}"
    try:
        check_equal("llama.cpp version", lib.gguf_get_version(ctx), 3)
        check_equal("llama.cpp alignment", lib.gguf_get_alignment(ctx), alignment)
        got = []
        for i in range(lib.gguf_get_n_kv(ctx)):
            key = lib.gguf_get_key(ctx, i).decode()
            t = VT(lib.gguf_get_kv_type(ctx, i))
            if t == VT.ARRAY:
                sub = VT(lib.gguf_get_arr_type(ctx, i))
                n = lib.gguf_get_arr_n(ctx, i)
                if sub == VT.STRING:
                    vals = [lib.gguf_get_arr_str(ctx, i, k).decode() for k in range(n)]
                elif n == 0:
                    vals = []
                else:
                    dt = np.dtype(NP_TYPE[sub])
                    buf = ctypes.string_at(lib.gguf_get_arr_data(ctx, i), n * dt.itemsize)
                    vals = [canonical(sub, v) for v in np.frombuffer(buf, dt).tolist()]
                got.append((key, f"array[{FERRY_TYPE[sub]}]", vals))
            elif t == VT.STRING:
                got.append((key, "string", lib.gguf_get_val_str(ctx, i).decode()))
            else:
                dt = np.dtype(NP_TYPE[t])
                buf = ctypes.string_at(lib.gguf_get_val_data(ctx, i), dt.itemsize)
                got.append((key, FERRY_TYPE[t], canonical(t, np.frombuffer(buf, dt)[0].item())))
        _, want = reader_metadata(path)
        check_equal("llama.cpp metadata", got, want)
        r = gguf.GGUFReader(path)
        check_equal("llama.cpp tensor count", lib.gguf_get_n_tensors(ctx), len(r.tensors))
        data_offset = lib.gguf_get_data_offset(ctx)
        for i, rt in enumerate(r.tensors):
            check_equal("llama.cpp tensor", (lib.gguf_get_tensor_name(ctx, i).decode(),
                                             lib.gguf_get_tensor_type(ctx, i),
                                             data_offset + lib.gguf_get_tensor_offset(ctx, i),
                                             lib.gguf_get_tensor_size(ctx, i)),
                        (rt.name, int(rt.tensor_type), rt.data_offset, int(rt.n_bytes)))
    finally:
        lib.gguf_free(ctx)
    print(f"llama.cpp's parser agrees on {path}")


def check_corrupt(src, bad):
    with open(src, "rb") as f:
        data = bytearray(f.read())
    last = gguf.GGUFReader(src).tensors[-1]
    with open(bad, "wb") as f:  # cut inside the last tensor's data (not just its padding)
        f.write(data[: last.data_offset + 1])
    r = ferry("inspect", bad, check=False)
    check_equal("exit code on a truncated file", r.returncode, 1)
    lines = r.stderr.strip().splitlines()
    check_equal("error lines", len(lines), 1)
    assert lines[0].startswith("ferry inspect: error: ") and "past end of file" in lines[0], lines[0]


def main():
    for alignment in (32, 64):
        rng = np.random.default_rng(1000 + alignment)
        md, tensors = build_metadata(rng), build_tensors(rng)
        src = scratch(f"gguf_rt_src_{alignment}.gguf")
        dst = scratch(f"gguf_rt_copy_{alignment}.gguf")
        write_source(src, alignment, md, tensors)
        check_inspect(src, alignment, md, tensors)
        check_copy(src, dst, alignment, md)
        check_llama_cpp(dst, alignment)
        check_edit(src, scratch(f"gguf_rt_edit_{alignment}.gguf"))
        check_corrupt(src, scratch(f"gguf_rt_bad_{alignment}.gguf"))
        print(f"alignment {alignment}: ok")
    print("PASSED")


if __name__ == "__main__":
    main()
