#!/usr/bin/env bash
# run.sh OUTDIR [STEP...]: runs cutrain's tests, the GPU tests under compute-sanitizer and the
# kernel benchmark from this bundle (made by `make bundle`, see bench/README.md) on a GPU host
# that has CUDA but not cutrain's Debian packages. Logs and result tables go to OUTDIR.
#
# Steps, in this order (default: all):
#   info       nvidia-smi, where cuBLAS/cuDNN were found, unresolved libraries
#   tests      bin/cutrain_tests, every test (the GPU ones run when a GPU is usable)
#   memcheck   the [gpu] tests under compute-sanitizer --tool memcheck
#   racecheck  the [gpu] tests under compute-sanitizer --tool racecheck
#   bench      bin/bench_kernels_gpu (--out/--json into OUTDIR)
#   train      the [train] target: Fashion-MNIST imported into JPEGs, then `cutrain train` with
#              the default model and settings on the GPU (as `make demo` does); the test
#              accuracy, wall time and images/s into train-gpu.md (not in the default list:
#              it takes minutes; name it)
#   replicas   bin/bench_replicas_gpu --devices ${REPLICA_DEVICES:-0,0}: the ring all-reduce's
#              bandwidth against the copy bandwidth, and training with 1, 2 and 4 replicas
#              (replicas.md; not in the default list: name it)
# Without a GPU the sanitizer steps are skipped with the reason, and the benchmark says why
# and measures nothing; the tests still run (their GPU cases skip).
#
# Files written (at most 8 per run, as the device tool brings back): summary.md (the info and
# one line per step), tests.log, memcheck.log, racecheck.log, bench.log, bench-kernels.md,
# bench-kernels.json; the train step: train.log, train-gpu.md, metrics.jsonl; the replicas
# step: replicas.md.
# Exit status: 1 when a step failed (tests, a sanitizer, a WRONG kernel), else 0.
# Time: each step stops after STEP_TIMEOUT, and all of them together after TOTAL_TIMEOUT
# (default 570 s: one call of the device tool is 600 s). A step that no longer fits is skipped
# and said so. summary.md gets each step's row as soon as it ends, so a run cut short still
# says what it did. Give the long steps a call each: `info tests`, `memcheck`, `racecheck`,
# `bench`, `train`, `replicas`.
# Environment: STEP_TIMEOUT (seconds per step, default 540), TOTAL_TIMEOUT, TEST_ARGS (extra arguments of
# cutrain_tests, e.g. -tc="conv2d*"), BENCH_ARGS (of bench_kernels_gpu), TRAIN_ARGS (of the
# train step's cutrain train), REPLICA_DEVICES, CUDA_HOME.
set -uo pipefail
out=${1:?usage: run.sh OUTDIR [info|tests|memcheck|racecheck|bench ...]}
shift
steps=${*:-info tests memcheck racecheck bench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ ! -f "$here/payload.tar.xz" ]; then
  echo "run.sh: no payload.tar.xz beside it: run the copy that make bundle writes (bundle/run.sh)" >&2
  exit 2
fi
deadline=$(( SECONDS + ${TOTAL_TIMEOUT:-570} ))
# bin/ and lib/ travel compressed: unpack them into a temporary folder for this run (not into
# the bundle, which must stay small enough to carry)
work=$(mktemp -d "${TMPDIR:-/tmp}/cutrain-bundle.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
if command -v xz >/dev/null 2>&1; then
  tar -xJf "$here/payload.tar.xz" -C "$work" || exit 1
else  # no xz on the host: Python's tarfile reads .xz too
  python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
t.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))' \
    "$here/payload.tar.xz" "$work" || exit 1
fi
cd "$work" || exit 1  # tests find bin/cutrain beside bin/cutrain_tests
summary=$out/summary.md
step_timeout=${STEP_TIMEOUT:-540}
cuda=${CUDA_HOME:-/usr/local/cuda}
read -r -a test_args <<<"${TEST_ARGS:-}"    # split into words, never globbed
read -r -a bench_args <<<"${BENCH_ARGS:-}"

