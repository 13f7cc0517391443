#!/usr/bin/env python3
"""Train a tiny qwen3moe or qwen35moe model on the KJV train split, on the CPU, deterministically.

Uses transformers' own classes (Qwen3MoeForCausalLM, Qwen3_5MoeForCausalLM) so that llama.cpp's
converter maps them to GGUF exactly as it maps the published checkpoints.

Writes to --out: hf/ (safetensors, config.json, the tokenizer), loss.csv (step, train loss averaged
over the logging interval, learning rate, seconds), result.json (held-out perplexity, timings,
hyper-parameters, versions).

Held-out perplexity: the held-out text is tokenized as one stream, cut into non-overlapping windows
of --ctx tokens (the last one shorter), every token after the first of a window is scored;
ppl = exp(mean negative log-likelihood).
"""
import argparse
import csv
import json
import math
import os
import platform
import random
import time
from pathlib import Path

import numpy as np
import torch

SEED = 1234


# --size: "small" is the 128-wide model of each architecture; "w256" is a qwen3moe whose every
# quantized tensor has rows of 256 (hidden, expert and attention widths), so that llama.cpp's
# quantizer gives it real K-quant and IQ4_XS blocks instead of its fallback legacy types.
SIZES = ("small", "w256")


def model_config(arch: str, vocab_size: int, eos_id: int, size: str = "small"):
    common = dict(
        vocab_size=vocab_size,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        initializer_range=0.02,
        output_router_logits=True,   # add the load-balancing loss: keeps every expert in use
        router_aux_loss_coef=0.01,
    )
    if arch == "qwen3moe" and size == "w256":
        from transformers import Qwen3MoeConfig
        return Qwen3MoeConfig(
            hidden_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=256,
            intermediate_size=1024, decoder_sparse_step=1, mlp_only_layers=[],
            norm_topk_prob=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            **common)
    if size != "small":
        raise ValueError(f"size {size} is defined for qwen3moe only")
    if arch == "qwen3moe":
        from transformers import Qwen3MoeConfig
        return Qwen3MoeConfig(
            hidden_size=128, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            num_experts=16, num_experts_per_tok=4, moe_intermediate_size=64,
            intermediate_size=512, decoder_sparse_step=1, mlp_only_layers=[],
            norm_topk_prob=True,  # llama.cpp's qwen3moe always renormalises the top-k weights
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            **common)
    if arch == "qwen35moe":
        from transformers import Qwen3_5MoeTextConfig
        return Qwen3_5MoeTextConfig(
            hidden_size=128, num_hidden_layers=4,
            # layers 0-2 Gated DeltaNet, layer 3 full attention (interval 4, as the real model)
            layer_types=["linear_attention"] * 3 + ["full_attention"],
            full_attention_interval=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64,
            # 2 key heads, 4 value heads (2 per key head, as the real 16/32): exercises the
            # converter's V-head reorder
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
            num_experts=16, num_experts_per_tok=4, moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                             "partial_rotary_factor": 0.25, "mrope_section": [3, 3, 2],
                             "mrope_interleaved": True},
            **common)
    raise ValueError(arch)


def build_model(arch: str, config):
    if arch == "qwen3moe":
        from transformers import Qwen3MoeForCausalLM as cls
    else:
        from transformers import Qwen3_5MoeForCausalLM as cls
    return cls(config)


def tokenize_file(tok, path: Path) -> torch.Tensor:
    text = path.read_text(encoding="utf-8")
    return torch.tensor(tok(text)["input_ids"], dtype=torch.long)


