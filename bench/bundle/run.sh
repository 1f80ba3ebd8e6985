#!/usr/bin/env bash
# run.sh OUTDIR [quick | deep | STEP...]: checks cutrain's GPU side from this bundle (made by
# `make bundle`, bench/README.md) on a GPU host that has CUDA but not cutrain's Debian packages,
# within one call of the device tool (../shared/GPU.md). Tables and trimmed logs go to OUTDIR:
# at most 8 files, which is what the device tool brings back.
#
#   quick  = info tests bench plan train recipe (about 5 minutes on an H100; TRAIN_EPOCHS=2)
#   deep   = info sanitize replicas compare    (memcheck, racecheck, synccheck; --devices 0,0;
#                                               PyTorch side by side)
#   all    = info tests+sanitize bench train train-graph recipe compare  (one call: the test groups and
#            the sanitizers share the GPU in parallel, then the timed steps one at a time)
#
# Steps:
#   info        preflight (10 s): nvidia-smi, driver, where cuBLAS/cuDNN were found, unresolved
#               libraries, `cutrain info`
#   tests       every group of GPU tests in a process of its own under its own timeout: a group
#               is a test source file holding [gpu] test cases (the binary's own list, so a new
#               test is never left out); JOBS groups at once. A group that crashed, hung or
#               hit a sticky CUDA error is run again one test case per process, with
#               CUTRAIN_SYNC_LAUNCHES=1, to name the test and the launch. Skipped GPU tests
#               count as failures here (CUTRAIN_EXPECT_GPU=1) when nvidia-smi lists a GPU.
#   sanitize    compute-sanitizer: memcheck on every kernel group (CUTRAIN_EXACT_ALLOC=1: each
#               buffer its own cudaMalloc), racecheck and synccheck on the groups whose kernels
#               use shared memory; one process per group
#   tests+sanitize   both in one pool (the tests first)
#   bench       bin/bench_kernels_gpu: rows land in bench.log as they are measured
#   train       Fashion-MNIST (imported into JPEGs) with the default model on the GPU,
#               --no-cuda-graph (every kernel launched), TRAIN_EPOCHS epochs (default 10;
#               quick: 2), with its trace; then the loader alone (bench_data) for the
#               pipeline ratio
#   train-graph the same with CUDA graphs (train's default)
#   recipe      [recipe-94]: cutrain train --recipe fmnist on all 60,000 images from the JPEG
#               list, evaluated on the 10,000 test images, for each seed of RECIPE_SEEDS
#               (default 1; the claim wants "1 2 3"): wall time and test top-1 (the weights and
#               their average), into train-gpu.md
#   plan        cutrain describe default --step --measure: every launch of a step timed on the
#               GPU beside its ideal time on the GPU's roofline ([lean-step]); into train-gpu.md
#   compare     bench/compare.sh (cutrain vs PyTorch at its strongest) when the host's python
#               has torch: its tiers (the claim at batch 128, then batch 512, then more seeds
#               and the usual settings), each under its own cap (COMPARE_ARGS, default
#               "--caps '240 90 60'"; what did not run is listed); COMPARE_TIMEOUT (420 s)
#               bounds each of compare and photos, whose table is rewritten after every run
#   photos      bench/compare.sh --photos: the decode-heavy workload (its probe, then cutrain,
#               PyTorch's DataLoader and GPU decoding); PHOTOS_ARGS (default "--seeds 1
#               --epochs 3"); its table is appended to compare.md
#   replicas    bin/bench_replicas_gpu --devices ${REPLICA_DEVICES:-0,0}
#
# Files in OUTDIR: summary.md (kept current: a row per group and step as each ends, so a run
# cut short still reports), tests.log (failing groups' output, durations of all), sanitize.log,
# bench.log (+ bench-kernels.md at the end), train.log, train-gpu.md, compare.md, replicas.md.
# Exit status: 1 when anything failed, else 0. Without a GPU every GPU step says
# "skipped: no GPU" and the run ends in seconds with 0 (make test checks this dry run).
# Environment: TOTAL_TIMEOUT (default 540 s), POOL_TIMEOUT (200: the test groups and sanitizers
# together), RERUN_TIMEOUT (60), GROUP_TIMEOUT (150), JOBS (8), TRAIN_EPOCHS,
# TRAIN_ARGS, BENCH_ARGS, TEST_ARGS, REPLICA_DEVICES, CUDA_HOME, CUTRAIN_COMMIT; MEMCHECK_ALL=1
# puts memcheck on the data and train groups too (the trainer's GPU paths; slower);
# CUTRAIN_TEST_ABORT_IN=TEXT plants an abort in the test group whose file name contains TEXT.
set -uo pipefail
out=${1:?usage: run.sh OUTDIR [quick|deep|all|STEP...]}
shift
case "${1:-quick}" in
  quick) steps="info tests bench plan train recipe"; TRAIN_EPOCHS=${TRAIN_EPOCHS:-2} ;;
  deep) steps="info sanitize replicas compare" ;;
  all) steps="info tests+sanitize train bench plan train-graph recipe compare" ;;
  *) steps="$*" ;;
