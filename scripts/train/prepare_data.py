#!/usr/bin/env python3
"""Split the King James Bible into train / held-out text and train a small byte-level BPE tokenizer.

Input: the dump of Debian's bible-kjv-text made by setup.sh (`bible -l100000 Gen1:1-Rev22:21`):
chapter headers ("Ruth 1") followed by verses ("  1 Now it came to pass ..."), one verse a line.
Output (in --out):
  train.txt, heldout.txt   one verse a line, verse numbers and chapter headers dropped, books in
                           canonical order; a blank line between books
  tokenizer/               tokenizer.json (+ tokenizer_config.json, special_tokens_map.json) in the
                           layout of Qwen's tokenizers: GPT-2 byte-level BPE behind the Qwen2 split
                           regex, so llama.cpp's "qwen2" / "qwen35" pre-tokenizers apply
  split.json               which books went where, verse and character counts
"""
import argparse
import json
import re
from pathlib import Path

# Held out for evaluation: whole books, from both testaments, narrative and letter styles.
HELDOUT_BOOKS = ["Ruth", "Jonah", "Philemon", "3 John"]

# Qwen2's split regex (llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN2). qwen35 differs only by
# \p{M} in two classes; KJV text has no combining marks, so one tokenizer serves both architectures.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Plain ChatML, written to the GGUF as tokenizer.chat_template. The models never saw
# it in training: it is there so that chat front ends have a template to apply.
CHATML_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                   "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

CHAPTER_RE = re.compile(r"^(?P<book>[1-3]?[A-Za-z ]+?) (?P<chapter>\d+)$")
VERSE_RE = re.compile(r"^\s+(?P<verse>\d+) (?P<text>.*)$")


def parse_books(dump: str) -> dict[str, list[str]]:
    books: dict[str, list[str]] = {}
    current = None
    for line in dump.splitlines():
        if not line.strip():
            continue
        if m := CHAPTER_RE.match(line):
            current = books.setdefault(m["book"], [])
            continue
        m = VERSE_RE.match(line)
        if m is None or current is None:
            raise ValueError(f"unexpected line in KJV dump: {line!r}")
        current.append(m["text"].strip())
    return books


def train_tokenizer(train_text: Path, out_dir: Path, vocab_size: int) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    # Same pipeline as Qwen2/Qwen3's tokenizer.json: regex split (isolated), then byte-level
    # mapping without its own regex.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, as GPT-2
        special_tokens=[],
        show_progress=False,
    )
    tok.train([str(train_text)], trainer)
    # Specials after the BPE vocabulary, as in Qwen's files (ids vocab-3 .. vocab-1).
    tok.add_special_tokens(SPECIAL_TOKENS)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    # PreTrainedTokenizerFast loads tokenizer.json as it is (a model-specific class could rebuild
    # the pipeline from its own defaults).
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHATML_TEMPLATE,
    }, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps({
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
    }, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", type=Path, required=True, help="KJV text as printed by `bible -l100000`")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab-size", type=int, default=2048, help="including the 3 special tokens")
    args = ap.parse_args()

    books = parse_books(args.dump.read_text(encoding="utf-8"))
    if len(books) != 66:
        raise ValueError(f"expected 66 books, parsed {len(books)}")
    for b in HELDOUT_BOOKS:
        if b not in books:
            raise ValueError(f"held-out book {b!r} not in the dump")
    train_books = [b for b in books if b not in HELDOUT_BOOKS]
    args.out.mkdir(parents=True, exist_ok=True)
    train = "\n\n".join("\n".join(books[b]) for b in train_books) + "\n"
    held = "\n\n".join("\n".join(books[b]) for b in HELDOUT_BOOKS) + "\n"
    (args.out / "train.txt").write_text(train, encoding="utf-8")
    (args.out / "heldout.txt").write_text(held, encoding="utf-8")
    split = {
        "heldout_books": HELDOUT_BOOKS,
        "heldout_verses": sum(len(books[b]) for b in HELDOUT_BOOKS),
        "heldout_chars": len(held),
        "train_books": len(train_books),
        "train_verses": sum(len(books[b]) for b in train_books),
        "train_chars": len(train),
        "vocab_size": args.vocab_size,
    }
    train_tokenizer(args.out / "train.txt", args.out / "tokenizer", args.vocab_size)
    (args.out / "split.json").write_text(json.dumps(split, indent=2) + "\n")
    print(json.dumps(split))


if __name__ == "__main__":
    main()
