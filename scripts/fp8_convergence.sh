#!/usr/bin/env bash
# FP8 compute against bf16 compute, same model, data, seed and schedule
# (docs/fp8.md, "Convergence"): for each model and corpus, one run with
# --weight-format bf16 and one with --weight-format fp8b128 --compute-dtype fp8,
# both plotted on one `mxdp plot`, then a summary line per pair: the final eval
# losses, their ratio, and the largest loss spike of each run (the largest rise
# of the 20-step mean train loss above its running minimum after step 200).
# The statistics are scripts/convergence_summary.py's (tested by ctest).
#
#   bash scripts/fp8_convergence.sh [build dir=build]
#   env: RUNS (runs/fp8_convergence), STEPS (2000), MODELS ("gpt2-124m:16 gpt2-350m:8"
#        as model:batch), CORPORA ("kjv stdlib"; also sitepkgs), TRAIN_ARGS (more
#        options for both runs of every pair, e.g. "--lr 6e-4 --min-lr 6e-5"), FP8_ARGS (more
#        options for the FP8 runs only, e.g. "--num-layers-at-start-in-bf16 1
#        --num-layers-at-end-in-bf16 1"), SEEDS (e.g.
#        "1 2 3": a pair per seed, then FP8's mean ratio over the seeds, its standard error,
#        whether it is within 1% at two standard errors (yes, no or undecided), in how many
#        seeds FP8 ends above bf16 with the sign test's p, and bf16's own spread from seed to
#        seed; default: one pair at mxdp's default seed), DEVICE (cuda), SEQ (1024),
#        EVAL_EVERY (250), EVAL_BATCHES (16), SAVE (1: each run's last checkpoint under RUNS,
#        1.5 GB a gpt2-124m run; 0: none, for many seeds on a small disk), PAIRS_FROM (a
#        pairs.tsv of earlier runs, e.g. another session's: its rows start this run's, so the
#        seed summaries count both; a seed in both is counted twice, so give new seeds).
#        On the CPU, as a check of the script itself:
#        DEVICE=cpu SEQ=128 MODELS="tiny:8" CORPORA=kjv STEPS=40 EVAL_EVERY=20 SEEDS="1 2"
# Corpora: kjv = the shipped data/kjv.txt (2.3 MB, byte tokens); stdlib = the
# Python standard library's .py sources concatenated (about 10 MB of real text,
# on any machine with python3: the GPU machine has no network); sitepkgs = the
# .py sources of every installed Python package (site-packages, tests left out,
# at most SITEPKGS_MB, default 256): on the GPU machine, whose Python holds
# PyTorch, JAX, transformers and more, a corpus of a few hundred MB, so that a
# run of a few thousand steps sees each token about once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
B=${1:-build}
OUT=${RUNS:-runs/fp8_convergence}
STEPS=${STEPS:-2000}
MODELS=${MODELS:-"gpt2-124m:16 gpt2-350m:8"}
CORPORA=${CORPORA:-"kjv stdlib"}
DEVICE=${DEVICE:-cuda} SEQ=${SEQ:-1024} EVAL_EVERY=${EVAL_EVERY:-250} EVAL_BATCHES=${EVAL_BATCHES:-16}
mkdir -p "$OUT"

# The .py files under some of sysconfig's paths (keys, comma-separated), in
# sorted order, concatenated into file (once) until past cap_mb; a file with a
# path part in `skip` (comma-separated) is left out.
#   py_corpus name file cap_mb skip keys
py_corpus() {
  [ -s "$2" ] && return 0
  python3 - "$@" <<'EOF'
import itertools, pathlib, sys, sysconfig
name, path, cap_mb, skip, keys = sys.argv[1:6]
roots = sorted({sysconfig.get_paths()[k] for k in keys.split(",")})
skip, cap, total, files = set(skip.split(",")), int(cap_mb) << 20, 0, 0
with open(path, "wb") as out:
    for p in itertools.chain.from_iterable(sorted(pathlib.Path(r).rglob("*.py")) for r in roots):
        if skip & set(p.parts):
            continue
        b = p.read_bytes()
        out.write(b + b"\n")
        total, files = total + len(b) + 1, files + 1
        if total > cap:
            break
print(f"{name} corpus: {total / 1e6:.1f} MB from {files} files under {', '.join(roots)}", file=sys.stderr)
EOF
}

