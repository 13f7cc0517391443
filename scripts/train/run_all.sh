#!/usr/bin/env bash
# Builds the trained reference models of tests/data/trained/ from scratch:
#   setup.sh (venv, converter, KJV text) -> prepare_data.py (split, tokenizer) -> train.py (per
#   architecture) -> convert.py (F32 and Q8_0 GGUFs) -> verify_llamacpp.py (llama.cpp loads them,
#   perplexity, greedy samples) -> make_card.py (cards, SHA256SUMS).
# Training takes about 30 (qwen3moe, 4000 steps) + 15 (qwen35moe, 1200 steps) + 30 (the w256
# qwen3moe, 4000 steps) minutes on one idle core, more on a busy machine (70 + 35 here for the first
# two, sharing 2 cores); the models train one after the other, niced. LLAMA_PY: a python with
# llama_cpp for the verification (default: .venv/bin/python); without one the cards have no samples.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/scripts/train"
cd "$root"
bash "$here/setup.sh"
py="$root/.venv-train/bin/python"
work="$root/.cache/train"
data="$work/data"
dest="$root/tests/data/trained"
llama_cpp="$root/.cache/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp"
llama_py="${LLAMA_PY:-$root/.venv/bin/python}"
# The models: name, architecture, train.py --size, steps, the unquantized file's type. The w256
# model (every matrix 256 wide, so llama.cpp's quantizer writes real K-quants into it) is kept at
# F16, not F32, to halve its size in git. MODELS="kjv-qwen3moe-w256" for a subset.
all_models=(
  "kjv-qwen3moe qwen3moe small 4000 f32"
  "kjv-qwen35moe qwen35moe small 1200 f32"
  "kjv-qwen3moe-w256 qwen3moe w256 4000 f16"
)
declare -A pre=([qwen3moe]=qwen2 [qwen35moe]=qwen35)

nice -n 5 "$py" "$here/prepare_data.py" --dump "$work/kjv-dump.txt" --out "$data" --vocab-size 2048
"$py" "$here/hf_tokens.py" "$data/tokenizer" "$data/heldout.txt" "$data/heldout.tokens.json"
mkdir -p "$dest"
for entry in "${all_models[@]}"; do
  read -r name arch size steps base <<<"$entry"
  [[ -z ${MODELS:-} || " $MODELS " == *" $name "* ]] || continue
  run="$work/runs/${name#kjv-}"
  nice -n 5 "$py" "$here/train.py" --arch "$arch" --size "$size" --data "$data" --out "$run" --steps "$steps"
  extra=(); [[ $arch == qwen35moe ]] && extra=(--no-mtp)  # no MTP block in these models
  for t in "$base" q8_0; do
    "$py" "$here/convert.py" --llama-cpp "$llama_cpp" --pre "${pre[$arch]}" -- "$run/hf" \
      --outfile "$dest/$name-$t.gguf" --outtype "$t" --model-name "$name" "${extra[@]}"
  done
  verify=()
  if [[ -x "$llama_py" ]] && "$llama_py" -c 'import llama_cpp' 2>/dev/null; then
    "$llama_py" "$here/verify_llamacpp.py" "$dest/$name-$base.gguf" "$dest/$name-q8_0.gguf" \
      --heldout "$data/heldout.txt" --hf-tokens "$data/heldout.tokens.json" --out "$run/verify.json"
    verify=(--verify "$run/verify.json")
  else
    echo "[run_all] no llama_cpp in $llama_py: cards without llama.cpp results" >&2
  fi
  "$py" "$here/make_card.py" --run "$run" --data "$data" --dest "$dest" --name "$name" --base-type "$base" \
    --source "$work/kjv-source.txt" "${verify[@]}"
done
