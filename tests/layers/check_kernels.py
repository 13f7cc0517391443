#!/usr/bin/env python3
"""Every CUDA kernel (a `__global__` function under kernels/cuda) begins with FERRY_PDL_WAIT();
(kernels/cuda/launch.cuh). Under programmatic dependent launch (`--cuda-pdl`) a kernel may start
while the previous kernel of its stream still runs; the wait, as its first statement, is what keeps
it from reading that kernel's output early. A kernel without it would race only with the switch on
and only on a GPU, so the rule is checked here, on every machine.

usage: check_kernels.py SOURCE_DIR     prints each offending FILE:LINE, exits 1 when any exists
"""
import os
import re
import sys

import checker

FOLDER = "kernels/cuda"
SOURCES = (".cu", ".cuh")
WAIT = "FERRY_PDL_WAIT();"


def matching_paren(s, i):
    """Index of the ')' closing the '(' at s[i]."""
    depth = 0
    for t in range(i, len(s)):
        if s[t] == "(":
            depth += 1
        elif s[t] == ")":
            depth -= 1
            if depth == 0:
                return t
    return len(s)


def kernels(text):
    """(line of `__global__`, the code after the body's opening brace) for each kernel definition."""
    for m in re.finditer(r"__global__", text):
        j = m.end()
        while True:  # the parameter list: the first '(' not opening __launch_bounds__(...)
            k = text.find("(", j)
            if k < 0:
                return
            if re.search(r"__launch_bounds__\s*$", text[j:k]):
                j = matching_paren(text, k) + 1
                continue
            break
        close = matching_paren(text, k)
        brace, semi = text.find("{", close), text.find(";", close)
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration
        yield text.count("\n", 0, m.start()) + 1, text[brace + 1:]


def first_statement(body):
    """The body's first statement, comments and blank lines skipped."""
    body = re.sub(r"//[^\n]*", "", body)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    end = body.find(";")
    return body[:end + 1].strip() if end >= 0 else body.strip()


def violations(root):
    out = []
    top = os.path.join(root, FOLDER)
    for dirpath, _, files in os.walk(top):
        for name in sorted(files):
            if not name.endswith(SOURCES):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for line, body in kernels(text):
                if first_statement(body) != WAIT:
                    out.append(f"{rel}:{line}: kernel does not begin with {WAIT} (kernels/cuda/launch.cuh)")
    return out


def self_test():
    v = checker.tree_violations({
        "kernels/cuda/a.cu": "template <int N>\n__global__ void __launch_bounds__(128) good(int x) {\n"
                             "  // why\n  FERRY_PDL_WAIT();\n  x++;\n}\n"
                             "__global__ void bad(const float* p) {\n  float v = p[0];\n  FERRY_PDL_WAIT();\n}\n"
                             "__global__ void declared(int);\n",
    }, violations)
    assert len(v) == 1 and "a.cu:7:" in v[0], v


if __name__ == "__main__":
    sys.exit(checker.main(self_test, violations))
