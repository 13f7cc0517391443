#!/usr/bin/env python3
"""llama.cpp's kernels per layer in its one-token decode graph, per architecture: the counts
profiles/hardware/simulator.json gives the offload simulator (`llamacpp_graph_nodes_per_layer.*`,
docs/simulator.md, model revision 9).

usage: bench/llamacpp_graph_nodes.py [build/ferry]

For each architecture it writes `ferry synth --preset tiny --quant q8_0` (4 layers, the layer
pattern of the real presets), loads it with llama-cpp-python's vendored llama.cpp under
GGML_SCHED_DEBUG=2, and counts the nodes its scheduler prints for the first graph reserved for one
token (the printout leaves out views, which launch nothing). Nodes outside the layers (the
embedding lookup, the output norm and head, the MTP hidden state) are taken off before dividing by
the layer count. This is llama.cpp's CPU backend graph: its CUDA backend fuses a few pairs
(rms_norm + mul, the top-k routing chain), so the count is an upper count of CUDA kernels.

Second column (model revision 10, `llamacpp_cpu_nodes_per_host_layer`): the nodes of one layer
from its first MUL_MAT_ID to its last, the part of the graph that runs on the CPU when the layer's
expert tensors stay in host memory (-ncmoe, fit): ggml's scheduler puts each op on its weights'
backend, the ops between them (the GLU) have only CPU inputs so they stay there, and the ops after
the down projection (the weighting, the sum) go back to the GPU with the next GPU weight
(ggml-backend.cpp, `ggml_backend_sched_split_graph`'s "expand gpu up" pass).
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FERRY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "ferry")
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
LOAD = "import sys; from llama_cpp import Llama; Llama(model_path=sys.argv[1], n_ctx=512, n_threads=2, verbose=True)"
# Node names of a layer end in -N or carry _lN; the scheduler names unnamed ones node_N; the MoE
# and shared-expert helpers and the recurrent layers' fused inputs are per layer too.
LAYER_NODE = re.compile(r"(-\d+$|_l\d+|^node_\d+|^ffn_moe|^shared_expert|^linear_attn)")


def count(gguf):
    env = dict(os.environ, GGML_SCHED_DEBUG="2")
    r = subprocess.run([PYTHON, "-c", LOAD, gguf], capture_output=True, text=True, env=env, timeout=300)
    lines = (r.stdout + r.stderr).splitlines()
    n_layer = next(int(re.search(r"= (\d+)", l).group(1)) for l in lines if "print_info: n_layer " in l)
    start = next(i for i, l in enumerate(lines) if "graph_reserve" in l and "n_tokens =    1," in l)
    end = next((i for i in range(start + 1, len(lines)) if "graph_reserve" in lines[i]), len(lines))
    nodes = [re.match(r"node #\s*\d+ \(\s*(\S+)\):\s+(.*?) \(", l).groups()
             for l in lines[start:end] if l.startswith("node #")]
    names = [n.strip() for _, n in nodes]
    outside = [n for n in names if not LAYER_NODE.search(n)]
    mmid = [i for i, (op, n) in enumerate(nodes) if op == "MUL_MAT_ID" and n.strip().endswith("-0")]
    return n_layer, len(names), outside, mmid[-1] - mmid[0] + 1


def main():
    print("| architecture | layers | decode-graph nodes (not views) | outside the layers | per layer | "
          "on the CPU per host-expert layer |")
    print("|---|---:|---:|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("qwen3moe", "qwen35moe", "qwen3next"):
            path = os.path.join(tmp, f"tiny-{arch}.gguf")
            subprocess.run([FERRY, "synth", "--arch", arch, "--preset", "tiny", "--quant", "q8_0", "-o", path],
                           check=True, capture_output=True)
            n_layer, total, outside, cpu = count(path)
            print(f"| {arch} | {n_layer} | {total} | {len(outside)} ({', '.join(outside)}) | "
                  f"{(total - len(outside)) / n_layer:.2f} | {cpu} |")


if __name__ == "__main__":
    main()