esac
TRAIN_EPOCHS=${TRAIN_EPOCHS:-10}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# CUTRAIN_BUNDLE_BIN=DIR: run the programs of a build tree (DIR holds cutrain_tests, cutrain,
# ...) instead of a bundle's payload: the dry run that make test checks (tests/bench/).
bundle_bin=${CUTRAIN_BUNDLE_BIN:-}
if [ -z "$bundle_bin" ] && [ ! -f "$here/payload.tar.xz" ]; then
  echo "run.sh: no payload.tar.xz beside it: run the copy that make bundle writes (bundle/run.sh)" >&2
  exit 2
fi
start=$SECONDS
deadline=$(( SECONDS + ${TOTAL_TIMEOUT:-540} ))
group_timeout=${GROUP_TIMEOUT:-150}
jobs_max=${JOBS:-8}
read -r -a test_args <<<"${TEST_ARGS:-}"    # split into words, never globbed
read -r -a bench_args <<<"${BENCH_ARGS:-}"
read -r -a train_args <<<"${TRAIN_ARGS:-}"

# bin/ and lib/ travel compressed: unpacked into a temporary folder for this run
work=$(mktemp -d "${TMPDIR:-/tmp}/cutrain-bundle.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
if [ -n "$bundle_bin" ]; then
  ln -s "$(cd "$bundle_bin" && pwd)" "$work/bin" && mkdir "$work/lib" || exit 1
elif command -v xz >/dev/null 2>&1; then
  tar -xJf "$here/payload.tar.xz" -C "$work" || exit 1
else  # no xz on the host: Python's tarfile reads .xz too
  python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
t.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))' \
    "$here/payload.tar.xz" "$work" || exit 1
fi
cd "$work" || exit 1  # tests find bin/cutrain beside bin/cutrain_tests
mkdir -p logs
summary=$out/summary.md
cuda=${CUDA_HOME:-/usr/local/cuda}
build_info=$here/BUILD
if [ ! -f "$build_info" ]; then  # a build tree (CUTRAIN_BUNDLE_BIN)
  build_info=$work/BUILD
  echo "build tree: $bundle_bin (not a bundle)" >"$build_info"
fi
commit=${CUTRAIN_COMMIT:-$(sed -n 's/^commit: //p' "$build_info")}

# --- libraries: the bundle's, then CUDA's, then cuBLAS/cuDNN wherever this host keeps them
# (CUDA's lib64, the system, or the pip wheels of the torch python: nvidia/<lib>/lib). Only
# cutrain's programs get this path (cr): a python started under it would load the bundle's
# libz and libssl.
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
    found="$found- $l: $d"$'\n'
    case ":$lib_dirs:" in *":$d:"*) ;; *) lib_dirs="$lib_dirs:$d" ;; esac
  else
    found="$found- $l: NOT FOUND"$'\n'
  fi
done
# mpirun for the mpirun tests: the host's, else the bundle's OpenMPI, relocated (OPAL_PREFIX).
mpirun_from="$(command -v mpirun || true)"
if [ -z "$mpirun_from" ] && [ -d "$work/openmpi/usr/bin" ]; then
  ompi=$work/openmpi/usr
  export OPAL_PREFIX=$ompi PMIX_INSTALL_PREFIX=$ompi PATH="$ompi/bin:$PATH"
  export PMIX_MCA_mca_base_component_path=$ompi/lib/x86_64-linux-gnu/pmix2/lib/pmix
  lib_dirs="$lib_dirs:$ompi/lib/x86_64-linux-gnu:$ompi/lib/x86_64-linux-gnu/openmpi/lib"
  mpirun_from="the bundle's OpenMPI ($ompi/bin/mpirun)"
