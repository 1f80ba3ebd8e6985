#!/usr/bin/env bash
# make stress: the test suites run again and again under load, to find the cases that fail by
# chance; prints every case that failed in any round, with the rounds it failed in.
#
#   make stress ROUNDS=5 SUITES="test cpu sim" MODES="alone hog pair"
#
# Suites: test (make test's bin/cutrain_tests), cpu (the CPU-only build's), sim (make
# sim-test's cases on simulated GPUs). Modes, each ROUNDS times per suite:
#   alone  the suite by itself;
#   hog    beside a busy loop on every core (a CI machine shared with another job);
#   pair   two copies of the suite at once (two CI jobs on one machine): rounds "Na" and "Nb".
# Each suite is built first (test and cpu both link bin/, so they take turns). Logs and the
# summary go to STRESS_OUT (build/stress); a round's log is kept when something in it failed.
# The exit status is 1 when any case failed in any round.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
suites=${SUITES:-test cpu sim}
modes=${MODES:-alone hog pair}
out=${STRESS_OUT:-build/stress}
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$out"
summary=$out/summary.txt
failures=$out/failures.txt  # "suite mode round<TAB>where  name<TAB>first failure", one a line
: >"$failures"

build() {
  case $1 in
    test) make -j"$jobs" all ;;
    cpu) make -j"$jobs" CPU_ONLY=1 all ;;
    sim) make -j"$jobs" SIM=1 build/sim/bin/cutrain build/sim/bin/cutrain_gpu_tests ;;
  esac >"$out/build-$1.log" 2>&1
}

# run_suite SUITE LOG: one run of the suite's binary, as its make target runs it.
run_suite() {
  case $1 in
    test | cpu) OMP_WAIT_POLICY=passive bin/cutrain_tests ;;
    sim) CUTRAIN_SIM_DEVICES=2 OMP_WAIT_POLICY=passive build/sim/bin/cutrain_gpu_tests \
           -tc='*[gpu]*,sim: *,sim teeth: *' ;;
  esac >"$2" 2>&1
}

hog_pids=()
hog_start() {
  for _ in $(seq "$jobs"); do
    (while :; do :; done) &
    hog_pids+=($!)
  done
}
hog_stop() {
  [ "${#hog_pids[@]}" -gt 0 ] && kill "${hog_pids[@]}" 2>/dev/null
  wait "${hog_pids[@]}" 2>/dev/null
  hog_pids=()
}
trap 'hog_stop; exit 130' INT TERM

# collect SUITE MODE ROUND LOG: the runner's list of failed cases into $failures; a log without
# the closing line (the runner itself killed) counts as a failure of the run.
collect() {
  local suite=$1 mode=$2 round=$3 log=$4 tag="$1 $2 $3"
  if ! grep -aq '^tests: ' "$log"; then
    printf '%s\t%s\t%s\n' "$tag" "(no closing line)" "$(tail -n 2 "$log" | tr '\n\t' '  ')" >>"$failures"
    echo "  $tag: no closing line; last: $(grep -a '^\[case ' "$log" | tail -n 1)"
    return
  fi
  awk -v tag="$tag" '
    /^failed test cases \(/ { on = 1; next }
    /^tests: / { on = 0 }
    on && /^  [^ ]/ { sub(/^ +/, ""); c = $0; next }
    on && /^      / { sub(/^ +/, ""); printf "%s\t%s\t%s\n", tag, c, $0 }
  ' "$log" >>"$failures"
  echo "  $tag: $(grep -a '^tests: ' "$log" | tail -n 1) ($(( SECONDS - t0 )) s)"
  grep -aq '^tests: .* 0 failed' "$log" && rm -f "$log"
}

echo "stress: suites '$suites', modes '$modes', $rounds rounds each; logs in $out"
for suite in $suites; do
  echo "== $suite: building"
  if ! build "$suite"; then
    echo "stress: the $suite build failed ($out/build-$suite.log)"; exit 2
  fi
  for mode in $modes; do
    for r in $(seq "$rounds"); do
      t0=$SECONDS
      case $mode in
        alone) run_suite "$suite" "$out/$suite-$mode-$r.log"
               collect "$suite" "$mode" "$r" "$out/$suite-$mode-$r.log" ;;
        hog) hog_start
             run_suite "$suite" "$out/$suite-$mode-$r.log"
             hog_stop
             collect "$suite" "$mode" "$r" "$out/$suite-$mode-$r.log" ;;
        pair) run_suite "$suite" "$out/$suite-$mode-${r}a.log" &
              a=$!
              run_suite "$suite" "$out/$suite-$mode-${r}b.log"
              wait "$a"
              collect "$suite" "$mode" "${r}a" "$out/$suite-$mode-${r}a.log"
              collect "$suite" "$mode" "${r}b" "$out/$suite-$mode-${r}b.log" ;;
        *) echo "stress: unknown mode '$mode' (alone, hog, pair)"; exit 2 ;;
      esac
    done
  done
done

{
  echo "stress: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git describe --always --dirty 2>/dev/null)," \
       "suites '$suites', modes '$modes', $rounds rounds each"
  if [ ! -s "$failures" ]; then
    echo "no case failed in any round"
  else
    echo "cases that failed, with the rounds (suite mode round) and each round's first failure:"
    sort -t $'\t' -k2,2 -k1,1 "$failures" | awk -F'\t' '
      $2 != last { print "  " $2; last = $2 }
      { print "      " $1 ": " $3 }'
  fi
} | tee "$summary"
[ ! -s "$failures" ]
