#!/usr/bin/env bash
# bench/compare.sh: cutrain against PyTorch on one GPU, in one run (issue [compare]).
#
# Trains, for the same epochs and seeds, on the Fashion-MNIST JPEG list:
#   cutrain             bin/cutrain train (its defaults, or the options below)
#   torch-dataloader    bench/torch_reference.py --mode dataloader (16 workers, PIL, pinned,
#                       persistent; AMP fp16 + GradScaler, channels_last, cudnn.benchmark)
#   torch-resident      bench/torch_reference.py --mode resident (data decoded once onto the
#                       GPU, augmentation there, torch.compile): PyTorch at its strongest
# Both PyTorch runs read cutrain's resolved OUT/config.json of the same seed, so model, recipe
# and data are cutrain's by construction. While each run trains, nvidia-smi samples the GPU's
# utilization every 100 ms. bin/bench_data measures the loader alone on the same list, for
# cutrain's pipeline / max(load, compute). The table (bench/torch_ref/report.py) goes to
# bench/results/compare-<date>-<gpu>.md with the date, GPU, driver, commit and every setting.
#
#   bench/compare.sh                      # 10 epochs (cutrain's default), seed 1
#   bench/compare.sh --seeds 3            # seeds 0, 1, 2
#   bench/compare.sh --dry-run            # print the plan, check the scripts; no GPU needed
#   bench/compare.sh --cpu-check          # the whole chain on the CPU on a tiny subset: a test
#                                         # of the scripts, NOT a performance comparison
# Options: --epochs N, --model NAME, --augment, --batch N, --workers N (PyTorch, 16),
# --threads N (cutrain's decode threads; 0: its default), --data DIR, --out DIR,
# --results FILE, --target 0.93, --python PY, --jobs N (make -j, 2).
# PyTorch is not a dependency of cutrain (`make deps` leaves it out): install it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

EPOCHS=10 SEEDS=1 MODEL=default AUGMENT="" BATCH="" WORKERS=16 THREADS=0 TARGET=0.93
DATA=data-cache/fashion-mnist OUT="" RESULTS="" PY=${PYTHON:-python3} JOBS=2
DRY=0 CPU_CHECK=0 LIMIT_TRAIN=0 LIMIT_VAL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) EPOCHS=$2; shift ;;
    --seeds) SEEDS=$2; shift ;;
    --model) MODEL=$2; shift ;;
    --augment) AUGMENT=--augment ;;
    --batch) BATCH=$2; shift ;;
    --workers) WORKERS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --target) TARGET=$2; shift ;;
    --data) DATA=$2; shift ;;
    --out) OUT=$2; shift ;;
    --results) RESULTS=$2; shift ;;
    --python) PY=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    --dry-run) DRY=1 ;;
    --cpu-check) CPU_CHECK=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$CPU_CHECK" = 1 ]; then  # small enough for 2 CPU cores in a few minutes
  EPOCHS=${CPU_EPOCHS:-2} SEEDS=1 WORKERS=2 LIMIT_TRAIN=${CPU_TRAIN:-640} LIMIT_VAL=500
  BATCH=${BATCH:-64}
fi
# One seed: cutrain's default (1). Several: 0, 1, ..., N-1.
if [ "$SEEDS" = 1 ]; then SEED_LIST=1; else SEED_LIST=$(seq 0 $((SEEDS - 1))); fi
STAMP=$(date +%Y-%m-%d)
OUT=${OUT:-runs/compare-$(date +%Y%m%d-%H%M%S)}
SETTINGS="cutrain torch-dataloader torch-resident"

say() { printf 'compare: %s\n' "$*"; }
plan() {
  say "plan: $SETTINGS; model $MODEL, $EPOCHS epochs, seeds $(echo $SEED_LIST), batch" \
      "${BATCH:-cutrain default}${AUGMENT:+, augment}; PyTorch workers $WORKERS;" \
      "data $DATA; runs in $OUT"
  for s in $SEED_LIST; do
    say "  bin/cutrain train --train $DATA/train.txt --val $DATA/test.txt --model $MODEL" \
        "--epochs $EPOCHS --seed $s ${BATCH:+--batch $BATCH }$AUGMENT --out $OUT/cutrain-s$s"
    for m in dataloader resident; do
      say "  $PY bench/torch_reference.py --config $OUT/cutrain-s$s/config.json --mode $m" \
          "--workers $WORKERS --out $OUT/torch-$m-s$s"
    done
  done
  say "  bin/bench_data --list $DATA/train.txt (the loader alone); nvidia-smi sampling"
}