fi
cr=(env "LD_LIBRARY_PATH=$lib_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
[ -d "$here/data/fashion-mnist" ] && export CUTRAIN_FASHION_MNIST_DIR="$here/data/fashion-mnist"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
line_buffered=(); command -v stdbuf >/dev/null 2>&1 && line_buffered=(stdbuf -oL -eL)

# --- is there a GPU? Then a skipped GPU test is a failure: the GPU went unchecked.
gpu_reason=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  gpu_reason="nvidia-smi not found"
elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  gpu_reason="nvidia-smi lists no GPU"
else
  export CUTRAIN_EXPECT_GPU=1
fi
sanitizer=$(command -v compute-sanitizer ||
            find "$cuda"/bin "$cuda"/compute-sanitizer -maxdepth 1 -name compute-sanitizer \
              2>/dev/null | head -1)
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)

{
  echo "# cutrain bundle run, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname): $steps"
  echo
  sed 's/^/    /' "$build_info"
  echo
  echo "GPU: ${gpu_reason:-$gpu_name}"
  echo "compute-sanitizer: ${sanitizer:-not found}"
  echo "mpirun: ${mpirun_from:-not found (the mpirun tests skip)}"
  echo "libraries:"
  echo -n "$found"
  echo
} >"$summary"

status=0  # 1 when anything failed: run.sh's exit status
phase_deadline=$deadline  # the pool and the reruns end earlier, leaving time for the timed steps
left() { local d=$deadline; [ "$phase_deadline" -lt "$d" ] && d=$phase_deadline; echo $(( d - SECONDS )); }
# limit N: N, or what is left of the total (minus 5 s), whichever is smaller
limit() { local l; l=$(left); l=$(( l - 5 )); [ "$1" -lt "$l" ] && l=$1; echo "$l"; }
clean() { tr '|\n\r' '/  ' | cut -c1-"${2:-300}"; }  # $1 made safe for one table cell
row() { echo "| $* |" >>"$summary"; }
section() {  # section TITLE "| a | b |": a heading and a table's first two lines
  printf '\n## %s\n\n%s\n%s\n' "$1" "$2" \
    "$(echo "$2" | awk -F'|' '{ s = "|"; for (i = 2; i < NF; i++) s = s " --- |"; print s }')" >>"$summary"
}

# ---------------------------------------------------------------- groups of GPU tests
# The binary's own list, with the file of each test case (doctest's XML listing), so a new
# [gpu] test is never left out. A group: one source file; its tests filtered by -sf and [gpu].
list_groups() {  # prints "file count" per group, files as compiled (tests/kernels/x_test.cpp)
  "${cr[@]}" bin/cutrain_tests -ltc -tc="*[gpu]*" --reporters=xml 2>/dev/null |
    sed -n 's/.*<TestCase .*filename="\([^"]*\)".*/\1/p' | sort | uniq -c | awk '{print $2, $1}'
}
group_name() { basename "$1" .cpp; }
test_name() {  # test_name FILE K: the K-th [gpu] test case of FILE, in the order doctest runs them
  "${cr[@]}" bin/cutrain_tests -ltc -sf="*$1" -tc="*[gpu]*" --reporters=xml 2>/dev/null |
    sed -n 's/.*<TestCase name="\([^"]*\)".*/\1/p' | sed -n "$2p" | sed 's/&quot;/"/g; s/&apos;/'"'"'/g; s/&lt;/</g; s/&gt;/>/g; s/&amp;/\&/g'
}
sticky='cudaErrorIllegalAddress|cudaErrorLaunchFailure|cudaErrorMisalignedAddress|cudaErrorIllegalInstruction|cudaErrorAssert|cudaErrorHardwareStackError|cudaErrorInvalidPc|cudaErrorLaunchTimeout|cudaErrorECCUncorrectable'

