#!/usr/bin/env bash
# bench/compare.sh: cutrain against PyTorch at its strongest, on one GPU, in one run ([peer]).
#
# Fashion-MNIST (the JPEG list of `cutrain import-fashion-mnist`), for the same epochs and
# seeds, at each batch of --batches (the learning rate scaled with the batch, 0.1 x B/128, the
# warm-up one epoch), these settings:
#   cutrain              bin/cutrain train --no-cuda-graph (every kernel launched by the host)
#   cutrain-graph        bin/cutrain train (its defaults, CUDA graphs on, or the options below)
#   torch-dataloader     bench/torch_reference.py --mode dataloader (16 workers, PIL, pinned,
#                        persistent; AMP + GradScaler, plain SGD): the usual setup
#   torch-resident       --mode resident (data on the GPU, torch.compile default)
#   torch-tuned-graph    --mode tuned-graph: resident, channels_last, the scaler's check inside a
#                        fused SGD, the whole step one CUDA graph: PyTorch at its strongest
#   torch-tuned-compile  --mode tuned-compile: the same under torch.compile max-autotune
# The PyTorch runs read cutrain's resolved OUT/config.json of the same seed and batch, so model,
# recipe and data are cutrain's by construction. Every run times its steps on the device's own
# clock (busy, the bound); nvidia-smi also samples the GPU every 100 ms. The table
# (bench/torch_ref/report.py) goes to bench/results/compare-<date>-<gpu>.md with the date, GPU,
# driver, commit and every setting.
#
# --photos: the decode-heavy workload instead. bin/bench_photos writes 5,000 + 1,000 synthetic
# photo-like JPEGs (400-600 px, >= 1.5 bits per pixel); a probe times, for each candidate model
# and size (--photo-candidates), the loader alone and the GPU's compute alone from a short cutrain
# run's own records, and takes the candidate where the two are closest (within 2x when one is);
# then cutrain, torch-dataloader (16 workers, PIL at a DCT scale) and torch-gpu-decode
# (torchvision.io.decode_jpeg on the GPU) train on it, decoding every epoch.
#
#   bench/compare.sh                      # batches 128 and 512, 3 seeds, 10 epochs
#   bench/compare.sh --batches 128 --seeds 1 --settings "cutrain torch-tuned-graph"
#   bench/compare.sh --photos --seeds 1 --epochs 3
#   bench/compare.sh --dry-run            # the plan, the scripts and the model checked; no GPU
#   bench/compare.sh --cpu-check          # the whole chain on the CPU on a tiny subset: a test
#                                         # of the scripts, NOT a performance comparison
# Options: --epochs N, --seeds N, --batches "128 512", --settings "...", --model NAME, --augment,
# --workers N (PyTorch, 16), --threads N (cutrain's decode threads; 0: its default), --data DIR,
# --photos, --photo-dir DIR, --photo-candidates "default:96:112 default:112:128 resnet:64:72"
# (model:size:resize), --out DIR, --results FILE, --target 0.93, --python PY, --jobs N (make -j).
# PyTorch is not a dependency of cutrain (`make deps` leaves it out): install it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

EPOCHS=10 SEEDS=3 BATCHES="128 512" MODEL=default AUGMENT="" WORKERS=16 THREADS=0 TARGET=0.93
DATA=data-cache/fashion-mnist OUT="" RESULTS="" PY=${PYTHON:-python3} JOBS=2
DRY=0 CPU_CHECK=0 LIMIT_TRAIN=0 LIMIT_VAL=0 SETTINGS="" PHOTOS=0 PHOTO_DIR=data-cache/photos
PHOTO_CANDIDATES="default:96:112 default:112:128 resnet:64:72"
PHOTO_TRAIN=5000 PHOTO_TEST=1000
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) EPOCHS=$2; shift ;;
    --seeds) SEEDS=$2; shift ;;
    --batches) BATCHES=$2; shift ;;
    --batch) BATCHES=$2; shift ;;
    --settings) SETTINGS=$2; shift ;;
    --model) MODEL=$2; shift ;;
    --augment) AUGMENT=--augment ;;
    --workers) WORKERS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --target) TARGET=$2; shift ;;
    --data) DATA=$2; shift ;;
    --photos) PHOTOS=1 ;;
    --photo-dir) PHOTO_DIR=$2; shift ;;
    --photo-candidates) PHOTO_CANDIDATES=$2; shift ;;
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
if [ "$PHOTOS" = 1 ]; then
  SETTINGS=${SETTINGS:-"cutrain torch-dataloader torch-gpu-decode"}
