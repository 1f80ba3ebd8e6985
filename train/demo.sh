#!/usr/bin/env bash
# make demo: the main job on the embedded default, from a fresh checkout to a trained model.
#
#   1. the Debian packages (make deps: a no-op when they are all there)
#   2. the build (make: a no-op when it is up to date)
#   3. Fashion-MNIST -> 70,000 JPEGs + train/test lists in data-cache/ (reused when complete)
#   4. cutrain train with the default model: on the GPU when one is usable (all 60,000 training
#      images, the default epochs); otherwise on the CPU on a subset, and it says so
#   5. the test accuracy, the time, images/s, and where the checkpoint, metrics and trace went
#
# Environment: DEMO_DEVICE=cpu|cuda forces a device; DEMO_OUT sets the run folder;
# DEMO_CPU_TRAIN, DEMO_CPU_VAL, DEMO_CPU_EPOCHS size the CPU run.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=data-cache/fashion-mnist
OUT=${DEMO_OUT:-runs/demo-$(date +%Y%m%d-%H%M%S)}
CPU_TRAIN=${DEMO_CPU_TRAIN:-10000}
CPU_VAL=${DEMO_CPU_VAL:-2000}
CPU_EPOCHS=${DEMO_CPU_EPOCHS:-2}
JOBS=$(nproc 2>/dev/null || echo 2)

step() { printf '\n== %s\n' "$*"; }

step "1/5 packages"
make --no-print-directory deps

step "2/5 build (make -j$JOBS bin/cutrain)"
make --no-print-directory -j"$JOBS" bin/cutrain

step "3/5 Fashion-MNIST as JPEG files in $DATA"
bin/cutrain import-fashion-mnist --out "$DATA"

step "4/5 training the default model"
device=${DEMO_DEVICE:-}
if [ -z "$device" ]; then
  if bin/cutrain info | grep -q '^  cuda:'; then device=cuda; else device=cpu; fi
fi
subset=()
if [ "$device" = cuda ]; then
  echo "GPU: $(bin/cutrain info | sed -n 's/^  cuda:0  //p'). Full data: 60,000 training images," \
       "10,000 test images, the default epochs."
else
  why=$(bin/cutrain info | sed -n 's/^  no GPU: //p')
  echo "No usable GPU${why:+ ($why)}: training on the CPU, on a SUBSET so it ends in minutes:"
  echo "  $CPU_TRAIN of the 60,000 training images, $CPU_VAL of the 10,000 test images," \
       "$CPU_EPOCHS epochs."
  echo "  Expect a lower accuracy than a full GPU run (about 93%)."
  subset=(--limit-train "$CPU_TRAIN" --limit-val "$CPU_VAL" --epochs "$CPU_EPOCHS")
fi
mkdir -p "$OUT"
cmd=(bin/cutrain train --train "$DATA/train.txt" --val "$DATA/test.txt" --model default
     --device "$device" --out "$OUT" --trace "$OUT/trace.json" --metrics "$OUT/metrics.jsonl"
     "${subset[@]}")
echo "${cmd[*]}"
start=$(date +%s.%N)
"${cmd[@]}"
end=$(date +%s.%N)

step "5/5 result"
# The numbers come from the metrics file (JSON lines, data/metrics.h): the last evaluation
# record and the mean of the step records' images/s. Plain awk: the demo needs no Python.
metrics="$OUT/metrics.jsonl"
field() {  # field NAME: the number after "NAME": on stdin's last line
  tail -n 1 | sed -n "s/.*\"$1\":\([-0-9.eE+]*\).*/\1/p"
}
eval_line=$(grep '"kind":"eval"' "$metrics" | tail -n 1 || true)
top1=$(printf '%s\n' "$eval_line" | field top1)
top5=$(printf '%s\n' "$eval_line" | field top5)
ips=$(grep '"kind":"step"' "$metrics" |
      sed -n 's/.*"images_per_s":\([-0-9.eE+]*\).*/\1/p' |
      awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n }')
checkpoint=$(ls -t "$OUT"/*.h5 2>/dev/null | head -n 1 || true)
awk -v a="$top1" -v a5="$top5" -v t0="$start" -v t1="$end" -v ips="$ips" -v dev="$device" 'BEGIN {
  printf "test accuracy  %s", (a == "" ? "(not found in the metrics)" : sprintf("%.2f%%", 100 * a))
  if (a5 != "") printf " (top-5 %.2f%%)", 100 * a5
  printf "\ntime           %.1f s of training on the %s (cutrain train, start to end)\n", t1 - t0, dev
  printf "images/s       %s (training, mean over the progress reports)\n", (ips == "" ? "?" : ips)
}'
echo "checkpoint     ${checkpoint:-(none found in $OUT)}"
echo "metrics        $metrics (one JSON object a line)"
echo "trace          $OUT/trace.json (open it in https://ui.perfetto.dev or chrome://tracing)"
echo "run folder     $OUT"
