#!/usr/bin/env bash
# fuzz/run.sh TARGET SECONDS: runs build/fuzz/bin/TARGET_fuzz for SECONDS (make fuzz calls it
# once per target; fuzz/README.md).
#
# Inputs: the working corpus build/fuzz/work/TARGET (grows from run to run; new inputs go
# there), the seeds build/fuzz/corpus/TARGET (make_corpus) and the kept reproducers
# fuzz/regressions/TARGET (read only). libFuzzer runs every one of them first, then mutates.
# The full log goes to build/fuzz/logs/TARGET.log; one summary line is printed. On a finding
# (crash, sanitizer report, uncaught exception, timeout, out of memory) it prints the
# reproducer, the command that replays it and how to keep it, and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

target=$1
seconds=$2
bin=build/fuzz/bin/${target}_fuzz
work=build/fuzz/work/$target
seeds=build/fuzz/corpus/$target
regressions=fuzz/regressions/$target
findings=build/fuzz/findings/$target
log=build/fuzz/logs/$target.log
mkdir -p "$work" "$findings" "$(dirname "$log")"

# The largest input: room above each target's biggest seed (HDF5 files are some KiB).
case $target in
  pack) max_len=131072 ;;
  checkpoint) max_len=65536 ;;
  image_decode) max_len=32768 ;;
  checkpoint_config) max_len=16384 ;;
  *) max_len=4096 ;;
esac

# The HDF5 targets run differently (fuzz/README.md, "libhdf5"):
#  - no leak check per input: libhdf5 keeps memory in free lists from one call to the next,
#    which makes libFuzzer run LeakSanitizer after nearly every input (slow) and report
#    libhdf5's own error paths; their feeds check instead that no HDF5 object is left open;
#  - an allocation over 1 GiB fails (malloc returns NULL) instead of being a finding: libhdf5
#    sizes a string's buffer from the file before it reads the string (up to 4 GiB, zeroed),
#    and a failed allocation is an error it reports cleanly. cutrain's own `new` of that much
#    is still reported by AddressSanitizer, as an out-of-memory finding;
#  - libFuzzer's fork mode, going on after a crash, hang or OOM: libhdf5 1.10 has bugs of its
#    own that crafted files reach. Each input that failed is replayed afterwards; one that fails
#    inside libhdf5 (the first frame below the sanitizer's is libhdf5's) is set aside as a
#    libhdf5 bug, anything else is a finding.
leaks=1
asan=detect_leaks=1
fork=()
case $target in
  pack | checkpoint)
    leaks=0
    asan=detect_leaks=0:allocator_may_return_null=1:max_allocation_size_mb=1024
    fork=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1) ;;
esac
dirs=("$work" "$seeds")
[ -d "$regressions" ] && dirs+=("$regressions")

# -timeout: one input running 10 s is a hang; -rss_limit_mb: past 2 GiB (also the limit of a
# single allocation) is a runaway allocation. Both are findings, like a crash.
export ASAN_OPTIONS=${ASAN_OPTIONS:-$asan}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
options=(-max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -detect_leaks="$leaks")
started=$(mktemp)
status=0
"$bin" -max_total_time="$seconds" "${options[@]}" "${fork[@]}" -print_final_stats=1 \
  -artifact_prefix="$findings/" "${dirs[@]}" >"$log" 2>&1 || status=$?

# In fork mode: replay what failed, and set aside what failed inside libhdf5 (the first frame
# that is neither the sanitizer's, libFuzzer's nor libc's: a memcpy that libhdf5 called, shown
# by its glibc source path when glibc's symbols are installed, is libhdf5's). The sanitizer's
# and libFuzzer's frames are those in the target's binary without a source line (cutrain's own
# code is built with -g): an interceptor may be named either way, `__interceptor_strdup` or
# `strdup`, as the symbolizer picks between aliases. An input that does not fail when replayed
# alone failed on libhdf5's state from earlier inputs (the feeds keep none of cutrain's, and
# check that no HDF5 object stays open): set aside too.
# In fork mode libFuzzer's exit status is that of its last job, so a run whose last input
# crashed inside libhdf5 exits 1: the replays below decide instead. A failure that left no
# input behind (libFuzzer itself failing) still counts.
libhdf5=()
if [ ${#fork[@]} -gt 0 ]; then
  failed=$(find "$findings" -maxdepth 1 -type f -newer "$started" | wc -l)
  [ "$failed" -gt 0 ] && status=0
  while IFS= read -r input; do
    replayed=0
    replay=$("$bin" "${options[@]}" "$input" 2>&1) || replayed=$?
    first=$(grep -E '^ +#[0-9]+ ' <<<"$replay" |
            grep -vE '__interceptor_|__asan|__sanitizer|__ubsan|fuzzer::|libc\.so|sysdeps/|in (malloc|calloc|realloc|free|operator new|operator delete|__mem(cpy|move|set)[a-z_]*) ' |
            grep -vF "/${target}_fuzz+0x" |
            head -1 || true)
    if [ "$replayed" = 0 ] || grep -q 'libhdf5' <<<"$first"; then
      mkdir -p "$findings/libhdf5" && mv "$input" "$findings/libhdf5/"
      libhdf5+=("$(basename "$input")")
    else
      status=1
      printf '%s\n' "$replay" >>"$log"
      echo "Test unit written to $input" >>"$log"
    fi
  done < <(find "$findings" -maxdepth 1 -type f -newer "$started")
fi
rm -f "$started"

stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
runs=$(stat number_of_executed_units)
rate=$(stat average_exec_per_sec)
if [ -z "$runs" ]; then  # fork mode: the parent's last progress line, "#N: ... exec/s R ..."
  runs=$(grep -oE '^#[0-9]+: cov' "$log" | tail -1 | tr -dc '0-9')
  rate=$(grep -oE 'exec/s [0-9]+' "$log" | tail -1 | tr -dc '0-9')
fi
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
corpus=$(find "$work" -type f | wc -l)
known=""
[ ${#libhdf5[@]} -gt 0 ] &&
  known="; ${#libhdf5[@]} inside libhdf5, set aside in $findings/libhdf5 (fuzz/README.md)"
if [ "$status" = 0 ]; then
  echo "fuzz: $target: ${seconds} s, ${runs:-?} inputs (${rate:-?}/s), coverage ${cov:-?}," \
       "corpus ${corpus}: no finding$known"
  exit 0
fi

echo "fuzz: $target: FINDING (libFuzzer exit $status); the log is $log:"
grep -E 'ERROR: |runtime error:|SUMMARY: |terminate called|what\(\): |fuzz: broken promise|==[0-9]+== ?(ERROR|WARNING)|ALARM|out-of-memory|Test unit written' "$log" | head -20 | sed 's/^/  /'
found=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
if [ -n "$found" ]; then
  echo "  reproducer: $found"
  echo "  replay it:  $bin $found"
  echo "  keep it:    cp $found $regressions/<what-it-is>  (after the fix; fuzz/README.md)"
fi
exit 1
