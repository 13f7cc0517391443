#!/usr/bin/env python3
"""Write the model card (markdown) of one trained model and refresh SHA256SUMS beside it.

  make_card.py --run RUN_DIR --data DATA_DIR --dest tests/data/trained --name kjv-qwen3moe \
               [--verify verify.json]

RUN_DIR is train.py's --out (result.json, loss.csv); the GGUFs are DEST/NAME-f32.gguf (or -f16, --base-type) and
DEST/NAME-q8_0.gguf; verify.json is verify_llamacpp.py's output (llama.cpp perplexity and samples).
The loss curve is copied to DEST/NAME-loss.csv.
"""
import argparse
import csv
import hashlib
import json
from pathlib import Path

CONFIG_KEYS = [
    "hidden_size", "num_hidden_layers", "layer_types", "num_attention_heads", "num_key_value_heads",
    "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "num_experts", "num_local_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob", "vocab_size",
    "rope_parameters", "rms_norm_eps", "tie_word_embeddings", "router_aux_loss_coef",
]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def update_sums(dest: Path) -> dict[str, str]:
    sums = {p.name: sha256(p) for p in sorted(dest.glob("*.gguf"))}
    (dest / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, h in sums.items()))
    return sums


def loss_table(rows: list[dict], n: int = 12) -> str:
    picks = sorted({round(i * (len(rows) - 1) / (n - 1)) for i in range(n)})
    out = ["| step | train loss (LM) | aux loss | lr | elapsed s |", "|---:|---:|---:|---:|---:|"]
    for i in picks:
        r = rows[i]
        out.append(f"| {r['step']} | {r['train_loss']} | {r['aux_loss']} | {r['lr']} | {r['elapsed_s']} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--dest", type=Path, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--verify", type=Path)
    ap.add_argument("--base-type", default="f32", choices=["f32", "f16"],
                    help="the unquantized file's type (DEST/NAME-BASE.gguf)")
    ap.add_argument("--source", type=Path, help="kjv-source.txt (package and version)")
    ap.add_argument("--converter", default="llama-cpp-python 0.3.36 sdist: vendor/llama.cpp/convert_hf_to_gguf.py, gguf-py 0.19.0")
    args = ap.parse_args()

    res = json.loads((args.run / "result.json").read_text())
    split = json.loads((args.data / "split.json").read_text())
    rows = list(csv.DictReader(open(args.run / "loss.csv")))
    (args.dest / f"{args.name}-loss.csv").write_bytes((args.run / "loss.csv").read_bytes())
    sums = update_sums(args.dest)
    verify = json.loads(args.verify.read_text()) if args.verify and args.verify.exists() else None
    arch = res["arch"]
    pre = "qwen2" if arch == "qwen3moe" else "qwen35"
    base = args.base_type
    files = [f"{args.name}-{base}.gguf", f"{args.name}-q8_0.gguf"]
    cfg = res["config"]
    source = "bible-kjv-text"
    if args.source:  # dpkg-deb -f output: "Package: ...", "Version: ..."
        fields = dict(l.split(": ", 1) for l in args.source.read_text().splitlines() if ": " in l)
        source = f"{fields.get('Package', source)} {fields.get('Version', '')}".strip()
    epochs = res["tokens_seen"] / res["train_tokens"]

    L = []
    L.append(f"# {args.name}: a tiny {arch} trained on the King James Bible\n")
    L.append(f"A {res['parameters']:,}-parameter {arch} ({res['hf_class']} in transformers) trained on "
             "the CPU from scratch, for tests that need a model whose outputs mean something: "
             "perplexity, KL divergence between weight types, routing statistics, greedy text. "
             "Not a useful language model. Made by `scripts/train/run_all.sh`.\n")
    if res.get("size") == "w256":
        L.append("Every matrix of this model has rows of 256 values or a multiple (hidden, expert and "
                 "attention widths), so llama.cpp's quantizer gives it the K-quant and IQ4_XS blocks an "
                 "ftype asks for; the 128-wide models get its fallback legacy types instead. It is the "
                 "model of the K-quant rows of the quality tables.\n")
    L.append("## Files\n")
    L.append("| file | bytes | sha256 |\n|---|---:|---|")
    for f in files:
        p = args.dest / f
        L.append(f"| {f} | {p.stat().st_size:,} | `{sums[f]}` |")
    L.append(f"| {args.name}-loss.csv | | loss curve, every {int(rows[0]['step'])} steps |\n")
    L.append(f"Converted by llama.cpp's own converter ({args.converter}) with `--outtype {base}` and "
             f"`--outtype q8_0`{' and `--no-mtp`' if arch == 'qwen35moe' else ''}, through "
             f"`scripts/train/convert.py`, which registers this tokenizer's pre-tokenizer hash as "
             f"`{pre}` (the converter does not know a newly trained vocabulary). Q8_0 is the "
             "converter's: 2-D weights and expert tensors in Q8_0, norms, router and 1-row tensors F32.\n")
    L.append("## Data\n")
    L.append(f"- Text: the King James Version from Debian's `{source}` (public domain), printed one verse "
             "a line by the `bible` program of the `bible-kjv` package; verse numbers and chapter "
             "headers dropped, a blank line between books.")
    L.append(f"- Held out for evaluation: the whole books of {', '.join(split['heldout_books'])} "
             f"({split['heldout_verses']} verses, {split['heldout_chars']:,} characters, "
             f"{res['heldout_tokens']:,} tokens).")
    L.append(f"- Training: the other {split['train_books']} books ({split['train_verses']:,} verses, "
             f"{split['train_chars']:,} characters, {res['train_tokens']:,} tokens).")
    L.append(f"- Tokenizer: byte-level BPE (GPT-2 byte mapping) trained on the training text with HF "
             f"`tokenizers`, vocabulary {cfg['vocab_size']} = {cfg['vocab_size'] - 3} BPE tokens + "
             "`<|endoftext|>` (eos/bos/pad), `<|im_start|>`, `<|im_end|>` (ids "
             f"{cfg['vocab_size'] - 3}..{cfg['vocab_size'] - 1}); Qwen2's split regex; "
             f"`tokenizer.ggml.pre = \"{pre}\"`; ChatML chat template (never trained on).\n")
    L.append("## Model\n")
    L.append("| hyper-parameter | value |\n|---|---|")
    for k in CONFIG_KEYS:
        if k in cfg and cfg[k] is not None:
            L.append(f"| {k} | `{json.dumps(cfg[k])}` |")
    L.append("")
    L.append("## Training\n")
    L.append(f"- {res['steps']} steps, batch {res['batch']} × {res['ctx']} tokens "
             f"({res['tokens_seen']:,} tokens, {epochs:.1f} epochs), {res['optimizer']}, lr {res['lr']} "
             f"({res['lr_schedule']}, {res['warmup']} warm-up steps); load-balancing loss "
             f"coefficient {cfg.get('router_aux_loss_coef')}.")
    L.append(f"- Seed {res['seed']}, `torch.use_deterministic_algorithms(True)`, {res['threads']} thread; "
             f"{res['train_seconds'] / 60:.1f} minutes on a shared 2-core machine.")
    L.append("- Loss curve (LM cross-entropy in nats, averaged over each logging interval; the "
             "balanced value of the aux loss is top-k):\n")
    L.append(loss_table(rows))
    L.append("")
    L.append("## Held-out perplexity\n")
    L.append(f"Non-overlapping windows of {res['ctx']} tokens over the held-out text, every token after "
             f"a window's first scored ({res['heldout_scored_tokens']:,} tokens); "
             f"ppl = exp(mean NLL). A uniform guess would be {cfg['vocab_size']}.\n")
    L.append("| evaluated by | file | perplexity |\n|---|---|---:|")
    L.append(f"| PyTorch (transformers), float32 | HF checkpoint | {res['heldout_ppl']:.3f} |")
    if verify:
        for f in files:
            if f in verify:
                L.append(f"| llama.cpp ({verify['llama_cpp_python']}) | {f} | {verify[f]['heldout_ppl']:.3f} |")
    L.append("")
    if verify:
        base_v = verify.get(files[0], {})
        match = all(verify.get(f, {}).get("tokenizer_matches_training") for f in files)
        L.append(f"llama.cpp's tokenizer gives {'the same' if match else 'DIFFERENT'} ids as the "
                 "training tokenizer on the held-out text.\n")
        L.append(f"## Greedy samples (llama.cpp, {base.upper()} file, 48 tokens)\n")
        L.append("Prompt and continuation, no template, no special tokens:\n")
        for p, s in base_v.get("samples", {}).items():
            L.append(f"```text\n{p}{s}\n```")
        q8 = verify.get(files[1], {}).get("samples", {})
        same = [p for p in q8 if q8[p] == base_v.get("samples", {}).get(p)]
        L.append(f"\nThe Q8_0 file gives the same continuation for {len(same)} of {len(q8)} prompts.\n")
    else:
        L.append("(llama.cpp was not available when this card was written: no samples.)\n")
    L.append("## Versions\n")
    for k, v in res["versions"].items():
        L.append(f"- {k} {v}")
    L.append(f"- converter: {args.converter}")
    if verify:
        L.append(f"- llama-cpp-python {verify['llama_cpp_python']} (loading, perplexity, samples)")
    L.append("\nReproduce: `bash scripts/train/run_all.sh` (pinned versions: "
             "scripts/train/requirements.lock); a rerun should give the held-out perplexity within 1%.\n")
    (args.dest / f"{args.name}.md").write_text("\n".join(L))
    print(f"wrote {args.dest / (args.name + '.md')}")


if __name__ == "__main__":
    main()
