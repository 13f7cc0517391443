#!/usr/bin/env python3
"""llama.cpp's CPU time per graph node at one token: the per-node cost of its CPU split, which the
offload simulator charges for each node a host-expert layer runs on the CPU
(profiles/hardware/simulator.json `llamacpp_cpu_node_us`, docs/simulator.md, model revision 10).

usage: bench/llamacpp_cpu_node_cost.py [build/ferry] [threads ...]   (default threads: 1 2)

It writes two `ferry synth --arch qwen35moe --preset tiny --quant q8_0` files that differ only in
their layer count (4 and 16), decodes 100 single tokens with each through llama-cpp-python's
vendored llama.cpp (the CPU build of .venv, the same llama.cpp as llama-bench), 5 repetitions,
and divides the difference of the best per-token times by the 12 extra layers and by the nodes
per layer bench/llamacpp_graph_nodes.py counted (55.0 for qwen35moe). The tiny layers' weights
(~0.5 MB per layer, in cache) make each node's own work small: the figure is the node's dispatch,
its barrier and that small work, so an upper bound of the fixed part. ggml's threads spin at
their barriers: on a shared machine under load, runs with more than one thread measure the other
processes (the load average is printed before and after; read only quiet runs).
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FERRY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "ferry")
THREADS = [int(t) for t in sys.argv[2:]] or [1, 2]
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
NODES_PER_LAYER = 55.0  # bench/llamacpp_graph_nodes.py, qwen35moe
LAYERS = (4, 16)
DECODE = r"""
import sys, time
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=1024, n_threads=int(sys.argv[2]),
            n_threads_batch=int(sys.argv[2]), verbose=False)
best = 1e30
for rep in range(5):
    llm.reset()
    llm.eval([1, 2, 3, 4])
    t0 = time.perf_counter()
    for i in range(100):
        llm.eval([5 + i % 50])
    best = min(best, (time.perf_counter() - t0) / 100 * 1e6)
print(best)
"""


def per_token_us(gguf, threads):
    r = subprocess.run([PYTHON, "-c", DECODE, gguf, str(threads)], capture_output=True, text=True,
                       check=True, timeout=600)
    return float(r.stdout.split()[-1])


def main():
    print("load average before: %.2f %.2f %.2f\n" % os.getloadavg())
    print("| threads | us/token, 4 layers | us/token, 16 layers | us per layer | us per node |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for n in LAYERS:
            paths[n] = os.path.join(tmp, f"tiny-{n}.gguf")
            subprocess.run([FERRY, "synth", "--arch", "qwen35moe", "--preset", "tiny", "--quant", "q8_0",
                            "--layers", str(n), "-q", "-o", paths[n]], check=True, capture_output=True)
        for t in THREADS:
            a, b = (per_token_us(paths[n], t) for n in LAYERS)
            per_layer = (b - a) / (LAYERS[1] - LAYERS[0])
            print(f"| {t} | {a:.0f} | {b:.0f} | {per_layer:.1f} | {per_layer / NODES_PER_LAYER:.2f} |")
    print("\nload average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