else
  # cutrain first (the PyTorch runs read its config.json), then the settings that matter most,
  # so that a window that runs out of time still has them (the table is rewritten after each run)
  SETTINGS=${SETTINGS:-"cutrain torch-tuned-graph cutrain-graph torch-dataloader torch-tuned-compile torch-resident"}
fi
if [ "$CPU_CHECK" = 1 ]; then  # small enough for 2 CPU cores in a few minutes
  EPOCHS=${CPU_EPOCHS:-2} SEEDS=1 WORKERS=2 LIMIT_TRAIN=${CPU_TRAIN:-640} LIMIT_VAL=500
  BATCHES=${CPU_BATCHES:-64} PHOTO_TRAIN=320 PHOTO_TEST=100
  PHOTO_CANDIDATES=${CPU_PHOTO_CANDIDATES:-"default:32:40"}
  SETTINGS=$(echo " $SETTINGS " | sed 's/ cutrain-graph / /; s/ torch-tuned-graph / /') # CUDA only
fi
# One seed: cutrain's default (1). Several: 0, 1, ..., N-1.
if [ "$SEEDS" = 1 ]; then SEED_LIST=1; else SEED_LIST=$(seq 0 $((SEEDS - 1))); fi
STAMP=$(date +%Y-%m-%d)
OUT=${OUT:-runs/compare-$(date +%Y%m%d-%H%M%S)}
LIMITS=""
[ "$LIMIT_TRAIN" -gt 0 ] && LIMITS="--limit-train $LIMIT_TRAIN --limit-val $LIMIT_VAL"

say() { printf 'compare: %s\n' "$*"; }
lr_of() { awk "BEGIN { print 0.1 * $1 / 128 }"; }  # the learning rate scaled with the batch

# The command of one run: setting, seed, batch, its folder, the data's train and val lists,
# and (photos) the size, resize and model.
cmd_of() {
  local setting=$1 seed=$2 batch=$3 dir=$4 train=$5 val=$6 model=$7 size=$8 resize=$9
  local shape="" cpu=""
  [ -n "$size" ] && shape="--size $size --resize $resize"
  [ "$CPU_CHECK" = 1 ] && cpu="--device cpu"
  case $setting in
    cutrain|cutrain-graph)
      echo "bin/cutrain train --train $train --val $val --model $model --epochs $EPOCHS" \
           "--seed $seed --batch $batch --lr $(lr_of "$batch") $shape $AUGMENT --threads $THREADS" \
           "$LIMITS $cpu $([ "$setting" = cutrain ] && echo --no-cuda-graph) --out $dir" ;;
    torch-*)
      echo "$PY bench/torch_reference.py --config $(dirname "$dir")/cutrain-s$seed/config.json" \
           "--mode ${setting#torch-} --workers $WORKERS $cpu --target $TARGET --out $dir" ;;
  esac
}