# --- libraries: the bundle's, then CUDA's, then cuBLAS/cuDNN wherever this host keeps them
# (CUDA's lib64, the system, or the pip wheels of the torch python: nvidia/<lib>/lib).
lib_dirs="$work/lib"
[ -d "$cuda/lib64" ] && lib_dirs="$lib_dirs:$cuda/lib64"
wheel_dirs=$(python3 -c 'import nvidia, sys; print("\n".join(nvidia.__path__))' 2>/dev/null || true)
find_lib() {  # the first folder holding $1
  local d
  for d in "$cuda/lib64" /usr/lib/x86_64-linux-gnu /usr/local/lib; do
    [ -e "$d/$1" ] && { echo "$d"; return 0; }
  done
  for d in $wheel_dirs; do
    find "$d" -maxdepth 3 -name "$1" -printf '%h\n' 2>/dev/null | head -1 | grep . && return 0
  done
  return 1
}
found=""
for l in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
  if d=$(find_lib "$l"); then
    found="$found\n- $l: $d"
    case ":$lib_dirs:" in *":$d:"*) ;; *) lib_dirs="$lib_dirs:$d" ;; esac
  else
    found="$found\n- $l: NOT FOUND"
  fi
done
export LD_LIBRARY_PATH="$lib_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CUTRAIN_FASHION_MNIST_DIR="$here/data/fashion-mnist"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# --- is there a GPU? (the sanitizers need one; the programs also check for themselves)
gpu_reason=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  gpu_reason="nvidia-smi not found"
elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  gpu_reason="nvidia-smi lists no GPU"
fi
sanitizer=$(command -v compute-sanitizer ||
            find "$cuda"/bin "$cuda"/compute-sanitizer -maxdepth 1 -name compute-sanitizer \
              2>/dev/null | head -1)

{
  echo "# cutrain bundle run, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
  echo
  sed 's/^/    /' "$here/BUILD"
  echo
  echo "GPU: ${gpu_reason:-$(nvidia-smi -L 2>/dev/null | head -4 | tr '\n' ' ')}"
  echo "compute-sanitizer: ${sanitizer:-not found}"
  echo -e "libraries:$found"
  echo
} >"$summary"

# run_step NAME LOG COMMAND...: runs it under the step timeout (or what is left of the total),
# sets last_rc and last_secs.
status=0  # 1 when a step failed: run.sh's exit status
run_step() {
  local name=$1 log=$2 t0 rc limit=$step_timeout left=$(( deadline - SECONDS - 5 ))
  shift 2
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "== $name: skipped: TOTAL_TIMEOUT reached (run it in a call of its own)" | tee -a "$log"
    last_rc=124 last_secs=0 status=1
    return
  fi
  echo "== $name: $*" | tee -a "$log"
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  [ $rc = 124 ] && echo "== $name: stopped after ${limit}s (STEP_TIMEOUT/TOTAL_TIMEOUT)" >>"$log"
  echo "== $name: exit $rc after $(( $(date +%s) - t0 ))s" | tee -a "$log"
  last_rc=$rc
  last_secs=$(( $(date +%s) - t0 ))
  [ $rc = 0 ] || status=1
}
# A row of the summary's table, written at once (a run cut short keeps the rows it made); the
# table starts at the first row, after the info step's sections.
table=""
row() {
  if [ -z "$table" ]; then
    { echo "## steps"; echo; echo "| step | status | result |"; echo "| --- | --- | --- |"; } >>"$summary"
    table=1
  fi
  echo "| $1 | $2 | $3 |" >>"$summary"
}

