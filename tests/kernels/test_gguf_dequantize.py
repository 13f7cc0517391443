#!/usr/bin/env python3
"""Ferry's reference dequantizers against the gguf package's numpy ones (gguf.quants.dequantize).

For each type, random valid blocks (random bytes with every fp16 scale field set to a finite
random value; MXFP4's E8M0 scale any byte) go through `dequantize_file` (a small tool over
cpu::dequantize_row_ref) and through gguf.quants.dequantize; the float32 results must be equal
bit for bit. Usage: test_gguf_dequantize.py DEQUANTIZE_FILE SCRATCH_DIR. Exits 77 (ctest:
skipped) when numpy or gguf are missing.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    from gguf import GGMLQuantizationType as QT
    from gguf import quants
except ImportError as e:
    print(f"SKIPPED: gguf package unavailable ({e})")
    sys.exit(77)

# type: (block bytes, byte offsets of the fp16 scale fields)
TYPES = {
    QT.Q4_0: (18, [0]),
    QT.Q4_1: (20, [0, 2]),
    QT.Q5_0: (22, [0]),
    QT.Q5_1: (24, [0, 2]),
    QT.IQ4_NL: (18, [0]),
    QT.MXFP4: (17, []),
    QT.Q2_K: (84, [80, 82]),
    QT.Q3_K: (110, [108]),
    QT.IQ4_XS: (136, [0]),
    # the types that had kernels before, for completeness
    QT.Q8_0: (34, [0]),
    QT.Q4_K: (144, [0, 2]),
    QT.Q5_K: (176, [0, 2]),
    QT.Q6_K: (210, [208]),
}


def random_blocks(rng, block_bytes, scale_offsets, n_blocks):
    b = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        # sign, exponent 1..16, random mantissa: finite, in [2^-14, 2)
        h = (rng.integers(0, 2, n_blocks) << 15) | (rng.integers(1, 17, n_blocks) << 10) | rng.integers(0, 1024, n_blocks)
        b[:, off:off + 2] = h.astype("<u2").view(np.uint8).reshape(n_blocks, 2)
    return b


def main():
    tool, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    rng = np.random.default_rng(71)
    failures = 0
    for qt, (block_bytes, scale_offsets) in TYPES.items():
        blocks = random_blocks(rng, block_bytes, scale_offsets, 64)
        src = os.path.join(scratch, f"{qt.name}.bin")
        dst = os.path.join(scratch, f"{qt.name}.f32")
        blocks.tofile(src)
        subprocess.run([tool, qt.name, src, dst], check=True)
        ours = np.fromfile(dst, dtype=np.float32)
        theirs = quants.dequantize(blocks.reshape(1, -1), qt).reshape(-1).astype(np.float32)
        if ours.shape != theirs.shape:
            print(f"FAIL {qt.name}: {ours.size} values vs gguf's {theirs.size}")
            failures += 1
            continue
        differ = np.flatnonzero(ours.view(np.uint32) != theirs.view(np.uint32))
        if differ.size:
            i = differ[0]
            print(f"FAIL {qt.name}: {differ.size} of {ours.size} values differ, first at {i}: "
                  f"{ours[i]!r} vs gguf {theirs[i]!r}")
            failures += 1
        else:
            print(f"ok   {qt.name}: {ours.size} values bit-identical")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