plan() {
  say "plan: $SETTINGS; $EPOCHS epochs, seeds $(echo $SEED_LIST), batches $BATCHES" \
      "${AUGMENT:+, augment}; PyTorch workers $WORKERS; runs in $OUT"
  if [ "$PHOTOS" = 1 ]; then
    say "  bin/bench_photos --out $PHOTO_DIR --train $PHOTO_TRAIN --test $PHOTO_TEST"
    say "  probe, for each of $PHOTO_CANDIDATES: a short cutrain run's loader-alone and" \
        "compute-alone rates; the closest pair is trained on"
  fi
  for b in $BATCHES; do
    for s in $SEED_LIST; do
      for setting in $SETTINGS; do
        say "  $(cmd_of "$setting" "$s" "$b" "$OUT/b$b/$setting-s$s" "$DATA/train.txt" \
                 "$DATA/test.txt" "$MODEL" "" "" | tr -s ' ')"
      done
    done
  done
}

# ---- checks that need no GPU ------------------------------------------------------------
[ -x bin/cutrain ] || { say "building cutrain (make -j$JOBS)"; make -j"$JOBS" >/dev/null; }
bash -n "$0"
"$PY" -m py_compile bench/torch_reference.py bench/torch_ref/*.py
HAVE_TORCH=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
[ -n "$HAVE_TORCH" ] || { say "no PyTorch for $PY: install it (pip install torch torchvision)" \
                               "or pass --python"; \
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

# run DIR COMMAND...: the command's wall time to DIR/wall_s, its output to DIR/log, and the
# GPU's utilization samples to DIR/gpu_util.txt while it runs.
run() {
  local dir=$1; shift
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
  [ "$rc" = 0 ] || { say "$(basename "$dir") failed (exit $rc): see $dir/log"; tail -5 "$dir/log"; return 1; }
  say "$(basename "$dir"): $(cat "$dir/wall_s") s"
}

# The training and validation lists, and the model and shape (photos: the probe's choice).
P_MODEL=$MODEL P_SIZE="" P_RESIZE="" PROBE=""
if [ "$PHOTOS" = 1 ]; then
  bin/bench_photos --out "$PHOTO_DIR" --train "$PHOTO_TRAIN" --test "$PHOTO_TEST" | tee "$OUT/photos.txt"
  TRAIN_LIST=$PHOTO_DIR/train.txt VAL_LIST=$PHOTO_DIR/test.txt
  # The probe: one short run per candidate; from its last step record, the loader alone and
  # the compute alone in images/s (images_per_s over loader_pct and busy_pct).
  PROBE="| candidate (model:size:resize) | loader alone, images/s | compute alone, images/s | ratio |
| --- | --- | --- | --- |"
  best=""
  for c in $PHOTO_CANDIDATES; do
    IFS=: read -r m sz rs <<< "$c"
    d=$OUT/probe-$m-$sz
    run "$d" bin/cutrain train --train "$TRAIN_LIST" --model "$m" --size "$sz" --resize "$rs" \
      --epochs 1 --limit-train $((PHOTO_TRAIN < 2048 ? PHOTO_TRAIN : 2048)) --batch 128 \
      --log-every 4 --threads "$THREADS" $([ "$CPU_CHECK" = 1 ] && echo --device cpu) --out "$d" \
      || continue
    rates=$("$PY" - "$d/metrics.jsonl" <<'EOF'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1]))
         if r["kind"] == "step" and r.get("busy_pct") and r.get("loader_pct")]
s = steps[-1]
loader = s["images_per_s"] * 100 / s["loader_pct"]
compute = s["images_per_s"] * 100 / s["busy_pct"]
print(f"{loader:.0f} {compute:.0f} {max(loader, compute) / min(loader, compute):.2f}")
EOF
    ) || { say "probe $c: no step record with the device's clock in $d/metrics.jsonl"; continue; }
    read -r lr cr ratio <<< "$rates"
    PROBE="$PROBE
| $c | $lr | $cr | $ratio |"
    if [ -z "$best" ] || awk "BEGIN { exit !($ratio < $best_ratio) }"; then best=$c best_ratio=$ratio; fi
  done
  [ -n "$best" ] || { say "every probe run failed: see $OUT/probe-*/log"; exit 1; }
  IFS=: read -r P_MODEL P_SIZE P_RESIZE <<< "$best"
  PROBE="$PROBE

