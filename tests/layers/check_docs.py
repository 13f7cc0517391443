#!/usr/bin/env python3
"""Docs stand alone and name real files: every repository path that README.md, the folders'
READMEs and docs/ (decisions included) name exists (a file, a folder, or a glob that matches),
and no doc or source comment cites a guide kept outside the repository (the names OUTSIDE
matches).

usage: check_docs.py SOURCE_DIR     prints each offending FILE:LINE, exits 1 when any exists
"""
import glob
import os
import re
import sys
import tempfile

import checker

TOPS = ("runtime", "offload", "kernels", "tests", "bench", "scripts", "docs", "profiles")
PATH = re.compile(r"(?<![\w/.-])((?:%s)/[A-Za-z0-9_.*/-]*[A-Za-z0-9_*/])" % "|".join(TOPS))
OUTSIDE = re.compile(r"(?<![\w/])(?:STYLE\.md|ARCHITECTURE\.md|MODELS\.md|GPU\.md)|\.\./shared/|/work/shared")
SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".py", ".sh")
# Paths that are made, not committed: build outputs, caches, files a command writes.
MADE = ("build", ".cache", ".venv", "out/")


def doc_files(root):
    out = [os.path.join(root, "README.md")]
    for top in TOPS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            if "/results" in dirpath.replace(os.sep, "/") or "/data/" in dirpath.replace(os.sep, "/") + "/":
                continue  # dated records and data: they say what was true then
            for name in files:
                if name.endswith(".md") and (name == "README.md" or top == "docs"):
                    out.append(os.path.join(dirpath, name))
    return [p for p in out if os.path.exists(p)]


def exists(root, path):
    path = path.rstrip("/.")
    if any(m in path for m in MADE):
        return True
    if "YYYY" in path:  # a pattern of names, not a path
        return True
    full = os.path.join(root, path)
    if "*" in path:
        return bool(glob.glob(full))
    # "docs/decisions/0005" names a file by its prefix
    return os.path.exists(full) or bool(glob.glob(full + "*"))


def violations(root):
    out = []
    for doc in sorted(doc_files(root)):
        rel = os.path.relpath(doc, root)
        with open(doc, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for m in PATH.finditer(line):
                    if not exists(root, m.group(1)):
                        out.append(f"{rel}:{n}: names {m.group(1)}, which is not in the repository")
                if OUTSIDE.search(line):
                    out.append(f"{rel}:{n}: cites a guide outside the repository: {line.strip()}")
    tops = ("runtime", "offload", "kernels", "tests", "bench", "scripts")
    for rel, n, line in checker.source_lines(root, tops, SOURCES):
        if "/data/" in rel or os.path.basename(rel) == os.path.basename(__file__):
            continue
        if OUTSIDE.search(line):
            out.append(f"{rel}:{n}: cites a guide outside the repository")
    return out


def self_test():
    with tempfile.TemporaryDirectory() as d:
        checker.write_tree(d, {
            "runtime/core/a.hpp": "",
            "README.md": "see runtime/core/a.hpp and runtime/core/*.hpp, runtime/core/ and build/ferry.\n",
            "docs/x.md": "see runtime/server/http.cpp.\nAs STYLE.md says.\n",
        })
        v = violations(d)
        assert len(v) == 2 and "runtime/server/http.cpp" in v[0] and "outside" in v[1], v


if __name__ == "__main__":
    sys.exit(checker.main(self_test, violations))
