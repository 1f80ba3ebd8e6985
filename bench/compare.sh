#!/usr/bin/env bash
# bench/compare.sh: cutrain against PyTorch at its strongest, on one GPU, in one run ([peer]).
#
# Fashion-MNIST (the JPEG list of `cutrain import-fashion-mnist`), for the same epochs, at a
# batch and seed (the learning rate scaled with the batch, 0.1 x B/128, the warm-up one epoch),
# these settings:
#   cutrain              bin/cutrain train --no-cuda-graph (every kernel launched by the host)
#   cutrain-graph        bin/cutrain train (its defaults, CUDA graphs on, or the options below)
#   torch-dataloader     bench/torch_reference.py --mode dataloader (16 workers, PIL, pinned,
#                        persistent; AMP + GradScaler, plain SGD): the usual setup
#   torch-resident       --mode resident (data on the GPU, torch.compile default)
#   torch-tuned-graph    --mode tuned-graph: resident, channels_last, the whole step on the
#                        device (gather, lr, forward, backward, the scaler's check, a fused SGD)
#                        captured as one CUDA graph
#   torch-tuned-compile  --mode tuned-compile: the whole step one torch.compile(fullgraph=True,
#                        mode="max-autotune")
#   torch-tuned-compile-graph  --mode tuned-compile-graph: the graph of tuned-graph around the
#                        model compiled with max-autotune-no-cudagraphs
# The PyTorch runs read the resolved OUT/config.json of the first cutrain setting of the same
# seed and batch, so model, recipe and data are cutrain's by construction. Every run times its
# steps on the device's own clock (busy, the bound); nvidia-smi also samples the GPU every
# 100 ms. Every run prints what proves its label (graphs, replays, graph breaks, syncs, ...:
# bench/torch_ref/proof.py; cutrain's graphs, replays, launches and kernel plan from its log),
# and the table keeps it. The table (bench/torch_ref/report.py) goes to
# bench/results/compare-<date>-<gpu>.md with the date, GPU, driver, commit and every setting.
#
# What runs, in tiers, each under its own time cap (--caps, seconds; a run gets what is left of
# its tier's cap, and a run that no longer fits is listed as not run):
#   1. the claim: cutrain-graph and the three tuned PyTorch settings, batch 128, seed 1
#   2. the same at batch 512
#   3. cutrain launched, the DataLoader and resident settings, then seeds 2 and 3 of everything
# --settings, --batches or --seeds replace the tiers by one tier of exactly those runs.
#
# --photos: the decode-heavy workload instead. bin/bench_photos writes 5,000 + 1,000 synthetic
# photo-like JPEGs (400-600 px, >= 1.5 bits per pixel); a probe times, for each candidate model
# and size (--photo-candidates), the loader alone and the GPU's compute alone from a short cutrain
# run's own records, and takes the candidate where the two are closest (within 2x when one is);
# then cutrain, torch-dataloader (16 workers, PIL at a DCT scale) and torch-gpu-decode
# (torchvision.io.decode_jpeg on the GPU) train on it, decoding every epoch.
#
#   bench/compare.sh                      # the tiers, 10 epochs
#   bench/compare.sh --caps "600 300 900" # the tiers with more time
#   bench/compare.sh --batches 128 --seeds 1 --settings "cutrain torch-tuned-graph"
#   bench/compare.sh --photos --seeds 1 --epochs 3
#   bench/compare.sh --dry-run            # the plan, the scripts and the model checked, then
#                                         # every tier-1 setting for 2 steps on the CPU: each
#                                         # proof line printed (no GPU; not a measurement)
#   bench/compare.sh --cpu-check          # the whole chain on the CPU on a tiny subset: a test
#                                         # of the scripts, NOT a performance comparison
#   bench/compare.sh --report-only OUT    # the table again from the run folders in OUT
# Options: --epochs N, --seeds N (seeds 1..N; 1 is cutrain's default), --batches "128 512",
# --settings "...", --caps "240 90 60", --model NAME, --augment, --workers N (PyTorch, 16),
# --threads N (cutrain's decode threads; 0: its default), --data DIR,
# --photos, --photo-dir DIR, --photo-candidates "default:96:112 default:112:128 resnet:64:72"
# (model:size:resize), --out DIR, --results FILE, --target 0.93, --python PY, --jobs N (make -j).
# PyTorch is not a dependency of cutrain (`make deps` leaves it out): install it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
ARGS="$*"

