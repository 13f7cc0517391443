#!/usr/bin/env python3
"""qwen3next against llama.cpp: the checks of test_qwen35moe_llamacpp.py on a tiny synthetic
qwen3next (fused ssm_ba gate projection grouped per key head, value head h reading key head
h / (H_v/H_k)): F32 / Q8_0 / Q4_K_M logits vs llama.cpp (bit-identical with the CPU default), the
chunked form vs llama.cpp, and chunked prefill vs recurrent decode.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_qwen35moe_llamacpp import run  # noqa: E402  (exits 77 itself when the venv lacks llama_cpp)

if __name__ == "__main__":
    sys.exit(run("qwen3next"))