# ---- checks that need no GPU ------------------------------------------------------------
[ -x bin/cutrain ] || { say "building cutrain (make -j$JOBS)"; make -j"$JOBS" >/dev/null; }
bash -n "$0"
"$PY" -m py_compile bench/torch_reference.py bench/torch_ref/*.py
HAVE_TORCH=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
[ -n "$HAVE_TORCH" ] || { say "no PyTorch for $PY: install it (pip install torch torchvision," \
                               "or apt-get install python3-torch python3-pil) or pass --python"; \
                           [ "$DRY" = 1 ] && { plan; exit 0; }; exit 2; }
"$PY" bench/torch_reference.py --check --model "$MODEL" > /dev/null \
  || { say "the PyTorch model differs from cutrain's:"; "$PY" bench/torch_reference.py --check --model "$MODEL"; exit 1; }
say "scripts check: PyTorch $HAVE_TORCH; the PyTorch $MODEL equals cutrain's, layer by layer"

GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
TORCH_CUDA=$("$PY" -c 'import torch; print(torch.cuda.is_available())' 2>/dev/null || true)
CUTRAIN_GPU=$(bin/cutrain info 2>/dev/null | grep -c 'training (--device auto):.*cuda' || true)
if [ "$DRY" = 1 ]; then
  plan
  say "GPU: ${GPU:-none}; torch.cuda: ${TORCH_CUDA:-?}; cutrain trains on the GPU:" \
      "$([ "$CUTRAIN_GPU" -gt 0 ] && echo yes || echo no)"
  exit 0
fi
if [ "$CPU_CHECK" = 0 ]; then
  [ -n "$GPU" ] && [ "$TORCH_CUDA" = True ] \
    || { say "no usable GPU (nvidia-smi: ${GPU:-none}; torch.cuda: ${TORCH_CUDA:-?}): this" \
             "comparison needs one. --dry-run checks the scripts; --cpu-check runs them on the CPU."; exit 2; }
  [ "$CUTRAIN_GPU" -gt 0 ] \
    || { say "cutrain would train on the CPU here ($(bin/cutrain info | grep 'not on a GPU' || true))." \
             "Comparing that with PyTorch on the GPU measures nothing: build it with the CUDA kernels first."; exit 2; }
fi

# ---- the runs ---------------------------------------------------------------------------
mkdir -p "$OUT"
bin/cutrain import-fashion-mnist --out "$DATA" > "$OUT/import.log"
LIMITS=""
[ "$LIMIT_TRAIN" -gt 0 ] && LIMITS="--limit-train $LIMIT_TRAIN --limit-val $LIMIT_VAL"
DEVICE_ARGS=""
[ "$CPU_CHECK" = 1 ] && DEVICE_ARGS="--device cpu"

# run NAME COMMAND...: the command's wall time to NAME/wall_s, its output to NAME/log, and
# the GPU's utilization samples to NAME/gpu_util.txt while it runs.
run() {
  local dir=$OUT/$1; shift
  mkdir -p "$dir"
  local sampler=""
  if [ -n "$GPU" ]; then
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
      > "$dir/gpu_util.txt" 2>/dev/null &
    sampler=$!
  fi
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  "$@" > "$dir/log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null || true
  awk "BEGIN { print $t1 - $t0 }" > "$dir/wall_s"  # no bc needed
  [ "$rc" = 0 ] || { say "$1 failed (exit $rc): see $dir/log"; tail -5 "$dir/log"; exit 1; }
  say "$(basename "$dir"): $(cat "$dir/wall_s") s"
}

for s in $SEED_LIST; do
  run "cutrain-s$s" bin/cutrain train --train "$DATA/train.txt" --val "$DATA/test.txt" \
    --model "$MODEL" --epochs "$EPOCHS" --seed "$s" ${BATCH:+--batch "$BATCH"} $AUGMENT \
    --threads "$THREADS" $LIMITS $DEVICE_ARGS --out "$OUT/cutrain-s$s"
  for m in dataloader resident; do
    run "torch-$m-s$s" "$PY" bench/torch_reference.py --config "$OUT/cutrain-s$s/config.json" \
      --mode "$m" --workers "$WORKERS" ${DEVICE_ARGS} --target "$TARGET" --out "$OUT/torch-$m-s$s"
  done
done

# The loader alone on the same list, size and threads: load-only for the pipeline ratio.
CFG=$OUT/cutrain-s$(echo $SEED_LIST | cut -d' ' -f1)/config.json
read -r SIZE CH B TH < <("$PY" -c "import json; c=json.load(open('$CFG')); print(c['size'], c['channels'], c['batch'], c['threads'] or 0)")
CORES=$(getconf _NPROCESSORS_ONLN)  # not nproc: it follows OMP_NUM_THREADS
[ "$TH" -gt 0 ] || TH=$(( CORES > 1 ? CORES - 1 : 1 ))
bin/bench_data --list "$DATA/train.txt" --size "$SIZE" --resize "$SIZE" --channels "$CH" \
  --batch "$B" --threads "$TH" > "$OUT/bench_data.txt"
grep "| JPEG, $TH threads |" "$OUT/bench_data.txt" | head -1 | awk -F'|' '{gsub(/ /,"",$3); print $3}' \
  > "$OUT/load_only.txt"

# ---- the results file -------------------------------------------------------------------
if [ "$CPU_CHECK" = 1 ]; then
  RESULTS=${RESULTS:-bench/results/compare-cpu-check-$STAMP.md}
  TITLE="cutrain vs PyTorch: a CPU check of the scripts (NOT a performance comparison)"
  DEV="none: CPU only ($(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
  DRIVER="n/a"
else
  GPU_SLUG=$(echo "$GPU" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
  RESULTS=${RESULTS:-bench/results/compare-$STAMP-$GPU_SLUG.md}
  TITLE="cutrain vs PyTorch on $GPU"
  DEV="$GPU"
  DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
fi
# The commit measured: $CUTRAIN_COMMIT (the bundle's, on a GPU host whose copy has no .git), else git's.
if [ -n "${CUTRAIN_COMMIT:-}" ]; then
  COMMIT=$CUTRAIN_COMMIT
elif git rev-parse --short HEAD >/dev/null 2>&1; then
  COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench/results' || echo "-dirty")
else
  COMMIT=unknown
fi
TORCH_INFO=$("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())')
{
  echo "# $TITLE"
  echo
  echo "Date: $STAMP. Device: $DEV. Driver: $DRIVER. Commit: $COMMIT. PyTorch: $TORCH_INFO."
  echo "Command: \`bench/compare.sh --epochs $EPOCHS --seeds $SEEDS --model $MODEL${BATCH:+ --batch $BATCH} $AUGMENT --workers $WORKERS$([ "$CPU_CHECK" = 1 ] && echo ' --cpu-check')\`."
  echo
  echo "Settings, for every run (cutrain's resolved config.json, which the PyTorch runs read):"
  "$PY" -c "
import json; c = json.load(open('$CFG'))
keys = ['model', 'size', 'channels', 'classes', 'epochs', 'batch', 'accum', 'optimizer', 'lr',
        'momentum', 'wd', 'schedule', 'warmup', 'label_smoothing', 'augment', 'pad', 'mean',
        'std', 'limit_train', 'limit_val', 'threads']
print('; '.join(f'{k} {json.dumps(c[k])}' for k in keys) + '.')"
  echo "Seeds: $(echo $SEED_LIST). PyTorch DataLoader workers: $WORKERS. Data: \`$DATA\`" \
       "(cutrain import-fashion-mnist)."
  echo
  "$PY" bench/torch_ref/report.py "$OUT" "$TARGET" $SETTINGS
  echo
  echo "How each column is measured: bench/torch_ref/report.py. Runs: \`$OUT\`."
} > "$RESULTS"
say "wrote $RESULTS"
cat "$RESULTS"
