"""Shared helpers for oracle tests: paths, running ferry, NMSE."""
import os
import subprocess
import sys

import numpy as np

FERRY = os.environ.get("FERRY_BIN", os.path.join(os.environ.get("FERRY_BUILD_DIR", "build"), "ferry"))
SCRATCH = os.environ.get("FERRY_SCRATCH", "/tmp/ferry-oracle")
SOURCE = os.environ.get("FERRY_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.makedirs(SCRATCH, exist_ok=True)


def ferry(*args, check=True, **kw):
    """Runs the ferry binary; returns CompletedProcess (text)."""
    cmd = [FERRY, *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(cmd)}")
    return r


def nmse(a, ref):
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.sum((a - ref) ** 2) / max(np.sum(ref ** 2), 1e-300))


def scratch(name):
    return os.path.join(SCRATCH, name)


def llama_decode_logits(path, tokens):
    """llama.cpp's logits for `tokens` evaluated one at a time (decode), float64 (n, n_vocab)."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=512, n_threads=2, verbose=False)
    rows = []
    for t in tokens:
        llm.eval([t])
        rows.append(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64))
    del llm
    return np.array(rows)


# llama.cpp's file types for llama_model_quantize (no imatrix: what llama-quantize does by default):
# LLAMA_FTYPE_* of llama.h, by llama-quantize's name in lower case (`ferry synth --quant`).
LLAMA_FTYPE = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k_s": 11,
               "q3_k_m": 12, "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17,
               "q6_k": 18, "iq4_nl": 25, "iq4_xs": 30, "mxfp4_moe": 38}


def llama_quantize(src, dst, quant):
    """Quantizes GGUF src to dst with llama.cpp's own quantizer, its per-tensor lines silenced."""
    import ctypes
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = LLAMA_FTYPE[quant]
    p.nthread = 2
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]  # llama.cpp prints a line per tensor
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {src} -> {dst} ({quant}) failed: {rc}")
