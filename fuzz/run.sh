#!/usr/bin/env bash
# Fuzzes mxdp's readers of untrusted files (issue 12): the checkpoint readers
# (single file, manifest, rank file, whole step directory), the token shard
# reader, the quantized-file decoders and the metrics reader, with libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer (clang from Debian's packages,
# installed here if missing). Seeds: files mxdp's own writers produce
# (make_seeds.cpp) and, when an mxdp binary is there, files of a real run. The
# harnesses recompute checksums, so the fuzzer gets past them.
#
#   bash fuzz/run.sh [SECONDS_PER_HARNESS] [HARNESS...]     (default 120 s, all)
#   MXDP_BIN=build/mxdp bash fuzz/run.sh 300 checkpoint
#
# Builds and works in build-fuzz/ (corpora grow there between runs); a finding
# is written there as crash-*/leak-*/timeout-* and the script exits non-zero.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECONDS_EACH=${1:-120}
shift || true
HARNESSES=("$@")
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=(checkpoint shard quantize metrics)
OUT=${MXDP_FUZZ_DIR:-$ROOT/build-fuzz}
mkdir -p "$OUT"

fuzzer_rt() { ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a 2>/dev/null | head -1; }
if ! command -v clang++ >/dev/null || [ -z "$(fuzzer_rt)" ]; then
  SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq clang libclang-rt-dev || $SUDO apt-get install -y -qq clang libclang-rt-14-dev
fi
for pkg in nlohmann-json3-dev libfmt-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || { echo "fuzz: $pkg is missing (scripts/setup.sh installs it)"; exit 1; }
done

CXX=clang++
FLAGS=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -fsanitize=fuzzer-no-link -I "$ROOT/src")
# The readers under test, compiled once (again when a source changed).
OBJS=()
mkdir -p "$OUT/obj"
for src in io/checkpoint io/fileio data/data formats/quant train/plot; do
  obj=$OUT/obj/${src//\//_}.o
  if [ ! -f "$obj" ] || [ -n "$(find "$ROOT/src" -newer "$obj" -name '*.[ch]*' | head -1)" ]; then
    echo "fuzz: compiling src/$src.cpp"
    "$CXX" "${FLAGS[@]}" -c -o "$obj" "$ROOT/src/$src.cpp"
  fi
  OBJS+=("$obj")
done
build() {  # name, extra flags...
  local name=$1; shift
  local exe=$OUT/$name
  if [ ! -x "$exe" ] || [ "$ROOT/fuzz/$name.cpp" -nt "$exe" ] || [ -n "$(find "${OBJS[@]}" -newer "$exe" | head -1)" ]; then
    echo "fuzz: building $name"
    "$CXX" "${FLAGS[@]}" "$@" -o "$exe" "$ROOT/fuzz/$name.cpp" "${OBJS[@]}" -lfmt
  fi
}
build make_seeds
for h in "${HARNESSES[@]}"; do build "fuzz_$h" -fsanitize=fuzzer; done

# Seeds: mxdp's writers, then (if there is a binary) a real run's files.
SEEDS=$OUT/seeds
rm -rf "$SEEDS"
"$OUT/make_seeds" "$SEEDS"
MXDP_BIN=${MXDP_BIN:-}
for b in "$ROOT/build/mxdp" "$ROOT/build-cpu/mxdp"; do [ -n "$MXDP_BIN" ] || { [ -x "$b" ] && MXDP_BIN=$b; }; done
if [ -n "$MXDP_BIN" ] && [ -x "$MXDP_BIN" ]; then
  REAL=$OUT/real
  rm -rf "$REAL" && mkdir -p "$REAL"
  head -c 60000 "$ROOT/data/kjv.txt" > "$REAL/text.txt"
  "$MXDP_BIN" train --data "$REAL/text.txt" --model tiny --n-layer 1 --d-model 32 --seq-len 32 --batch-size 2 \
    --steps 2 --eval-every 1 --eval-batches 1 --sample-tokens 0 --threads 1 --progress lines \
    --metrics "$REAL/metrics.jsonl" --save-dir "$REAL/ck" > "$REAL/train.log"
  STEP=$REAL/ck/step_000002.ckpt
  { printf '\001'; cat "$STEP/manifest"; } > "$SEEDS/checkpoint/real_manifest"
  { printf '\002'; cat "$STEP/rank_00000.bin"; } > "$SEEDS/checkpoint/real_rank_header"
  { printf '\003'; cat "$STEP/rank_00000.bin"; } > "$SEEDS/checkpoint/real_rank_dir"
  cp "$REAL/text.txt.mxdp/train.bin" "$SEEDS/shard/real_train"
  cp "$REAL/text.txt.mxdp/val.bin" "$SEEDS/shard/real_val"
  cp "$REAL/metrics.jsonl" "$SEEDS/metrics/real_metrics"
  echo "fuzz: seeds include a real run of $MXDP_BIN"
fi

status=0
for h in "${HARNESSES[@]}"; do
  mkdir -p "$OUT/corpus/$h" "$OUT/findings"
  echo "fuzz: $h for $SECONDS_EACH s"
  if ! (cd "$OUT/findings" && "$OUT/fuzz_$h" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=2048 \
          -print_final_stats=1 "$OUT/corpus/$h" "$SEEDS/$h" > "$OUT/$h.log" 2>&1); then
    echo "fuzz: $h FOUND A PROBLEM: see $OUT/$h.log and $OUT/findings/"
    status=1
  fi
  grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb|cov:" "$OUT/$h.log" | tail -3 || true
done
exit $status
