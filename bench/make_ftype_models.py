#!/usr/bin/env python3
"""Makes the benchmark models of the weight-type rows: one F32 synthetic model per architecture
(`ferry synth --preset small --quant f32 --seed 1`), turned into each llama.cpp ftype by
llama.cpp's own quantizer (llama_model_quantize of the pinned llama-cpp-python).

    .venv/bin/python bench/make_ftype_models.py --ferry build/ferry --out .cache/bench-models \
        [--arch qwen3moe,qwen35moe] [--ftypes q4_k_m,q8_0,q2_k,q3_k_m,q4_0,iq4_xs,mxfp4_moe]

Writes OUT/<arch>-small-<ftype>.gguf; a file already there is kept (delete it to remake it).
Each file is written under a temporary name and renamed when complete.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import common  # noqa: E402  (llama_quantize, LLAMA_FTYPE)

DEFAULT_FTYPES = "q4_k_m,q8_0,q2_k,q3_k_m,q4_0,iq4_xs,mxfp4_moe"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", default="qwen3moe,qwen35moe")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--ftypes", default=DEFAULT_FTYPES)
    args = ap.parse_args()
    ftypes = [f for f in args.ftypes.split(",") if f]
    for f in ftypes:
        if f not in common.LLAMA_FTYPE:
            ap.error(f"unknown ftype '{f}' (known: {', '.join(sorted(common.LLAMA_FTYPE))})")
    os.makedirs(args.out, exist_ok=True)
    for arch in [a for a in args.arch.split(",") if a]:
        base = os.path.join(args.out, f"{arch}-{args.preset}-f32.gguf")
        for f in ftypes:
            dst = os.path.join(args.out, f"{arch}-{args.preset}-{f}.gguf")
            if os.path.exists(dst):
                print(f"[make-models] {dst}: present")
                continue
            if not os.path.exists(base):  # the F32 source (~10 GB at the small preset): only when needed
                subprocess.run([args.ferry, "synth", "--arch", arch, "--preset", args.preset, "--quant", "f32",
                                "--seed", "1", "-o", base + ".part"], check=True)
                os.replace(base + ".part", base)
            tmp = dst + ".part"
            common.llama_quantize(base, tmp, f)
            os.replace(tmp, dst)
            print(f"[make-models] {dst}")


if __name__ == "__main__":
    main()