for step in $steps; do
  case $step in
    info)
      {
        echo '## nvidia-smi'; echo; echo '```'
        if [ -z "$gpu_reason" ]; then nvidia-smi 2>&1; else echo "($gpu_reason)"; fi
        echo '```'; echo
        echo '## ldd bin/cutrain_tests (where each library came from)'; echo; echo '```'
        ldd bin/cutrain_tests 2>&1
        echo '```'; echo
      } >>"$summary"
      unresolved=$(ldd bin/* 2>&1 | grep "not found" | sort -u | tr -s ' \t\n' ' ')
      row info "${unresolved:-no unresolved libraries}" "nvidia-smi: ${gpu_reason:-ok}"
      ;;
    tests)
      run_step tests "$out/tests.log" bin/cutrain_tests "${test_args[@]}"
      row tests "exit $last_rc, ${last_secs}s" "$(grep -a "^tests:" "$out/tests.log" | tail -1)"
      ;;
    memcheck|racecheck)
      if [ -n "$gpu_reason" ] || [ -z "$sanitizer" ]; then
        echo "skipped: ${gpu_reason:-compute-sanitizer not found}" >"$out/$step.log"
        row "$step" skipped "${gpu_reason:-compute-sanitizer not found}"
        continue
      fi
      # Can it run here at all? (Some hosts' sanitizer refuses the device: "not supported".)
      if ! probe=$("$sanitizer" --tool "$step" bin/cutrain info 2>&1) ||
         grep -qi "not supported\|unknown error" <<<"$probe"; then
        echo "skipped: compute-sanitizer cannot run here:" >"$out/$step.log"
        echo "$probe" | tail -20 >>"$out/$step.log"
        row "$step" skipped "compute-sanitizer cannot run on this host (see $step.log)"
        continue
      fi
      # Errors make the exit status; memcheck leaves out the CUDA API errors that tests provoke
      # on purpose (a refused graph capture), which the tests check themselves. The tests with
      # timing bounds are left out: the sanitizer slows everything.
      sanitizer_args=(--tool "$step" --print-limit 100 --error-exitcode 1)
      if [ "$step" = memcheck ] && "$sanitizer" --help 2>&1 | grep -q -- --report-api-errors; then
        sanitizer_args+=(--report-api-errors no)
      fi
      run_step "$step" "$out/$step.log" "$sanitizer" "${sanitizer_args[@]}" \
        bin/cutrain_tests -tc="*[gpu]*" -tce="gpu timeline*,*checkpoint taken with steps in flight*" \
        "${test_args[@]}"
      # memcheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: N hazards ..."
      counts=$(grep -a "ERROR SUMMARY\|RACECHECK SUMMARY" "$out/$step.log" | sed 's/^=* *//' |
               tr '\n' ' ')
      tests=$(grep -a "^tests:" "$out/$step.log" | tail -1)
      row "$step" "exit $last_rc, ${last_secs}s" "${counts:-no summary line (see $step.log)}; $tests"
      ;;
    bench)
      if [ ! -x bin/bench_kernels_gpu ]; then
        echo "bin/bench_kernels_gpu is not in this bundle" >"$out/bench.log"
        row bench missing "bin/bench_kernels_gpu is not in this bundle"
        continue
      fi
      run_step bench "$out/bench.log" bin/bench_kernels_gpu --out "$out/bench-kernels.md" \
        --json "$out/bench-kernels.json" "${bench_args[@]}"
      verdicts=$(grep -a "^- \(PASS\|FAIL\|NOT\)\|no usable GPU\|WRONG" "$out/bench.log" |
                 head -4 | tr '\n' ' ')
      row bench "exit $last_rc, ${last_secs}s" "$verdicts"
      ;;
    train)
      # The JPEGs and the run folder in the temporary work folder; what matters comes back.
      fm="$work/fashion-mnist" run="$work/run-train" t0="" t1=""
      run_step train "$out/train.log" bin/cutrain import-fashion-mnist \
        --from "$CUTRAIN_FASHION_MNIST_DIR" --out "$fm"
      if [ "$last_rc" = 0 ]; then
        t0=$(date +%s.%N)
        run_step train "$out/train.log" bin/cutrain train --train "$fm/train.txt" \
          --val "$fm/test.txt" --model default --device cuda --out "$run" \
          --trace "$run/trace.json" ${TRAIN_ARGS:-}
        t1=$(date +%s.%N)
      fi
      cp "$run/metrics.jsonl" "$out/metrics.jsonl" 2>/dev/null
      final=$(grep -a "^final:" "$out/train.log" | tail -1)
      speed=$(grep -a "^trained " "$out/train.log" | tail -1)
      {
        echo "# Fashion-MNIST, default model and settings, on the GPU ([train] target: >= 93%)"
        echo
        sed 's/^/    /' "$here/BUILD"
        echo
        echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)."
        echo "Command: cutrain train --train train.txt --val test.txt --model default --device cuda ${TRAIN_ARGS:-}"
        echo
        echo "- exit status: $last_rc; wall time of the run: ${t1:+$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')} s"
        echo "- ${final:-no final line (see train.log)}"
        echo "- ${speed:-no summary line}"
        echo
        echo "Per epoch (from train.log):"; echo; echo '```'
        grep -a "^epoch" "$out/train.log" | tail -40
        echo '```'
      } >"$out/train-gpu.md"
      row train "exit $last_rc" "${final:-no final line}"
      ;;
    replicas)
      {
        echo "# bench_replicas_gpu --devices ${REPLICA_DEVICES:-0,0}"
        echo
        sed 's/^/    /' "$here/BUILD"
        echo
        echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -4 | tr '\n' ';')"
        echo
      } >"$out/replicas.md"
      run_step replicas "$out/replicas.md" bin/bench_replicas_gpu \
        --devices "${REPLICA_DEVICES:-0,0}"
      hidden=$(grep -a "^| 2 |" "$out/replicas.md" | head -1)
      row replicas "exit $last_rc, ${last_secs}s" "${hidden:-no R = 2 row (see replicas.md)}"
      ;;
    *) echo "run.sh: unknown step '$step' (info tests memcheck racecheck bench train replicas)" >&2
       exit 2 ;;
  esac
done

echo
sed -n '/^## steps/,$p' "$summary"
echo "logs: $out"
exit $status
