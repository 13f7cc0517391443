#!/usr/bin/env python3
"""Checks that the installed llama-cpp-python is the oracle build the tests compare against:
version 0.3.36, its ggml CPU backend compiled for AVX2 + FMA + F16C and without AVX-512 (the
flags scripts/install-deps.sh builds it with). Exits 0 when it is; otherwise prints why and
exits 1.

  check_oracle_build.py              the installed library
  check_oracle_build.py --info TEXT  a given llama_print_system_info() text (the self-test)
"""
import sys

VERSION = "0.3.36"
REQUIRED = ("AVX2 = 1", "FMA = 1", "F16C = 1")
FORBIDDEN = ("AVX512", "AVX_VNNI", "AMX")


def features(info):
    """{"AVX2": "1", ...} from "CPU : SSE3 = 1 | AVX2 = 1 | ..."."""
    out = {}
    for part in info.replace("CPU :", "|").split("|"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def problems(info):
    f = features(info)
    out = [f"{r} missing" for r in REQUIRED if f.get(r.split(" = ")[0]) != "1"]
    out += [f"{k} = 1 compiled in" for k, v in f.items() if v == "1" and k.startswith(FORBIDDEN)]
    return out


def self_test():
    good = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | OPENMP = 1 |"
    native = good + " AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 |"
    assert problems(good) == [], problems(good)
    assert any("AVX512" in p for p in problems(native)), problems(native)
    assert "FMA = 1 missing" in problems("CPU : AVX2 = 1 | F16C = 1 |")


def main():
    self_test()
    if len(sys.argv) == 3 and sys.argv[1] == "--info":
        info = sys.argv[2]
    else:
        import importlib.metadata as md
        try:
            v = md.version("llama_cpp_python")
        except md.PackageNotFoundError:
            print("llama-cpp-python is not installed")
            return 1
        if v != VERSION:
            print(f"version {v}, expected {VERSION}")
            return 1
        import llama_cpp
        info = llama_cpp.llama_print_system_info().decode(errors="replace")
    p = problems(info)
    if p:
        print(f"built with other CPU flags ({', '.join(p)}; system info: {info.strip()})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