@torch.no_grad()
def heldout_nll(model, tokens: torch.Tensor, ctx: int) -> tuple[float, int]:
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(tokens) - 1, ctx):
        window = tokens[start:start + ctx].unsqueeze(0)
        if window.shape[1] < 2:
            break
        logits = model(input_ids=window).logits.float()
        lp = torch.log_softmax(logits[0, :-1], dim=-1)
        nll = -lp.gather(1, window[0, 1:].unsqueeze(1)).squeeze(1)
        total += nll.sum().item()
        count += nll.numel()
    model.train()
    return total / count, count


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))  # cosine to lr/10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["qwen3moe", "qwen35moe"], required=True)
    ap.add_argument("--data", type=Path, required=True, help="prepare_data.py's output folder")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size", choices=SIZES, default="small")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)

    import transformers
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.data / "tokenizer")
    eos_id = tok.convert_tokens_to_ids("<|endoftext|>")
    train_tokens = tokenize_file(tok, args.data / "train.txt")
    held_tokens = tokenize_file(tok, args.data / "heldout.txt")
    print(f"train tokens {len(train_tokens)}, held-out tokens {len(held_tokens)}", flush=True)

    config = model_config(args.arch, len(tok), eos_id, args.size)
    model = build_model(args.arch, config)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.arch}: {n_params} parameters", flush=True)

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(SEED)
    args.out.mkdir(parents=True, exist_ok=True)
    csv_file = open(args.out / "loss.csv", "w", newline="")
    log = csv.writer(csv_file)
    log.writerow(["step", "train_loss", "aux_loss", "lr", "elapsed_s"])
    t0 = time.time()
    acc_loss, acc_aux, acc_n = 0.0, 0.0, 0
    for step in range(args.steps):
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train_tokens) - args.ctx - 1, (args.batch,), generator=gen)
        batch = torch.stack([train_tokens[s:s + args.ctx + 1] for s in starts.tolist()])
        out = model(input_ids=batch[:, :-1], labels=batch[:, :-1].clone())
        # out.loss = LM loss + coef * aux loss; log the LM part alone.
        aux = out.aux_loss.item() if getattr(out, "aux_loss", None) is not None else 0.0
        lm_loss = out.loss.item() - config.router_aux_loss_coef * aux
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        acc_loss += lm_loss
        acc_aux += aux
        acc_n += 1
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            el = time.time() - t0
            log.writerow([step + 1, f"{acc_loss / acc_n:.4f}", f"{acc_aux / acc_n:.4f}", f"{lr:.6g}", f"{el:.1f}"])
            csv_file.flush()
            print(f"step {step + 1}/{args.steps} loss {acc_loss / acc_n:.4f} aux {acc_aux / acc_n:.3f} "
                  f"lr {lr:.2e} {el:.0f}s", flush=True)
            acc_loss, acc_aux, acc_n = 0.0, 0.0, 0
    train_s = time.time() - t0
    csv_file.close()

    nll, n_scored = heldout_nll(model, held_tokens, args.ctx)
    ppl = math.exp(nll)
    print(f"held-out: {n_scored} tokens scored, nll {nll:.4f}, ppl {ppl:.3f}", flush=True)
    hf_dir = args.out / "hf"
    model.save_pretrained(hf_dir, safe_serialization=True)
    tok.save_pretrained(hf_dir)
    # save_pretrained may rewrite the tokenizer files in its own layout; keep the trained files.
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (hf_dir / f).write_bytes((args.data / "tokenizer" / f).read_bytes())
    result = {
        "arch": args.arch,
        "size": args.size,
        "hf_class": type(model).__name__,
        "parameters": n_params,
        "steps": args.steps, "batch": args.batch, "ctx": args.ctx, "lr": args.lr,
        "warmup": args.warmup, "lr_schedule": "linear warmup, cosine to lr/10",
        "optimizer": "AdamW betas (0.9, 0.95), weight decay 0.1 on matrices, grad clip 1.0",
        "seed": SEED, "threads": args.threads,
        "train_tokens": len(train_tokens), "heldout_tokens": len(held_tokens),
        "tokens_seen": args.steps * args.batch * args.ctx,
        "heldout_scored_tokens": n_scored, "heldout_nll": nll, "heldout_ppl": ppl,
        "train_seconds": round(train_s, 1),
        "config": json.loads(config.to_json_string()),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "tokenizers": __import__("tokenizers").__version__, "numpy": np.__version__},
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
