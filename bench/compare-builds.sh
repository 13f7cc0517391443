#!/usr/bin/env bash
# Before/after figures of two ferry binaries on the same machine: the same `ferry bench` command,
# run with each binary in turn (before, after, before, after, ...), then one markdown table of
# medians, spreads and ratios on stdout (bench/compare_builds.py). Progress goes to stderr.
#
#   bench/compare-builds.sh BEFORE_BIN AFTER_BIN MODEL [RUNS=5]
#
# Environment (defaults: the qwen35moe small preset, Q4_K_M, on the 2-core build machine):
#   VRAM=1230M     the budget beside "none": 192 of the 384 routed experts in slots at P+N = 192
#                  (qwen3moe small: 1066M); VRAM= (empty) runs only the unconstrained load
#   ROUTING=locality  P=128  N=64  REPS=2  THREADS=$(nproc)
#   DEVICE=sim     EXTRA="..."  more `ferry bench` flags, given to both binaries
#   RAW_DIR        where the raw jsonl/stderr of every run go (default: a new folder under /tmp)
#   BEFORE_NAME, AFTER_NAME  labels for the header, e.g. the commits the binaries were built from
set -euo pipefail
if [[ $# -lt 3 || $# -gt 4 ]]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
before=$1 after=$2 model=$3 runs=${4:-5}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for b in "$before" "$after"; do [[ -x "$b" ]] || { echo "compare-builds: $b is not an executable" >&2; exit 2; }; done
[[ -f "$model" ]] || { echo "compare-builds: no model file $model" >&2; exit 2; }
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "compare-builds: RUNS '$runs' is not a positive integer" >&2; exit 2; }

VRAM=${VRAM-1230M}
ROUTING=${ROUTING:-locality} P=${P:-128} N=${N:-64} REPS=${REPS:-2} THREADS=${THREADS:-$(nproc)}
DEVICE=${DEVICE:-sim} EXTRA=${EXTRA:-}
raw=${RAW_DIR:-$(mktemp -d /tmp/compare-builds.XXXXXX)}
mkdir -p "$raw"
: > "$raw/runs.tsv"

vram_list=none${VRAM:+,$VRAM}
# shellcheck disable=SC2206  # EXTRA is meant to split into flags
args=(bench -m "$model" --device "$DEVICE" --vram "$vram_list" --routing "$ROUTING"
      -p "$P" -n "$N" -r "$REPS" -t "$THREADS" $EXTRA -o jsonl)

load1() { cut -d' ' -f1 /proc/loadavg; }
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
start_utc=$(date -u '+%Y-%m-%d %H:%M:%S')
for ((i = 1; i <= runs; ++i)); do
  for side in before after; do
    bin=$before; [[ $side == after ]] && bin=$after
    l=$(load1)
    t0=$(date +%s.%N)
    echo "compare-builds: run $i/$runs $side (load $l)" >&2
    rc=0
    "$bin" "${args[@]}" > "$raw/$side-$i.jsonl" 2> "$raw/$side-$i.err" || rc=$?
    t1=$(date +%s.%N)
    [[ $rc == 0 ]] || echo "compare-builds: $side run $i exited $rc (see $raw/$side-$i.err)" >&2
    printf '%s\t%s\t%s\t%s\t%s\n' "$side" "$i" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$l" >> "$raw/runs.tsv"
  done
done
end_utc=$(date -u '+%H:%M:%S')
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

describe() {  # [label] path, size and sha256 prefix of a binary
  printf '%s`%s` (%s bytes, sha256 %s)' "${2:+$2, }" "$1" "$(stat -c %s "$1")" "$(sha256sum "$1" | cut -c1-12)"
}
cpuinfo() { grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'; }
cpu="$(cpuinfo 'model name') (family $(cpuinfo 'cpu family') model $(cpuinfo model))"
grep -qw avx512f /proc/cpuinfo && cpu+=", AVX-512" || { grep -qw avx2 /proc/cpuinfo && cpu+=", AVX2"; }
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
shell_word() {  # quote a word only when the shell needs it
  if [[ $1 =~ ^[A-Za-z0-9_./,:=+@%-]+$ ]]; then printf '%s' "$1"; else printf '%q' "$1"; fi
}
quoted=""
for a in "${args[@]}"; do quoted+=" $(shell_word "$a")"; done

echo "# Before / after: \`ferry bench\` on the $DEVICE device ($start_utc–$end_utc UTC)"
echo
echo "Machine: $(nproc) CPUs (\`nproc\`), $cpu, $mem; $(uname -sr)."
echo "Load average (1/5/15 min): $load_start at the start, $load_end at the end."
if awk -v l="${load_start%% *}" -v n="$(nproc)" 'BEGIN { exit !(l > n * 0.75) }'; then
  echo "**The machine was busy at the start (load above 0.75 × nproc): not a final result.**"
fi
echo
echo "- before: $(describe "$before" "${BEFORE_NAME:-}")"
echo "- after: $(describe "$after" "${AFTER_NAME:-}")"
echo "- model: \`$model\` ($(stat -c %s "$model") bytes)"
echo
echo "$runs runs per binary, interleaved (before, after, before, after, ...); each run is one process:"
echo
printf '    %s%s\n' "$(shell_word "$before")" "$quoted" "$(shell_word "$after")" "$quoted"
echo
echo "Raw output: \`$raw\`."
echo
python3 "$here/compare_builds.py" "$raw" --runs "$runs"