EPOCHS=10 SEEDS="" BATCHES="" MODEL=default AUGMENT="" WORKERS=16 THREADS=0 TARGET=0.93
CAPS="240 90 60" CAPS_GIVEN=0 REPORT_ONLY=""
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
    --caps) CAPS=$2 CAPS_GIVEN=1; shift ;;
    --report-only) REPORT_ONLY=$2; shift ;;
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
# The runs, one line each: "tier batch seed setting". A cutrain setting comes before the
# PyTorch runs of its batch and seed (they read its config.json).
CLAIM="cutrain-graph torch-tuned-graph torch-tuned-compile torch-tuned-compile-graph"
USUAL="cutrain torch-dataloader torch-resident"
if [ "$CPU_CHECK" = 1 ]; then  # small enough for 2 CPU cores in a few minutes
  EPOCHS=${CPU_EPOCHS:-2} WORKERS=2 LIMIT_TRAIN=${CPU_TRAIN:-640} LIMIT_VAL=500
  BATCHES=${CPU_BATCHES:-64} SEEDS=1 PHOTO_TRAIN=320 PHOTO_TEST=100
  PHOTO_CANDIDATES=${CPU_PHOTO_CANDIDATES:-"default:32:40"}
  SETTINGS=${SETTINGS:-"$CLAIM $USUAL"} CAPS=0
fi
[ "$PHOTOS" = 1 ] && SETTINGS=${SETTINGS:-"cutrain torch-dataloader torch-gpu-decode"}
seed_list() { if [ "$1" = 1 ]; then echo 1; else seq 1 "$1"; fi; }  # 1 is cutrain's default
if [ -n "$SETTINGS$BATCHES$SEEDS" ]; then  # exactly what was asked, one tier
  SETTINGS=${SETTINGS:-"$CLAIM $USUAL"} BATCHES=${BATCHES:-"128 512"} SEEDS=${SEEDS:-3}
  [ "$CAPS_GIVEN" = 1 ] || CAPS=0
  RUNS=$(for b in $BATCHES; do for s in $(seed_list "$SEEDS"); do for x in $SETTINGS; do
           echo "1 $b $s $x"; done; done; done)
else
  SETTINGS="$CLAIM $USUAL" BATCHES="128 512" SEEDS=3
  RUNS=$(for x in $CLAIM; do echo "1 128 1 $x"; done
         for x in $CLAIM; do echo "2 512 1 $x"; done
         for x in $USUAL; do echo "3 128 1 $x"; done
         for b in 128 512; do for s in 2 3; do for x in $CLAIM $USUAL; do echo "3 $b $s $x"
         done; done; done)
fi
cap_of() { local c; c=$(echo $CAPS | cut -d' ' -f"$1"); echo "${c:-0}"; }  # 0: no cap
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
      echo "$PY bench/torch_reference.py --config $(config_of "$(dirname "$dir")" "$seed")" \
           "--mode ${setting#torch-} --workers $WORKERS $cpu --target $TARGET --out $dir" ;;
  esac
}

# The config.json the PyTorch runs of batch folder $1 and seed $2 read: the first cutrain
# setting's of that batch and seed in the plan.
config_of() {
  local first
  first=$(echo "$RUNS" | awk -v b="${1##*/b}" -v s="$2" '$2 == b && $3 == s && $4 ~ /^cutrain/ { print $4; exit }')
  echo "$1/${first:-cutrain}-s$2/config.json"
}

