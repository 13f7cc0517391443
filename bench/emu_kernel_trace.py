#!/usr/bin/env python3
"""Names the kernels of a CUDA emulator trace (FERRY_CUDA_EMU_TRACE=FILE, tests/cuda_emu/runtime.cpp).

  FERRY_CUDA_EMU_TRACE=/tmp/k.txt build-emu/ferry run ... ; python3 bench/emu_kernel_trace.py /tmp/k.txt
prints each kernel's count; --last N prints the last N kernels in order with their launch shape
(grid, block, dynamic shared bytes, and the grid's blocks against --sms multiprocessors), e.g. one
decoded token's kernels: run with -n 1 and -n 2 and compare, or read the tail. A development aid
for fusing the decode step and for finding kernels too narrow to fill a GPU (kernels/cuda/README.md,
"Fused decode"); counts and shapes are what the emulator ran.
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
    ap.add_argument("--last", type=int, default=0,
                    help="print the last N lines in order: kernels with their shapes, host calls (api)")
    ap.add_argument("--sms", type=int, default=132, help="multiprocessors of the GPU to compare grids with (H100 SXM: 132)")
    a = ap.parse_args()
    rows = [l.split() for l in open(a.trace).read().splitlines() if l.strip()]
    kernels = [r for r in rows if r[0] != "api"]
    named = dict(zip(map(id, kernels), names([(r[0], r[1]) for r in kernels])))
    if a.last:
        print(f"{'kernel or host call':60s} {'grid':>14s} {'block':>10s} {'shared':>7s} {'blocks/SM':>9s}")
        for r in rows[-a.last:]:
            if r[0] == "api":
                print(f"  api {r[1]} {r[2]} bytes" if r[2] != "0" else f"  api {r[1]}")
            elif len(r) < 5:  # a trace of the older "OFFSET OBJECT" form
                print(named[id(r)])
            else:
                g = [int(v) for v in r[2].split(",")]
                print(f"{named[id(r)][:60]:60s} {r[2]:>14s} {r[3]:>10s} {r[4]:>7s} {g[0] * g[1] * g[2] / a.sms:9.2f}")
        return
    for n, c in collections.Counter(named.values()).most_common():
        print(f"{c:8d}  {n}")
    print(f"{len(kernels):8d}  kernels in all")
    for n, c in collections.Counter(r[1] for r in rows if r[0] == "api").most_common():
        print(f"{c:8d}  api {n}")


if __name__ == "__main__":
    main()
