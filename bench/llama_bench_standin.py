#!/usr/bin/env python3
"""STAND-IN for llama.cpp's llama-bench, used ONLY by the dry run of bench/gpu-check.sh
(bench/gpu-check-dry-run.sh) on the CUDA emulator build, where no CUDA llama-bench can run.

It measures nothing. It takes the llama-bench flags bench/sidebyside.py passes (-m -p -n -d -r -t
-ncmoe -fitt --no-warmup -o json) and prints llama-bench-shaped JSON with avg_ts = 1.0 and
build_commit "STAND-IN", so that every step of the side-by-side (the ballast, the -ncmoe
arithmetic, the Ferry runs, the ratio table) runs end to end and cannot rot. The flags are checked
as llama-bench checks them: an unknown flag or a missing model is an error, as it would be there.
"""
import json
import os
import sys


def main(argv):
    known = {"-m": str, "-p": int, "-n": int, "-d": int, "-r": int, "-t": int, "-ncmoe": int, "-fitt": int, "-o": str}
    args = {"-p": 512, "-n": 128, "-d": 0, "-r": 5, "-t": 1, "-ncmoe": 0, "-fitt": 0}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag == "--no-warmup":
            i += 1
            continue
        if flag not in known or i + 1 >= len(argv):
            sys.stderr.write(f"llama-bench stand-in: error: invalid parameter for argument: {flag}\n")
            return 1
        args[flag] = known[flag](argv[i + 1])
        i += 2
    if not os.path.isfile(args.get("-m", "")) or args.get("-o") != "json":
        sys.stderr.write("llama-bench stand-in: needs -m FILE (an existing file) and -o json\n")
        return 1
    tests = [(args["-p"], 0), (0, args["-n"])]
    rows = []
    for n_prompt, n_gen in tests:
        if n_prompt == 0 and n_gen == 0:
            continue
        rows.append({
            "build_commit": "STAND-IN", "build_number": 0,
            "model_filename": args["-m"], "n_threads": args["-t"], "n_cpu_moe": args["-ncmoe"],
            "fit_target": args["-fitt"], "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": args["-d"],
            "avg_ns": 0, "stddev_ns": 0, "avg_ts": 1.0, "stddev_ts": 0.0,
            "samples_ts": [1.0] * args["-r"],
        })
    print(json.dumps(rows, indent=2))
    sys.stderr.write(f"llama-bench stand-in (dry run): {len(rows)} rows, nothing measured, GGML_CUDA_GRAPH_OPT="
                     f"{os.environ.get('GGML_CUDA_GRAPH_OPT', 'unset')}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
