#!/usr/bin/env bash
# make demo: the main job on the embedded default, from a fresh checkout to a trained model.
#
#   1. the Debian packages (make deps: a no-op when they are all there)
#   2. the build (make: a no-op when it is up to date)
#   3. Fashion-MNIST -> 70,000 JPEGs + train/test lists in data-cache/ (reused when complete)
#   4. cutrain train with the default model and the Fashion-MNIST recipe (--recipe fmnist,
#      train/setup/recipe.cpp): on the GPU when one is usable (all 60,000 training images, the
#      recipe's epochs); otherwise on the CPU on a subset, and it says so
#   5. the test accuracy, the time, images/s, and where the checkpoint, metrics and trace went
#
# Environment: DEMO_DEVICE=cpu|cuda forces a device; DEMO_OUT sets the run folder;
# DEMO_CPU_TRAIN, DEMO_CPU_VAL, DEMO_CPU_EPOCHS size the CPU run.
set -euo pipefail
cd "$(dirname "$0")/../.."

DATA=data-cache/fashion-mnist
OUT=${DEMO_OUT:-runs/demo-$(date +%Y%m%d-%H%M%S)}
CPU_TRAIN=${DEMO_CPU_TRAIN:-30000}
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
# Where `cutrain train --device auto` would run: `cutrain info` asks the trainer's own choice
# (a GPU needs a usable device and a build with CUDA kernels for every training op).
info=$(bin/cutrain info)
device=${DEMO_DEVICE:-}
if [ -z "$device" ]; then
  if printf '%s\n' "$info" | grep -q '^  training (--device auto): cuda'; then device=cuda; else device=cpu; fi
fi
subset=()
if [ "$device" = cuda ]; then
  echo "GPU: $(printf '%s\n' "$info" | sed -n 's/^  training (--device auto): //p')." \
       "Full data: 60,000 training images, 10,000 test images, the recipe's epochs."
else
  why=$(printf '%s\n' "$info" | sed -n 's/^  not on a GPU because: //p')
  echo "NOT ON A GPU${why:+: $why}."
  echo "Training on the CPU instead, on a SUBSET so that it ends in minutes:"
  echo "  $CPU_TRAIN of the 60,000 training images, $CPU_VAL of the 10,000 test images," \
       "$CPU_EPOCHS epochs. Expect a lower accuracy than a full GPU run."
  subset=(--limit-train "$CPU_TRAIN" --limit-val "$CPU_VAL" --epochs "$CPU_EPOCHS")
fi
# --trace and --metrics when this build's `cutrain train` has them (they arrive with the
# observability work); metrics otherwise land in the run folder if the trainer writes them.
help=$(bin/cutrain train --help 2>&1 || true)
observe=()
if printf '%s\n' "$help" | grep -q -- '--trace'; then observe+=(--trace "$OUT/trace.json"); fi
if printf '%s\n' "$help" | grep -q -- '--metrics'; then observe+=(--metrics "$OUT/metrics.jsonl"); fi
cmd=(bin/cutrain train --train "$DATA/train.txt" --val "$DATA/test.txt" --model default
     --recipe fmnist --device "$device" --out "$OUT" "${subset[@]}" "${observe[@]}")
echo "${cmd[*]}"
mkdir -p "$OUT"
start=$(date +%s.%N)
# stdout (configuration, epochs, final report) is also kept in OUT/train.log; the progress
# line is on stderr, untouched, so a terminal still redraws it in place.
"${cmd[@]}" | tee "$OUT/train.log"
end=$(date +%s.%N)

step "5/5 result"
# From the metrics file (JSON lines, data/metrics.h) when there is one: the last "eval"
# record and the step records' images/s; otherwise from the trainer's final report in
# train.log ("final: loss .. top-1 ..%", "trained .. (N images/s in the steps)").
metrics="$OUT/metrics.jsonl"
number_after() {  # number_after KEY: the number after "KEY": on stdin's last line
  tail -n 1 | sed -n "s/.*\"$1\":\([-0-9.eE+]*\).*/\1/p"
}
top1="" ips=""
if [ -s "$metrics" ]; then
  top1=$(grep '"kind":"eval"' "$metrics" | number_after top1 || true)
  [ -n "$top1" ] && top1=$(awk -v a="$top1" 'BEGIN { printf "%.2f", 100 * a }')
  ips=$(grep '"kind":"step"' "$metrics" | sed -n 's/.*"images_per_s":\([-0-9.eE+]*\).*/\1/p' |
        awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n }')
fi
[ -n "$top1" ] || top1=$(sed -n 's/^final: .*top-1 \([0-9.]*\)%.*/\1/p' "$OUT/train.log" | tail -n 1)
[ -n "$ips" ] || ips=$(sed -n 's/^trained .*(\([0-9.]*\) images\/s in the steps).*/\1/p' "$OUT/train.log" | tail -n 1)
checkpoint=$(ls -t "$OUT"/*.h5 2>/dev/null | grep -v '/best\.h5$' | head -n 1 || true)
[ -e "$OUT/best.h5" ] && checkpoint="$OUT/best.h5 (best; newest: ${checkpoint:-?})"
time_s=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
what="all 10,000 test images"
[ "$device" = cuda ] || what="the first $CPU_VAL test images, after $CPU_EPOCHS epochs on $CPU_TRAIN training images"
echo "test accuracy  ${top1:-?}% top-1 on $what"
echo "time           $time_s s (cutrain train, start to end, on the $device)"
echo "images/s       ${ips:-?} (training steps)"
echo "checkpoint     ${checkpoint:-(none in $OUT)}"
if [ -s "$metrics" ]; then
  echo "metrics        $metrics (JSON lines)"
else
  echo "metrics        none: this build's cutrain train writes no metrics file yet"
fi
if [ -s "$OUT/trace.json" ]; then
  echo "trace          $OUT/trace.json (open in https://ui.perfetto.dev or chrome://tracing)"
else
  echo "trace          none: this build's cutrain train has no --trace yet"
fi
[ -s "$OUT/report.html" ] && echo "report         $OUT/report.html (open it in a browser: the run at a glance)"
echo "log            $OUT/train.log; configuration $OUT/config.json"
