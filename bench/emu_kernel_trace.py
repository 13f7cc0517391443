#!/usr/bin/env python3
"""Names the kernels of a CUDA emulator trace (FERRY_CUDA_EMU_TRACE=FILE, tests/cuda_emu/runtime.cpp).

  FERRY_CUDA_EMU_TRACE=/tmp/k.txt build-emu/ferry run ... ; python3 bench/emu_kernel_trace.py /tmp/k.txt
prints each kernel's count; --last N prints the last N kernels in order (e.g. one decoded token's
kernels: run with -n 1 and -n 2 and compare, or read the tail). A development aid for fusing the
decode step (kernels/cuda/README.md, "Fused decode"); counts are what the emulator ran.
"""
import argparse
import collections
import subprocess


def names(lines):
    by_obj = collections.defaultdict(set)
    for off, obj in lines:
        by_obj[obj].add(off)
    table = {}
    for obj, offs in by_obj.items():
        offs = sorted(offs)
        out = subprocess.run(["addr2line", "-f", "-C", "-e", obj, *offs], check=True,
                             capture_output=True, text=True).stdout.splitlines()
        for i, off in enumerate(offs):
            fn = out[2 * i].replace("(anonymous namespace)::", "").replace("ferry::cuda::", "")
            fn = fn.removeprefix("void ")
            table[(off, obj)] = fn[:fn.find("(", fn.find(">") if "<" in fn else 0)] if "(" in fn else fn
    return [table[x] for x in lines]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--last", type=int, default=0, help="print the last N kernels in order")
    a = ap.parse_args()
    lines = [tuple(l.split(maxsplit=1)) for l in open(a.trace).read().splitlines() if l.strip()]
    lines = [(off, obj.strip()) for off, obj in lines]
    named = names(lines)
    if a.last:
        for n in named[-a.last:]:
            print(n)
        return
    for n, c in collections.Counter(named).most_common():
        print(f"{c:8d}  {n}")
    print(f"{len(named):8d}  kernels in all")


if __name__ == "__main__":
    main()