# group_tests LIMIT LOG FILE [ARGS...]: FILE's [gpu] test cases (and TEST_ARGS) under the
# limit, line-buffered, with cutrain's library path, into LOG; `via` (an array, empty unless a
# caller sets it: compute-sanitizer and its options) runs the binary.
via=()
group_tests() {
  local lim=$1 log=$2 file=$3
  shift 3
  timeout -k 5 "$lim" "${line_buffered[@]}" env LD_LIBRARY_PATH="$lib_dirs" "${via[@]}" \
    bin/cutrain_tests -sf="*$file" -tc="*[gpu]*" "$@" "${test_args[@]}" >"$log" 2>&1
}

# test_job FILE: runs its [gpu] tests; the row goes into the summary at once.
test_job() {
  local file=$1 name log t0 rc lim counts first
  name=$(group_name "$file"); log=logs/tests-$name.log
  lim=$(limit "$group_timeout")
  t0=$SECONDS
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} group_tests "$lim" "$log" "$file" --duration=true
  rc=$?
  echo "$rc" >"$log.rc"
  counts=$(sed -n 's/^tests: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped.*/\1 | \2 | \3/p' "$log" | tail -1)
  first=$(first_failure "$log" "$rc" "$lim")
  row "$name | ${counts:-? | ? | ?} | $(( SECONDS - t0 )) | $rc | $first"
}
# The first failure of a log: the runner's closing list names each failed test case (a crash
# too: the runner then went on with the next case in a new process) and its first failed
# assertion; a group whose runner was killed by the time limit, its last "[case N]" line.
first_failure() {
  local log=$1 rc=$2 lim=$3 listed
  [ "$rc" = 0 ] && { echo "-"; return; }
  listed=$(awk '/^failed test cases \(/ { getline a; getline b; sub(/^ +/, "", a); sub(/^ +/, "", b);
                                          print a ": " b; exit }' "$log")
  case $rc in
    124|137) echo "TIMED OUT after ${lim}s; running: $(grep -a '^\[case ' "$log" | tail -n 1)" | clean ;;
    *) echo "${listed:-exit $rc; $(tail -n 2 "$log" | tr '\n' ' ')}" | clean ;;
  esac
}
# rerun_job FILE COUNT: a hung or sticky-error group (a CUDA error that every later case of
# its process then meets), one test case per process with synchronous launches, so the failing
# test and launch are named. Rows "group #k".
rerun_job() {
  local file=$1 count=$2 name k log rc lim t0 first
  name=$(group_name "$file")
  for k in $(seq 1 "$count"); do
    lim=$(limit 60)
    [ "$lim" -lt 10 ] && { row "$name #$k | - | - | - | 0 | - | not rerun: out of time"; continue; }
    log=logs/rerun-$name-$k.log
    t0=$SECONDS
    CUTRAIN_SYNC_LAUNCHES=1 OMP_NUM_THREADS=2 group_tests "$lim" "$log" "$file" \
      --first="$k" --last="$k"
    rc=$?
    [ "$rc" = 0 ] && { rm -f "$log"; continue; }
    first=$(first_failure "$log" "$rc" "$lim")
    row "$name #$k | - | FAILED | - | $(( SECONDS - t0 )) | $rc | $(echo "[$(test_name "$file" "$k")] $first" | clean 400)"
  done
}

# sanitize_job TOOL FILE: compute-sanitizer on one group. Tests with timing bounds are left
# out; memcheck leaves out the API errors that tests provoke on purpose (a refused capture).
sanitize_job() {
  local tool=$1 file=$2 name log t0 rc lim counts
  name=$(group_name "$file"); log=logs/$tool-$name.log
  lim=$(limit 200)
  local via=("$sanitizer" --tool "$tool" --print-limit 20 --error-exitcode 1)
  [ "$tool" = memcheck ] && via+=(--leak-check no --report-api-errors no)
  # Each tensor's own bounds: every buffer its own cudaMalloc (CUTRAIN_EXACT_ALLOC), or, with
  # MEMCHECK_NVTX=1, the caching allocator's NVTX annotations (kernels/nvtx_memory.h).
  local exact=1 nvtx=
  if [ "$tool" = memcheck ] && [ "${MEMCHECK_NVTX:-0}" = 1 ]; then
    via+=(--nvtx yes); exact= nvtx=1
  fi
  t0=$SECONDS
  CUTRAIN_EXACT_ALLOC=$exact CUTRAIN_NVTX_MEMORY=$nvtx OMP_NUM_THREADS=2 group_tests "$lim" "$log" "$file" \
    -tce="gpu timeline*,*steps in flight*"
  rc=$?
  echo "$rc" >"$log.rc"
  counts=$(grep -a "ERROR SUMMARY\|RACECHECK SUMMARY\|SYNCCHECK SUMMARY" "$log" | sed 's/^=* *//' | tail -1)
  [ "$rc" = 124 ] && counts="TIMED OUT after ${lim}s; ${counts}"
  row "$tool $name | $(sed -n 's/^tests: \(.*\)/\1/p' "$log" | tail -1 | clean) | $(( SECONDS - t0 )) | $rc | $(echo "${counts:-no summary} $(grep -a -m1 -A2 '^========= \(Invalid\|Race\|Barrier\|Error\)' "$log" | tr '\n' ' ')" | clean 400)"
}

