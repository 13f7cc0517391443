#!/usr/bin/env python3
"""The layer rules of docs/architecture.md, checked on every #include "..." of the sources.

Floors, lowest first; a file may include its own floor and any floor below it, never one above:
  0 runtime/core
  1 runtime/gguf, kernels
  2 runtime/backend, runtime/tokenizer, runtime/sampling, runtime/chat
  3 runtime/moe       (the MoE layer: the step, executors, observers, routing override, counters)
  4 offload           (the offload engine alone)
  5 runtime/model
  6 runtime/engine
  7 runtime/synth, runtime/plan, runtime/cli, runtime/server
Folders on one floor do not include each other (runtime/cli may use runtime/synth: the top floor
holds the programs' pieces). Above the floors: runtime/model includes nothing of offload/, and
runtime/engine only offload/offload.hpp (the factory; ALLOWED_FROM). Prints every upward include as FILE:LINE and exits 1 when any exists.

  check_layers.py SOURCE_DIR             the layer rules
  check_layers.py SOURCE_DIR --max-lines N   no source file of runtime/, offload/, kernels/
                                             longer than N lines (docs/style.md: small enough to
                                             hold in your head)
"""
import os
import re
import sys

FLOORS = {
    "runtime/core": 0,
    "runtime/gguf": 1, "kernels": 1,
    "runtime/backend": 2, "runtime/tokenizer": 2, "runtime/sampling": 2, "runtime/chat": 2,
    "runtime/moe": 3,
    "offload": 4,
    "runtime/model": 5,
    "runtime/engine": 6,
    "runtime/synth": 7, "runtime/plan": 7, "runtime/cli": 7, "runtime/server": 7,
}
TOP_SHARED = 7  # folders of this floor may include each other
# Above the floors: the model sees the MoE layer only (never where an expert lives), and the engine
# sees the offload engine through its one public header (a factory returning a MoeExecutor).
ALLOWED_FROM = {
    "runtime/model": {"offload": set()},
    "runtime/engine": {"offload": {"offload/offload.hpp"}},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh")


def folder_of(path):
    """The longest FLOORS key that is a prefix folder of path (a repo-relative path), or None."""
    best = None
    for k in FLOORS:
        if path == k or path.startswith(k + "/"):
            if best is None or len(k) > len(best):
                best = k
    return best


def violations(root):
    out = []
    for top in ("runtime", "offload", "kernels"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                src = folder_of(rel)
                if src is None:
                    continue
                with open(full, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        dst = folder_of(inc)
                        if dst is None:  # relative to the including file
                            dst = folder_of(os.path.normpath(os.path.join(os.path.dirname(rel), inc)).replace(os.sep, "/"))
                        if dst is None or dst == src:
                            continue
                        allowed = ALLOWED_FROM.get(src, {}).get(dst)
                        if allowed is not None and inc not in allowed:
                            out.append(f"{rel}:{lineno}: {src} may include only {sorted(allowed) or 'nothing'} of {dst}, not {inc}")
                            continue
                        a, b = FLOORS[src], FLOORS[dst]
                        if b > a or (b == a and a != TOP_SHARED):
                            out.append(f"{rel}:{lineno}: {src} (floor {a}) includes {inc} ({dst}, floor {b})")
    return out


def self_test():
    """The checker must see an upward include: a scratch tree with one."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "runtime/backend"))
        os.makedirs(os.path.join(d, "runtime/moe"))
        os.makedirs(os.path.join(d, "runtime/model"))
        os.makedirs(os.path.join(d, "runtime/engine"))
        with open(os.path.join(d, "runtime/backend/x.cpp"), "w") as f:
            f.write('#include "runtime/core/error.hpp"\n#include "runtime/moe/step.hpp"\n')
        with open(os.path.join(d, "runtime/moe/y.cpp"), "w") as f:
            f.write('#include "runtime/backend/ops.hpp"\n#include "../../offload/placement.hpp"\n')
        with open(os.path.join(d, "runtime/model/z.cpp"), "w") as f:
            f.write('#include "runtime/moe/step.hpp"\n#include "offload/offload.hpp"\n')
        with open(os.path.join(d, "runtime/engine/w.cpp"), "w") as f:
            f.write('#include "offload/offload.hpp"\n#include "offload/placement.hpp"\n')
        v = sorted(violations(d))
        assert len(v) == 4, v
        assert "runtime/backend/x.cpp:2" in v[0] and "runtime/engine/w.cpp:2" in v[1], v
        assert "runtime/model/z.cpp:2" in v[2] and "runtime/moe/y.cpp:2" in v[3], v


def too_long(root, limit):
    out = []
    for top in ("runtime", "offload", "kernels"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith(SOURCES):
                    full = os.path.join(dirpath, name)
                    with open(full, encoding="utf-8", errors="replace") as f:
                        n = sum(1 for _ in f)
                    if n > limit:
                        out.append(f"{os.path.relpath(full, root)}: {n} lines (limit {limit})")
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    if len(sys.argv) > 3 and sys.argv[2] == "--max-lines":
        long_files = too_long(root, int(sys.argv[3]))
        for line in long_files:
            print(line)
        print(f"file sizes: {len(long_files)} file(s) over {sys.argv[3]} lines")
        return 1 if long_files else 0
    self_test()
    v = violations(root)
    for line in v:
        print(line)
    print(f"layering: {len(v)} upward include(s)")
    return 1 if v else 0


if __name__ == "__main__":
    sys.exit(main())