plan() {
  say "plan: $EPOCHS epochs${AUGMENT:+, augment}; PyTorch workers $WORKERS; runs in $OUT"
  if [ "$PHOTOS" = 1 ]; then
    say "  bin/bench_photos --out $PHOTO_DIR --train $PHOTO_TRAIN --test $PHOTO_TEST"
    say "  probe, for each of $PHOTO_CANDIDATES: a short cutrain run's loader-alone and" \
        "compute-alone rates; the closest pair is trained on"
  fi
  local tier=0
  while read -r t b s setting; do
    [ "$t" = "$tier" ] || { tier=$t; say " tier $t (cap $(cap_of "$t") s; 0: none):"; }
    say "  $(cmd_of "$setting" "$s" "$b" "$OUT/b$b/$setting-s$s" "$DATA/train.txt" \
             "$DATA/test.txt" "$MODEL" "" "" | tr -s ' ')"
  done <<< "$RUNS"
}

# ---- the results file: written after every run, so a run cut short keeps what it measured
write_results() {
  what=$([ "$PHOTOS" = 1 ] && echo "the decode-heavy photos" || echo "Fashion-MNIST")
  if [ -n "$REPORT_ONLY" ]; then
    RESULTS=${RESULTS:-/dev/stdout}
    TITLE="cutrain vs PyTorch: the table of $OUT again (compare.sh --report-only)"
    DEV="as each run's proof lines say" DRIVER="n/a"
  elif [ "$CPU_CHECK" = 1 ]; then
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
  TORCH_INFO=$("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' 2>/dev/null || echo "as each run's proof lines say")
  {
    echo "# $TITLE"
    echo
    echo "Date: $STAMP. Device: $DEV. Driver: $DRIVER. Commit: $COMMIT. PyTorch: $TORCH_INFO."
    echo "Command: \`bench/compare.sh $ARGS\` ($EPOCHS epochs, time caps per tier: $CAPS s)."
    echo "PyTorch DataLoader workers: $WORKERS."
    if [ "$PHOTOS" = 1 ]; then
      echo; echo "Data: $(cat "$OUT/photos.txt")"; echo; echo "$PROBE"
    else
      echo "Data: \`$DATA\` (cutrain import-fashion-mnist)."
    fi
    for b in $BATCHES; do
      [ -d "$OUT/b$b" ] || continue
      CFG=$(ls "$OUT"/b"$b"/cutrain*-s*/config.json 2>/dev/null | head -1)
      echo
      echo "## Batch $b"
      echo
      if [ -n "$CFG" ]; then
        echo "Settings, for every run (cutrain's resolved config.json, which the PyTorch runs read):"
        "$PY" -c "
import json; c = json.load(open('$CFG'))
keys = ['model', 'size', 'resize', 'channels', 'classes', 'epochs', 'batch', 'accum', 'optimizer',
        'lr', 'momentum', 'wd', 'schedule', 'warmup', 'label_smoothing', 'augment', 'pad', 'mean',
        'std', 'limit_train', 'limit_val', 'threads']
print('; '.join(f'{k} {json.dumps(c[k])}' for k in keys if k in c) + '.')"
        echo
      fi
      "$PY" bench/torch_ref/report.py "$OUT/b$b" "$TARGET" $SETTINGS
    done
    echo
    echo "How each column is measured: bench/torch_ref/report.py. Runs: \`$OUT\`."
    [ "$failed" = 0 ] || echo "Some runs failed: their logs are in the runs' folders."
    if [ -n "$NOT_RUN" ]; then
      echo; echo "Not run (each tier has its own time cap):"; echo "$NOT_RUN" | sed '/^$/d; s/^/- /'
    fi
  } > "$RESULTS"
}

if [ -n "$REPORT_ONLY" ]; then  # the table again from run folders; needs no torch, no GPU
  OUT=$REPORT_ONLY failed=0 NOT_RUN="" GPU=""
  BATCHES=$(find "$OUT" -maxdepth 1 -name 'b*' -type d | sed 's|.*/b||' | sort -n | xargs)
  SETTINGS="$CLAIM $USUAL torch-gpu-decode"
  write_results
  exit 0
fi

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
  # Every proof line, from the tier-1 settings trained 2 steps on the CPU (the GPU-only parts
  # say "not run" and why): the chain the window will run, not a measurement.
  if ! "$PY" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
    say "proof lines: not shown (the tuned modes need PyTorch 2.x; $PY has $HAVE_TORCH)"
    exit 0
  fi
  say "proof lines: the tier-1 settings for 2 steps on the CPU (a minute or two: compiling) ..."
  proof_out=${OUT}-dry-run
  CPU_TRAIN=64 CPU_EPOCHS=1 CPU_BATCHES=32 "$0" --cpu-check --settings "$CLAIM" --python "$PY" \
    --data "$DATA" --out "$proof_out" --results "$proof_out/compare.md" > "$proof_out.log" 2>&1 \
    || { say "the dry run's CPU chain failed: $proof_out.log"; tail -20 "$proof_out.log"; exit 1; }
  sed -n '/^What proves each row/,$p' "$proof_out/compare.md"
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

# run DIR LIMIT COMMAND...: the command (under `timeout LIMIT` when LIMIT > 0 seconds), its
# wall time to DIR/wall_s, its output to DIR/log, and the GPU's utilization samples to
# DIR/gpu_util.txt while it runs.
run() {
  local dir=$1 limit=$2; shift 2
  [ "$limit" -gt 0 ] && set -- timeout -k 5 "$limit" "$@"
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
    run "$d" 0 bin/cutrain train --train "$TRAIN_LIST" --model "$m" --size "$sz" --resize "$rs" \
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
  for b in $BATCHES; do  # cutrain's planned launches of one step, for the proof lines
    mkdir -p "$OUT/b$b"
    bin/cutrain describe "$MODEL" --step --batch "$b" > "$OUT/b$b/step-plan.txt" 2>&1 || true
  done
fi

# Tier by tier: a run gets what is left of its tier's cap (timeout); one that no longer fits
# (under MIN_RUN_S left), or whose cutrain config.json is missing, is listed as not run.
failed=0 NOT_RUN="" tier=0 deadline=0 MIN_RUN_S=${MIN_RUN_S:-20}
while read -r t b s setting <&3; do  # (fd 3: the runs' stdin stays the terminal's)
  if [ "$t" != "$tier" ]; then
    tier=$t cap=$(cap_of "$t")
    deadline=$([ "$cap" -gt 0 ] && echo $(( $(date +%s) + cap )) || echo 0)
  fi
  dir=$OUT/b$b/$setting-s$s
  left=$([ "$deadline" -gt 0 ] && echo $(( deadline - $(date +%s) )) || echo 0)
  if [ "$deadline" -gt 0 ] && [ "$left" -lt "$MIN_RUN_S" ]; then
    NOT_RUN="$NOT_RUN
$setting, batch $b, seed $s (tier $t: its cap of $cap s was spent)"
    continue
  fi
  if [[ $setting == torch-* ]] && [ ! -f "$(config_of "$OUT/b$b" "$s")" ]; then
    NOT_RUN="$NOT_RUN
$setting, batch $b, seed $s (no cutrain config.json to read: its cutrain run did not finish)"
    continue
  fi
  # shellcheck disable=SC2046: the command is a word list by construction
  run "$dir" "$left" $(cmd_of "$setting" "$s" "$b" "$dir" "$TRAIN_LIST" "$VAL_LIST" "$P_MODEL" \
                              "$P_SIZE" "$P_RESIZE") || failed=1
  write_results
done 3<<< "$RUNS"

write_results
say "wrote $RESULTS"
cat "$RESULTS"
exit $failed