# pool JOB...: runs the queued jobs ("test FILE", "sanitize TOOL FILE"), JOBS at a time; a
# job not started before the deadline is reported as not run.
pool() {
  local running=0 j
  for j in "$@"; do
    if [ "$(left)" -lt 20 ]; then
      row "$(echo "$j" | awk '{print $NF}' | xargs basename) | - | - | - | 0 | - | not run: TOTAL_TIMEOUT reached"
      status=1; continue
    fi
    while [ "$running" -ge "$jobs_max" ]; do wait -n; running=$(( running - 1 )); done
    # shellcheck disable=SC2086
    ${j%% *}_job ${j#* } &
    running=$(( running + 1 ))
  done
  wait
}

test_groups=""       # "file count" lines
run_tests_and_sanitizers() {  # $1: tests, sanitize or both
  local what=$1 queue=() g f c
  test_groups=$(list_groups)
  if [ -z "$test_groups" ]; then
    row "(no [gpu] test cases listed by bin/cutrain_tests) | - | - | - | 0 | - | -"; status=1; return
  fi
  if [ "$what" != sanitize ]; then
    section "GPU test groups (tests.log)" "| group | passed | failed | skipped | seconds | exit | first failure |"
    if [ -n "$gpu_reason" ]; then
      echo "$test_groups" | while read -r f c; do row "$(group_name "$f") | 0 | 0 | $c | 0 | 0 | skipped: $gpu_reason"; done
    else
      # the timeline tests compare host and device clocks: alone on the GPU, before the pool
      while read -r f c; do
        case $f in *timeline*) test_job "$f" ;; *) queue+=("test $f") ;; esac
      done <<<"$test_groups"
    fi
  fi
  if [ "$what" != tests ] && [ -z "$gpu_reason" ] && [ -n "$sanitizer" ] &&
     ! "${cr[@]}" "$sanitizer" --tool memcheck bin/cutrain info 2>&1 | grep -qi "not supported\|unknown error"; then
    while read -r f c; do
      case $f in
        tests/kernels/*|tests/nn/*) queue+=("sanitize memcheck $f") ;;
        *) [ "${MEMCHECK_ALL:-0}" = 1 ] && queue+=("sanitize memcheck $f") ;;
      esac
    done <<<"$test_groups"
    for g in reduce_gpu_test batchnorm_gpu_test softmax_xent_gpu_test linear_gpu_test conv2d_gpu_test pool_gpu_test; do
      f=$(echo "$test_groups" | awk -v g="/$g.cpp" 'index($1, g) {print $1}')
      [ -n "$f" ] && queue+=("sanitize racecheck $f")
    done
    for g in reduce_gpu_test linear_gpu_test; do
      f=$(echo "$test_groups" | awk -v g="/$g.cpp" 'index($1, g) {print $1}')
      [ -n "$f" ] && queue+=("sanitize synccheck $f")
    done
  elif [ "$what" != tests ]; then
    row "sanitizers | - | - | - | 0 | - | skipped: ${gpu_reason:-compute-sanitizer cannot run on this host}"
  fi
  phase_deadline=$(( SECONDS + ${POOL_TIMEOUT:-200} ))
  [ "${#queue[@]}" -gt 0 ] && pool "${queue[@]}"
  phase_deadline=$(( SECONDS + ${RERUN_TIMEOUT:-60} ))
  # hung (no closing line) or sticky: again one test case per process
  if [ "$what" != sanitize ] && [ -z "$gpu_reason" ]; then
    while read -r f c; do
      local log; log=logs/tests-$(group_name "$f").log
      [ -f "$log.rc" ] || continue
      local rc; rc=$(cat "$log.rc")
      [ "$rc" = 0 ] && continue
      if [ "$rc" = 124 ] || [ "$rc" = 137 ] || ! grep -aq '^tests: ' "$log" ||
         grep -aEq "$sticky" "$log"; then
        rerun_job "$f" "$c"
      fi
    done <<<"$test_groups"
  fi
  phase_deadline=$deadline
  # tests.log: the failing groups' output (trimmed), then every test case's duration
  {
    for f in logs/tests-*.log logs/rerun-*.log; do
      [ -f "$f" ] || continue
      case $f in logs/tests-*) [ "$(cat "$f.rc" 2>/dev/null)" = 0 ] && continue ;; esac
      echo "=============== $f (exit $(cat "$f.rc" 2>/dev/null || echo '?'))"
      grep -av '^\[doctest\] \|^\s*$' "$f" | head -n 150
    done
    echo "=============== durations (seconds, test case)"
    cat logs/tests-*.log 2>/dev/null | grep -a '^[0-9.]* s: ' | sort -rn | head -n 200
  } >"$out/tests.log"
  if ls logs/memcheck-* logs/racecheck-* logs/synccheck-* >/dev/null 2>&1; then
    for f in logs/memcheck-*.log logs/racecheck-*.log logs/synccheck-*.log; do
      [ -f "$f" ] || continue
      grep -aq 'ERROR SUMMARY: 0 errors\|SUMMARY: 0 hazards' "$f" && grep -aq '^tests: .* 0 failed' "$f" && continue
      echo "=============== $f"; grep -av '^\s*$' "$f" | head -n 120
    done >"$out/sanitize.log"
  fi
  for f in logs/*.rc; do [ -f "$f" ] && [ "$(cat "$f")" != 0 ] && status=1; done
}

# ---------------------------------------------------------------- timed steps
# timed NAME SECONDS LOG COMMAND...: one command under its limit; sets last_rc, last_secs.
timed() {
  local name=$1 lim log=$3 t0
  lim=$(limit "$2"); shift 3
  if [ "$lim" -lt 15 ]; then
    echo "== $name: not run: TOTAL_TIMEOUT reached" >>"$log"; last_rc=124 last_secs=0; return
  fi
  echo "== $name ($(date -u +%H:%M:%S), limit ${lim}s): $*" >>"$log"
  t0=$(date +%s.%N)
  timeout -k 5 "$lim" "${line_buffered[@]}" "$@" >>"$log" 2>&1
  last_rc=$?
  last_secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "== $name: exit $last_rc after ${last_secs}s" >>"$log"
}
steps_table=""
step_row() {
  [ -n "$steps_table" ] || { section "steps" "| step | exit | seconds | result |"; steps_table=1; }
  row "$1 | $2 | $3 | $(echo "$4" | clean 400)"
}
fm=$work/fashion-mnist
import_fm() {  # the JPEGs, once (every step that trains reads them)
  [ -f "$fm/train.txt" ] && return 0
  "${cr[@]}" bin/cutrain import-fashion-mnist --from "$CUTRAIN_FASHION_MNIST_DIR" --out "$fm" >>"$out/train.log" 2>&1
}

train_step() {  # $1: train or train-graph
  local name=$1 run=$work/run-$1 extra=() final speed
  [ "$name" = train ] && extra=(--no-cuda-graph)
  if [ -n "$gpu_reason" ]; then step_row "$name" - 0 "skipped: $gpu_reason"; return; fi
  import_fm || { step_row "$name" 1 0 "import-fashion-mnist failed (train.log)"; status=1; return; }
  timed "$name" 200 "$out/train.log" "${cr[@]}" bin/cutrain train --train "$fm/train.txt" \
    --val "$fm/test.txt" --model default --device cuda --epochs "$TRAIN_EPOCHS" --out "$run" \
    --trace "$run/trace.json" "${extra[@]}" "${train_args[@]}"
  [ "$last_rc" = 0 ] || status=1
  final=$(grep -a "^final:" "$out/train.log" | tail -1)
  speed=$(grep -a "^trained " "$out/train.log" | tail -1)
  {
    echo "## $name: cutrain train --model default --device cuda --epochs $TRAIN_EPOCHS ${extra[*]} ${TRAIN_ARGS:-}"
    echo
    echo "- exit status $last_rc, wall time ${last_secs} s"
    echo "- ${final:-no final line (train.log)}"
    echo "- ${speed:-no summary line}"
    echo; echo '```'; grep -a "^epoch\|notice\|warning" "$out/train.log" | tail -30; echo '```'; echo
    echo "The last records of metrics.jsonl (data wait, images/s per epoch):"; echo; echo '```'
    tail -n 3 "$run/metrics.jsonl" 2>/dev/null | cut -c1-1500; echo '```'; echo
  } >>"$out/train-gpu.md"
  step_row "$name" "$last_rc" "$last_secs" "${final:-no final line: $(grep -av '^==' "$out/train.log" | tail -n 2 | tr '\n' ' ')} ${speed}"
  if [ "$name" = train ] && [ -x bin/bench_data ]; then  # load-only, for the pipeline ratio
    timed bench_data 40 "$out/train.log" "${cr[@]}" bin/bench_data --list "$fm/train.txt" --size 28 \
      --resize 28 --channels 1 --batch 256
    { echo "### the loader alone (bin/bench_data, same list)"; echo; grep -a '^|' "$out/train.log" | tail -20; echo; } >>"$out/train-gpu.md"
  fi
}

# [recipe-94]'s preset on the full data, one run per seed of RECIPE_SEEDS.
recipe_step() {
  local seed run final
  if [ -n "$gpu_reason" ]; then step_row recipe - 0 "skipped: $gpu_reason"; return; fi
  import_fm || { step_row recipe 1 0 "import-fashion-mnist failed (train.log)"; status=1; return; }
  for seed in ${RECIPE_SEEDS:-1}; do
    run=$work/run-recipe-$seed
    timed "recipe-seed$seed" 120 "$out/train.log" "${cr[@]}" bin/cutrain train --train "$fm/train.txt" \
      --val "$fm/test.txt" --recipe fmnist --device cuda --seed "$seed" --out "$run"
    [ "$last_rc" = 0 ] || status=1
    final=$(grep -a "^final" "$out/train.log" | tail -2 | tr '\n' ' ')
    { echo "## recipe: cutrain train --recipe fmnist --seed $seed (all 60,000 images, 10,000 test)"
      echo; echo "- exit status $last_rc, wall time ${last_secs} s (the whole process)"
      echo "- ${final:-no final line (train.log)}"
      echo "- $(grep -a "^trained " "$out/train.log" | tail -1)"; echo; } >>"$out/train-gpu.md"
    step_row "recipe-seed$seed" "$last_rc" "$last_secs" "${final:-no final line}"
  done
}

# compare_step compare|photos
compare_step() {
  local py=python3 cmp=$work/compare name=$1 results=$out/$1.md
  local -a args
  if [ -n "$gpu_reason" ]; then step_row "$1" - 0 "skipped: $gpu_reason"; return; fi
  if ! "$py" -c 'import torch' 2>/dev/null; then step_row "$1" - 0 "skipped: no torch in $py"; return; fi
  if [ ! -f "$here/compare/compare.sh" ]; then step_row "$1" - 0 "skipped: not in this bundle"; return; fi
  import_fm || { step_row "$1" 1 0 "import-fashion-mnist failed"; status=1; return; }
  # compare.sh runs from a repository root: its scripts, and bin/ as wrappers that give
  # cutrain's programs the library path (and nothing else)
  mkdir -p "$cmp/bin" "$cmp/bench"
  cp -r "$here/compare/." "$cmp/bench/"
  for b in cutrain bench_data bench_photos; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$lib_dirs" "$work/bin/$b" >"$cmp/bin/$b"
    chmod +x "$cmp/bin/$b"
  done
  if [ "$name" = photos ]; then
    # shellcheck disable=SC2206: the arguments are words by design
    args=(--photos --photo-dir "$work/photos" ${PHOTOS_ARGS:---seeds 1 --epochs 3})
  else
    # shellcheck disable=SC2206
    args=(--epochs "$TRAIN_EPOCHS" ${COMPARE_ARGS:---caps "240 90 60"})
  fi
  timed "$name" "${COMPARE_TIMEOUT:-420}" "$out/$name.log" env CUTRAIN_COMMIT="$commit" "$cmp/bench/compare.sh" \
    "${args[@]}" --data "$fm" --out "$work/$name-runs" --results "$results"
  [ "$last_rc" = 0 ] || status=1
  [ -f "$results" ] || { echo "# compare.sh $name did not finish (exit $last_rc)"; echo; echo '```'; tail -40 "$out/$name.log"; echo '```'; } >"$results"
  rm -f "$out/$name.log"
  step_row "$name" "$last_rc" "$last_secs" "$(grep -a '^| cutrain\|^| torch' "$results" | head -3 | tr '\n' ' ')"
  if [ "$name" = photos ]; then  # at most 8 files come back: one table file for both
    { echo; cat "$results"; } >>"$out/compare.md"
    rm -f "$results"
  fi
}

for step in $steps; do
  case $step in
    info)
      {
        echo '## preflight'; echo; echo '```'
        if [ -z "$gpu_reason" ]; then
          nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
        else echo "($gpu_reason)"; fi
        echo "unresolved libraries: $("${cr[@]}" ldd bin/* 2>&1 | grep "not found" | sort -u | tr -s ' \t\n' ' ')"
        timeout 20 "${line_buffered[@]}" env LD_LIBRARY_PATH="$lib_dirs" bin/cutrain info 2>&1 | head -30
        echo '```'
      } >>"$summary"
      ;;
    tests) run_tests_and_sanitizers tests ;;
    sanitize) run_tests_and_sanitizers sanitize ;;
    tests+sanitize) run_tests_and_sanitizers both ;;
    bench)
      if [ -n "$gpu_reason" ]; then step_row bench - 0 "skipped: $gpu_reason"; continue; fi
      timed bench 150 "$out/bench.log" "${cr[@]}" bin/bench_kernels_gpu --out "$out/bench-kernels.md" \
        "${bench_args[@]}"
      [ "$last_rc" = 0 ] || status=1
      step_row bench "$last_rc" "$last_secs" "$(grep -a "^- \(PASS\|FAIL\|NOT\)\|WRONG" "$out/bench.log" | head -4 | tr '\n' ' ')"
      ;;
    train|train-graph) train_step "$step" ;;
    recipe) recipe_step ;;
    plan)
      if [ -n "$gpu_reason" ]; then step_row plan - 0 "skipped: $gpu_reason"; continue; fi
      roof=h100  # the roofline of the GPU here, when cutrain knows it
      case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
        *H200*) roof=h200 ;; *A100*) roof=a100 ;; *L4*) roof=l4 ;;
      esac
      timed plan 60 "$out/plan.log" "${cr[@]}" bin/cutrain describe default --step --measure --gpu "$roof"
      [ "$last_rc" = 0 ] || status=1
      { echo "## plan: cutrain describe default --step --measure --gpu $roof"; echo; echo '```'
        grep -av '^==' "$out/plan.log"; echo '```'; echo; } >>"$out/train-gpu.md"
      step_row plan "$last_rc" "$last_secs" "$(grep -a '^Total:\|^Measured:' "$out/plan.log" | tr '\n' ' ')"
      rm -f "$out/plan.log"
      ;;
    compare|photos) compare_step "$step" ;;
    replicas)
      if [ -n "$gpu_reason" ]; then step_row replicas - 0 "skipped: $gpu_reason"; continue; fi
      timed replicas 200 "$out/replicas.md" "${cr[@]}" bin/bench_replicas_gpu --devices "${REPLICA_DEVICES:-0,0}"
      [ "$last_rc" = 0 ] || status=1
      step_row replicas "$last_rc" "$last_secs" "$(grep -a '^| 2 |' "$out/replicas.md" | head -1)"
      ;;
    *) echo "run.sh: unknown step '$step' (info tests sanitize tests+sanitize bench train train-graph recipe plan compare photos replicas)" >&2
       exit 2 ;;
  esac
done

echo "ended after $(( SECONDS - start ))s, exit $status" >>"$summary"
sed -n '/^## GPU test groups/,$p' "$summary"
echo "files: $out"
exit $status
