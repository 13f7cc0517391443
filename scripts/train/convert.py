#!/usr/bin/env python3
"""Run llama.cpp's own convert_hf_to_gguf.py on a trained model, registering our tokenizer's hash.

llama.cpp's converter names the pre-tokenizer (tokenizer.ggml.pre) by hashing how the tokenizer
splits a fixed test string (get_vocab_base_pre); a newly trained vocabulary has a hash it does not
know, so it refuses. Our tokenizer uses Qwen2's split regex and GPT-2 byte-level BPE, exactly the
pre-tokenizer llama.cpp calls "qwen2" (Qwen3 / qwen3moe) and "qwen35" (Qwen3.5 / qwen35moe: the same
regex with \\p{M}, which KJV text never contains). This wrapper computes that hash from the model's
own tokenizer and adds it to the table, mapping it to --pre, before calling the converter's main();
any other hash still goes through the converter's table unchanged.

  convert.py --llama-cpp DIR --pre qwen2 -- MODEL_DIR --outfile F.gguf --outtype f32

DIR is vendor/llama.cpp of the llama-cpp-python sdist; its gguf-py is put first on sys.path (the
converter does the same unless NO_LOCAL_GGUF is set).
"""
import argparse
import sys
from hashlib import sha256
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source tree")
    ap.add_argument("--pre", required=True, choices=["qwen2", "qwen35"])
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the converter's own arguments")
    args = ap.parse_args()
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    model_dir = Path(rest[0])

    root = args.llama_cpp.resolve()
    sys.path.insert(0, str(root / "gguf-py"))
    sys.path.insert(0, str(root))
    from conversion import base  # the converter's package (conversion/), next to the script

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    original = base.TextModel.get_vocab_base_pre
    # The converter's test string, taken from its own function so the hash is computed identically.
    chktxt = original.__code__.co_consts[1]
    if not isinstance(chktxt, str) or "🚀" not in chktxt:
        raise RuntimeError("could not find the converter's chktxt in get_vocab_base_pre")
    our_hash = sha256(str(tok.encode(chktxt)).encode()).hexdigest()
    print(f"[convert] tokenizer chkhsh {our_hash} -> tokenizer.ggml.pre = {args.pre!r}", flush=True)

    def get_vocab_base_pre(self, tokenizer) -> str:
        h = sha256(str(tokenizer.encode(chktxt)).encode()).hexdigest()
        if h == our_hash:
            return args.pre
        return original(self, tokenizer)

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre

    import runpy
    sys.argv = [str(root / "convert_hf_to_gguf.py"), *rest]
    runpy.run_path(str(root / "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main()
