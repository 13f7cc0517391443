#!/usr/bin/env python3
"""Ferry beside llama.cpp on one GPU: the first measurement of bench/gpu-check.sh (issue 25).

Same GGUF, same threads, same -p/-n/-r, page cache warm; llama-bench and `ferry bench` -o json:

  resident     llama.cpp defaults (every layer on the GPU, flash attention, fusions, graphs) and
               with GGML_CUDA_GRAPH_OPT=1; Ferry defaults (--device cuda)
  card <SIZE>  bench_ballast holds all device memory but SIZE before either engine starts, so both
               see the free memory of a SIZE card: llama.cpp with -fitt MARGIN (its --fit) and with
               -ncmoe N, N+1, N-1, N computed from the file's tensor bytes (no search; at the later
               thread counts only the fastest of the three); Ferry with no budget flag: it fits
               the free memory itself (--fit-target MARGIN, llama.cpp's -fitt), --routing model and locality, the pinned store filled from the page cache. llama.cpp's layer placement does
               not depend on which experts are routed; Ferry's expert cache does, hence two columns.
  depth        tg at -d DEPTH, resident, when the time left allows (a DEPTH prefill per engine)

Rows print as they finish; OUT/sidebyside.md holds the ratio table so far after every scenario (a
run cut by its time limit keeps what it finished). Every run's JSON is kept in OUT/raw/. Stdlib
only: runs with the GPU machine's python3.

The dry run (bench/gpu-check-dry-run.sh, on the emulator build) passes bench/llama_bench_standin.py
as --llama-bench: its figures are labelled STAND-IN in every row and mean nothing.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_llamacpp import parse_size_mib, test_key  # noqa: E402  (same folder, stdlib only)


def log(msg):
    print(msg, flush=True)


class Runner:
    """Runs one engine command under the time left; keeps its JSON and stderr in OUT/raw."""

    def __init__(self, out, budget_s):
        self.raw = os.path.join(out, "raw")
        os.makedirs(self.raw, exist_ok=True)
        self.deadline = time.monotonic() + budget_s
        self.count = 0
        self.failed = []  # names of the runs that failed (not those skipped or cut for time)

    def left(self):
        return self.deadline - time.monotonic()

    def run(self, name, cmd, env=None, need_s=10, may_not_fit=False):
        """may_not_fit: a probe below the computed fit (-ncmoe N-1); its failure is "did not fit",
        not a failed run."""
        if self.left() < need_s:
            log(f"  {name}: skipped, {self.left():.0f} s left of the budget (needs ~{need_s} s)")
            return None
        self.count += 1
        path = os.path.join(self.raw, f"{self.count:02d}-{name}")
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1, self.left()),
                               env={**os.environ, **(env or {})})
        except OSError as e:
            log(f"  {name}: FAILED to start: {e}")
            self.failed.append(name)
            return None
        except subprocess.TimeoutExpired as e:
            log(f"  {name}: cut at the budget after {time.monotonic() - t0:.0f} s")
            with open(path + ".stderr", "w") as f:
                f.write(e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or ""))
            return None
        with open(path + ".json", "w") as f:
            f.write(r.stdout)
        with open(path + ".stderr", "w") as f:
            f.write(" ".join(cmd) + "\n" + r.stderr)
        try:
            rows = json.loads(r.stdout) if r.stdout.strip() else []
        except json.JSONDecodeError:
            rows = []
        if r.returncode != 0 or not rows:
            tail = " | ".join(r.stderr.strip().splitlines()[-2:])
            if may_not_fit and r.returncode != 0:
                log(f"  {name}: did not fit (exit {r.returncode}) {tail}")
                return None
            log(f"  {name}: FAILED (exit {r.returncode}) {tail}")
            self.failed.append(name)
            return None
        got = {test_key(x): float(x["avg_ts"]) for x in rows}
        log(f"  {name}: " + ", ".join(f"{k} {v:.2f} t/s" for k, v in got.items()) + f"  ({time.monotonic() - t0:.0f} s)")
        return rows


class Ballast:
    """bench_ballast --leave SIZE for the duration of a `with`; reports what it left."""

    def __init__(self, exe, leave, out):
        self.exe, self.leave = exe, leave
        self.ready = os.path.join(out, f"ballast-{leave}.txt")

    def __enter__(self):
        if os.path.exists(self.ready):
            os.remove(self.ready)
        try:
            self.proc = subprocess.Popen([self.exe, "--leave", self.leave, "--ready", self.ready],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        except OSError as e:
            raise RuntimeError(f"cannot start {self.exe}: {e}") from e
        for _ in range(600):  # 60 s: allocating 100+ GiB in 1 GiB steps takes a few seconds
            if os.path.exists(self.ready) or self.proc.poll() is not None:
                break
            time.sleep(0.1)
        if not os.path.exists(self.ready):
            self.proc.kill()
            err = self.proc.communicate()[1].strip()
            raise RuntimeError(f"bench_ballast --leave {self.leave} did not get ready: {err}")
        with open(self.ready) as f:
            log("  " + f.read().strip())
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def model_bytes(ferry, model):
    """(layers, expert bytes per layer, non-expert bytes llama.cpp keeps on the GPU) from `ferry
    inspect --json`. token_embd stays in host memory in llama.cpp (its rows are gathered there)."""
    r = subprocess.run([ferry, "inspect", "--json", model], capture_output=True, text=True, check=True)
    info = json.loads(r.stdout)
    pe = info["per_expert"]
    per_layer = [int(pe["bytes_by_layer"][str(i)]) * int(pe["experts_per_layer"]) for i in range(int(pe["layers"]))]
    embd = sum(int(t["bytes"]) for t in info["tensors"] if t["name"] == "token_embd.weight")
    return per_layer, int(info["non_expert_bytes"]) - embd


def n_cpu_moe_for(per_layer, gpu_fixed, free_bytes, reserve_bytes):
    """Smallest N such that the non-expert weights, the experts of layers N.. and the reserve
    (fit margin, compute buffers, KV cache, CUDA context) fit in free_bytes: -ncmoe N keeps the
    experts of layers 0..N-1 in host memory."""
    for n in range(len(per_layer) + 1):
        if gpu_fixed + sum(per_layer[n:]) + reserve_bytes <= free_bytes:
            return n
    return len(per_layer)


class Table:
    """The ratio table: rows appended per scenario, rewritten to OUT/sidebyside.md each time."""

    HEAD = ("| card | threads | test | llama.cpp best (config) t/s | Ferry model t/s | × | Ferry locality t/s | × |\n"
            "|---|---:|---|---|---:|---:|---:|---:|")

    def __init__(self, path, header):
        self.path, self.header, self.rows = path, header, []

    def add(self, card, threads, llama_runs, ferry_rows):
        """llama_runs: [(config, rows)], ferry_rows: rows of one ferry bench (routing model/locality)."""
        tests = []
        for _, rows in llama_runs:
            tests += [test_key(x) for x in rows or [] if test_key(x) not in tests]
        for x in ferry_rows or []:
            if test_key(x) not in tests:
                tests.append(test_key(x))
        for test in tests:
            best = max(((float(x["avg_ts"]), cfg) for cfg, rows in llama_runs for x in rows or [] if test_key(x) == test),
                       default=None)
            fer = {x.get("routing", "model"): float(x["avg_ts"]) for x in ferry_rows or [] if test_key(x) == test}
            cells = []
            for routing in ("model", "locality"):
                v = fer.get(routing)
                cells += ["—" if v is None else f"{v:.2f}", "—" if v is None or not best else f"{v / best[0]:.2f}"]
            llama = "—" if not best else f"{best[0]:.2f} ({best[1]})"
            row = f"| {card} | {threads} | {test} | {llama} | " + " | ".join(cells) + " |"
            self.rows.append(row)
            log(row)
        with open(self.path, "w") as f:
            f.write(self.header + "\n\n" + self.HEAD + "\n" + "\n".join(self.rows) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--llama-bench", required=True, help="llama.cpp's CUDA llama-bench (the dry run: the stand-in)")
    ap.add_argument("--ballast", required=True, help="bench_ballast")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", default="16,8", help="first: every scenario; the others: resident and the first card")
    ap.add_argument("--cards", default="16G,12G", help="free memory the ballast leaves, one scenario each")
    ap.add_argument("--margin", default="1G", help="left unused: llama.cpp -fitt and Ferry's --fit-target")
    ap.add_argument("--emulated", action="store_true",
                    help="the dry run: the CUDA emulator's memory is per process, so the ballast cannot shrink "
                         "Ferry's; FERRY_CUDA_EMU_MEMORY gives each Ferry run the card's size instead")
    ap.add_argument("--reserve", default="1536M", help="-ncmoe arithmetic: margin + compute buffers + KV + context")
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("-d", "--depth", type=int, default=32768, help="tg at this depth when time allows (0: never)")
    ap.add_argument("--budget-s", type=float, default=420)
    ap.add_argument("--est-s", type=float, default=25, help="seconds one engine run is expected to need (skip below)")
    ap.add_argument("--no-warmup", action="store_true", help="no warm-up run before each test, both engines (the dry run)")
    a = ap.parse_args()

    runner = Runner(a.out, a.budget_s)
    threads = [int(t) for t in a.threads.split(",")]
    cards = a.cards.split(",")
    margin_mib = parse_size_mib(a.margin)
    common = ["-m", a.model, "-p", str(a.n_prompt), "-n", str(a.n_gen), "-r", str(a.repetitions), "-o", "json"]
    common += ["--no-warmup"] if a.no_warmup else []
    standin = a.llama_bench.endswith("llama_bench_standin.py")
    llama_name = "llama.cpp STAND-IN (dry run, not llama.cpp)" if standin else "llama.cpp"
    info = a.llama_bench + ".build-info.txt"  # bench/gpu-bundle.sh puts build-llamacpp.sh's build-info.txt there
    build = open(info).read().strip().replace("\n", "; ") if os.path.exists(info) else f"no {info}"
    header = (f"# Side by side: Ferry / {llama_name} ({os.path.basename(a.model)}, -p {a.n_prompt} -n {a.n_gen} "
              f"-r {a.repetitions})\n\nllama-bench: {build}\n\n× = Ferry / the best llama.cpp configuration of the row. "
              "llama.cpp's layer placement (-fitt, -ncmoe) does not depend on routing; Ferry's expert cache does: "
              "`model` is the file's router (near-uniform on a synthetic file), `locality` the locality generator.")
    table = Table(os.path.join(a.out, "sidebyside.md"), header)
    log(header)

    t0 = time.monotonic()
    with open(a.model, "rb") as f:  # page cache warm for both engines
        while f.read(64 << 20):
            pass
    log(f"page cache: read {os.path.getsize(a.model) / 2**30:.2f} GiB in {time.monotonic() - t0:.1f} s")
    per_layer, gpu_fixed = model_bytes(a.ferry, a.model)
    # Ferry fits the free memory itself, leaving the margin llama.cpp's -fitt leaves (--fit-target).
    ferry_base = [a.ferry, "bench", "--device", "cuda", "--fit-target", str(int(margin_mib))]
    ferry_cmd = [*ferry_base, *common]

    def resident(t):
        log(f"\n== resident, {t} threads")
        runs = [("defaults", runner.run(f"llama-resident-t{t}", [a.llama_bench, *common, "-t", str(t)], need_s=a.est_s))]
        if t == threads[0]:
            runs.append(("GGML_CUDA_GRAPH_OPT=1", runner.run(f"llama-graphopt-t{t}", [a.llama_bench, *common, "-t", str(t)],
                                                             env={"GGML_CUDA_GRAPH_OPT": "1"}, need_s=a.est_s)))
        fr = runner.run(f"ferry-resident-t{t}", [*ferry_cmd, "-t", str(t)], need_s=a.est_s)
        table.add("resident", t, runs, fr)

    best_n = {}  # card → the -ncmoe N of its fastest tg at the first thread count

    def card(size, t):
        free_mib = parse_size_mib(size)
        n = n_cpu_moe_for(per_layer, gpu_fixed, free_mib * 2**20, parse_size_mib(a.reserve) * 2**20)
        emu = {"FERRY_CUDA_EMU_MEMORY": str(int(free_mib))} if a.emulated else None
        log(f"\n== as a {size} card, {t} threads: -ncmoe {n} (experts {sum(per_layer) / 2**30:.2f} GiB in "
            f"{len(per_layer)} layers, {gpu_fixed / 2**30:.2f} GiB other weights on the GPU, reserve {a.reserve}); "
            f"Ferry fits free − {int(margin_mib)} MiB itself")
        if runner.left() < 3 * a.est_s:
            log(f"  skipped: {runner.left():.0f} s left")
            return
        try:
            ballast = Ballast(a.ballast, size, a.out).__enter__()
        except RuntimeError as e:
            log(f"  FAILED: {e}")
            runner.failed.append(f"ballast-{size}")
            return
        try:
            runs = [(f"-fitt {int(margin_mib)}", runner.run(f"llama-fit-{size}-t{t}", [a.llama_bench, *common, "-t", str(t),
                                                                                    "-fitt", str(int(margin_mib))], need_s=a.est_s))]
            # At the later thread counts only the N that decoded fastest at the first (time).
            for k in (n, n + 1, n - 1) if size not in best_n else (best_n[size],):
                if 0 <= k <= len(per_layer):
                    runs.append((f"-ncmoe {k}", runner.run(f"llama-ncmoe{k}-{size}-t{t}", [a.llama_bench, *common, "-t", str(t),
                                                                                           "-ncmoe", str(k)], need_s=a.est_s,
                                                                     may_not_fit=k < n)))
            # --host-load mmap: the pinned store is filled from the warm page cache rather than read
            # again from disk (uring's O_DIRECT); decode reads the same pinned store either way.
            fr = runner.run(f"ferry-{size}-t{t}", [*ferry_cmd, "-t", str(t), "--routing", "model,locality",
                                                   "--host-load", "mmap"], env=emu, need_s=2 * a.est_s)
        finally:
            ballast.__exit__(None, None, None)
        if size not in best_n:
            tg = [(float(x["avg_ts"]), int(cfg.split()[1])) for cfg, rows in runs if cfg.startswith("-ncmoe")
                  for x in rows or [] if int(x["n_gen"]) > 0]
            best_n[size] = max(tg)[1] if tg else n
        table.add(size, t, runs, fr)

    resident(threads[0])
    for size in cards:
        card(size, threads[0])
    for t in threads[1:]:
        resident(t)
        if cards:
            card(cards[0], t)
    if a.depth > 0:
        log(f"\n== resident, tg{a.n_gen} at depth {a.depth}, {threads[0]} threads (one repetition, no warm-up)")
        deep = ["-m", a.model, "-p", "0", "-n", str(a.n_gen), "-d", str(a.depth), "-r", "1", "--no-warmup", "-o", "json",
                "-t", str(threads[0])]
        runs = [("defaults", runner.run("llama-depth", [a.llama_bench, *deep], need_s=3 * a.est_s))]
        fr = runner.run("ferry-depth", [*ferry_base, *deep], need_s=3 * a.est_s) if runs[0][1] else None
        table.add("resident", threads[0], runs, fr)
    log(f"\nside-by-side: {len(table.rows)} rows in {a.budget_s - runner.left():.0f} s; table in {table.path}")
    if runner.failed:
        log(f"side-by-side: {len(runner.failed)} runs failed: {', '.join(runner.failed)} (stderr in {runner.raw})")
    return 0 if table.rows and not runner.failed else 1


if __name__ == "__main__":
    sys.exit(main())
