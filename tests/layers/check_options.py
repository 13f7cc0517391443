#!/usr/bin/env python3
"""Options are typed below the CLI: no code of runtime/engine, runtime/model or offload/ compares a
string with a literal (option values are enums parsed once, runtime/core/named.hpp) or dispatches
on an Ops' name (Ops::kind() says which backend it is). Also: the kernel structs shared by the
CUDA kernels and the offload engine are defined once.

usage: check_options.py SOURCE_DIR     prints each offending FILE:LINE, exits 1 when any exists
"""
import os
import re
import sys
import tempfile

import checker

FOLDERS = ("runtime/engine", "runtime/model", "offload")
SOURCES = (".cpp", ".hpp", ".cu", ".cuh")
RULES = [  # the first that matches a line names it
    (re.compile(r"\bname\(\)\s*\)?\s*[!=]=|[!=]=\s*[\w.>()-]*\bname\(\)"), "dispatches on a name (use Ops::kind())"),
    (re.compile(r'[!=]=\s*"|"\s*[!=]='), "compares a string with a literal (use a typed option)"),
    (re.compile(r"\bstrcmp\s*\(|\.compare\s*\(\s*\""), "compares a string with a literal (use a typed option)"),
]
# Parsers of a file format, where text is compared with the format's own words (a format tag, key
# names, a file extension) — not option values. Each is named with what it parses.
FORMAT_PARSERS = {
    "offload/hardware_profile.cpp": "the hardware-profile JSON (profiles/hardware)",
}
# Structs the kernels and the offload engine share: one definition (kernels/cuda/moe.cuh).
SHARED_STRUCTS = ("ExpertPtrs", "DecodeSlots", "RowIndex")
STRUCT_DEF = re.compile(r"^\s*struct\s+(\w+)\s*(?:final\s*)?\{")


STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def strip_comment(line):
    """The code of a line: string literals emptied (their text is not code), comments dropped."""
    line = STRING.sub('""', line)
    i = line.find("//")
    return line if i < 0 else line[:i]


def violations(root):
    out = []
    for rel, n, line in checker.source_lines(root, FOLDERS, SOURCES):
        code = strip_comment(line)
        if rel in FORMAT_PARSERS and "name()" not in code:
            continue
        for rx, why in RULES:
            if rx.search(code):
                out.append(f"{rel}:{n}: {why}: {line.strip()}")
                break
    defs = {}
    for rel, n, line in checker.source_lines(root, ("runtime", "offload", "kernels"), SOURCES):
        m = STRUCT_DEF.match(line)
        if m and m.group(1) in SHARED_STRUCTS:
            defs.setdefault(m.group(1), []).append(f"{rel}:{n}")
    for s, where in sorted(defs.items()):
        if len(where) > 1:
            out.append(f"struct {s} is defined {len(where)} times: {', '.join(where)}")
    return out


def self_test():
    with tempfile.TemporaryDirectory() as d:
        checker.write_tree(d, {
            "runtime/engine/a.cpp": 'int x;  // a == "b" in a comment is fine\nif (mode == "table") {}\n'
                                    'if (std::string_view(ops.name()) == "cuda") {}\n',
            "offload/b.hpp": "struct ExpertPtrs {\n};\n",
            "kernels/cuda/c.cuh": "struct ExpertPtrs {\n};\n",
        })
        v = violations(d)
        assert len(v) == 3, v
        assert "a.cpp:2" in v[0] and "a.cpp:3: dispatches" in v[1] and "ExpertPtrs is defined 2 times" in v[2], v


if __name__ == "__main__":
    sys.exit(checker.main(self_test, violations))