corpus_file() {
  case $1 in
    kjv) echo data/kjv.txt ;;
    stdlib) py_corpus stdlib "$OUT/stdlib.txt" 48 site-packages,test stdlib; echo "$OUT/stdlib.txt" ;;
    sitepkgs)
      py_corpus sitepkgs "$OUT/sitepkgs.txt" "${SITEPKGS_MB:-256}" test,tests,testing purelib,platlib
      echo "$OUT/sitepkgs.txt" ;;
    *) echo "unknown corpus $1 (kjv, stdlib, sitepkgs)" >&2; exit 2 ;;
  esac
}

summary="$OUT/summary.txt" pairs="$OUT/pairs.tsv"  # pairs: what, bf16 and FP8 final eval, full precision
: >"$summary"
if [ -n "${PAIRS_FROM:-}" ]; then
  [ -s "$PAIRS_FROM" ] || { echo "PAIRS_FROM=$PAIRS_FROM: no such file, or empty" >&2; exit 2; }
  [ "$(realpath "$PAIRS_FROM")" != "$(realpath -m "$pairs")" ] || { echo "PAIRS_FROM is RUNS' own pairs.tsv: copy it elsewhere first" >&2; exit 2; }
  cp "$PAIRS_FROM" "$pairs"
else
  : >"$pairs"
fi

# One pair (bf16, then FP8) of a model, batch, corpus and seed ("default": mxdp's), plotted and summed up.
run_pair() {
  local model=$1 batch=$2 corpus=$3 data=$4 seed=$5 tag=$1-$3 v name
  local seed_args=()
  if [ "$seed" != default ]; then tag=$model-$corpus-s$seed; seed_args=(--seed "$seed"); fi
  for v in bf16 fp8; do
    name="$tag-$v"
    local args=(--weight-format bf16) save=(--save-dir "$OUT/$name/ckpt" --save-every 0 --start-over)
    [ "$v" = fp8 ] && args=(--weight-format fp8b128 --compute-dtype fp8 ${FP8_ARGS:-})
    [ "${SAVE:-1}" = 0 ] && save=()
    mkdir -p "$OUT/$name"  # the metrics file's directory, with or without a checkpoint
    "$B/mxdp" train --device "$DEVICE" --model "$model" --data "$data" --batch-size "$batch" --seq-len "$SEQ" \
      --steps "$STEPS" --eval-every "$EVAL_EVERY" --eval-batches "$EVAL_BATCHES" --sample-tokens 0 --progress lines \
      --log-every "$EVAL_EVERY" "${save[@]}" \
      --metrics "$OUT/$name/metrics.jsonl" "${args[@]}" "${seed_args[@]}" ${TRAIN_ARGS:-} \
      >"$OUT/$name.log" 2>&1 || { echo "FAILED: $name (log: $OUT/$name.log)"; tail -5 "$OUT/$name.log"; exit 1; }
    grep -E "^done:" "$OUT/$name.log" || true
  done
  "$B/mxdp" plot --metrics "$OUT/$tag-bf16/metrics.jsonl" "$OUT/$tag-fp8/metrics.jsonl" \
    --label bf16 --label fp8 --title "$model on $corpus: bf16 vs FP8 compute" --output "$OUT/$tag.svg" || true
  local what="$model $corpus"
  [ "$seed" != default ] && what="$what seed $seed"
  python3 scripts/convergence_summary.py pair "$OUT/$tag-bf16/metrics.jsonl" "$OUT/$tag-fp8/metrics.jsonl" \
    "$what" "$pairs" >>"$summary"
  tail -1 "$summary"
}

# Several seeds of one model and corpus: FP8's ratio over them beside bf16's own spread from seed to seed.
seed_summary() {
  python3 scripts/convergence_summary.py seeds "$pairs" "$1" >>"$summary"
  tail -1 "$summary"
}

for mb in $MODELS; do
  model=${mb%%:*} batch=${mb##*:}
  for corpus in $CORPORA; do
    data=$(corpus_file "$corpus")
    for seed in ${SEEDS:-default}; do run_pair "$model" "$batch" "$corpus" "$data" "$seed"; done
    if [ -n "${SEEDS:-}" ] && { [ "$(echo $SEEDS | wc -w)" -gt 1 ] || [ -n "${PAIRS_FROM:-}" ]; }; then
      seed_summary "$model $corpus"
    fi
  done
done