Chosen: $best (loader alone and compute alone $best_ratio x apart$(awk "BEGIN { exit !($best_ratio > 2) }" && echo '; no candidate came within 2x'))."
  say "photos: $best, the loader and the compute ${best_ratio}x apart"
else
  bin/cutrain import-fashion-mnist --out "$DATA" > "$OUT/import.log"
  TRAIN_LIST=$DATA/train.txt VAL_LIST=$DATA/test.txt
fi

# ---- the results file: written after every run, so a run cut short keeps what it measured
write_results() {
  what=$([ "$PHOTOS" = 1 ] && echo "the decode-heavy photos" || echo "Fashion-MNIST")
  if [ "$CPU_CHECK" = 1 ]; then
    RESULTS=${RESULTS:-bench/results/compare-cpu-check-$STAMP.md}
    TITLE="cutrain vs PyTorch on $what: a CPU check of the scripts (NOT a performance comparison)"
    DEV="none: CPU only ($(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
    DRIVER="n/a"
  else
    GPU_SLUG=$(echo "$GPU" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
    RESULTS=${RESULTS:-bench/results/compare-$([ "$PHOTOS" = 1 ] && echo photos-)$STAMP-$GPU_SLUG.md}
    TITLE="cutrain vs PyTorch on $GPU, $what"
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
    echo "Command: \`bench/compare.sh --epochs $EPOCHS --seeds $SEEDS --batches \"$BATCHES\" --model $MODEL $AUGMENT --workers $WORKERS$([ "$PHOTOS" = 1 ] && echo ' --photos')$([ "$CPU_CHECK" = 1 ] && echo ' --cpu-check')\`."
    echo "Seeds: $(echo $SEED_LIST). PyTorch DataLoader workers: $WORKERS."
    if [ "$PHOTOS" = 1 ]; then
      echo; echo "Data: $(cat "$OUT/photos.txt")"; echo; echo "$PROBE"
    else
      echo "Data: \`$DATA\` (cutrain import-fashion-mnist)."
    fi
    for b in $BATCHES; do
      CFG=$OUT/b$b/cutrain-s$(echo $SEED_LIST | cut -d' ' -f1)/config.json
      echo
      echo "## Batch $b"
      echo
      if [ -f "$CFG" ]; then
        echo "Settings, for every run (cutrain's resolved config.json, which the PyTorch runs read):"
        "$PY" -c "
import json; c = json.load(open('$CFG'))
keys = ['model', 'size', 'resize', 'channels', 'classes', 'epochs', 'batch', 'accum', 'optimizer',
        'lr', 'momentum', 'wd', 'schedule', 'warmup', 'label_smoothing', 'augment', 'pad', 'mean',
        'std', 'limit_train', 'limit_val', 'threads']
print('; '.join(f'{k} {json.dumps(c[k])}' for k in keys) + '.')"
        echo
      fi
      [ -d "$OUT/b$b" ] && "$PY" bench/torch_ref/report.py "$OUT/b$b" "$TARGET" $SETTINGS
    done
    echo
    echo "How each column is measured: bench/torch_ref/report.py. Runs: \`$OUT\`."
    [ "$failed" = 0 ] || echo "Some runs failed: their logs are in the runs' folders."
  } > "$RESULTS"
}

failed=0
for b in $BATCHES; do
  for s in $SEED_LIST; do
    for setting in $SETTINGS; do
      dir=$OUT/b$b/$setting-s$s
      # shellcheck disable=SC2046: the command is a word list by construction
      run "$dir" $(cmd_of "$setting" "$s" "$b" "$dir" "$TRAIN_LIST" "$VAL_LIST" "$P_MODEL" \
                          "$P_SIZE" "$P_RESIZE") || failed=1
      write_results
      [ -f "$OUT/b$b/cutrain-s$s/config.json" ] || break  # the PyTorch runs read it
    done
  done
done

write_results
say "wrote $RESULTS"
cat "$RESULTS"
exit $failed
