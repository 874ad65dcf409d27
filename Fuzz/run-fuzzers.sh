#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer driver (Fuzz/Driver) with -sanitize=fuzzer,address in
# .build-fuzz, runs each target for FUZZ_SECONDS, prints the executions per target, and saves
# every crash, hang or out-of-memory input, minimized, under Fuzz/Crashes/<target>/ (replayed by
# `make test`). Exits 1 if any target found something.
#
# FUZZ_SECONDS (default 60)  time per target
# FUZZ_TARGETS (default all) space-separated target names (see `FuzzTarget.all`)
# FUZZ_NICE (default 10)     niceness of the fuzzing processes
set -u
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
seconds=${FUZZ_SECONDS:-60}
nice=${FUZZ_NICE:-10}
scratch=.build-fuzz
work=$scratch/fuzz-work

echo "== building the fuzz driver (.build-fuzz, -sanitize=fuzzer,address)"
CONCORD_FUZZ=1 $SWIFT build --scratch-path "$scratch" -c debug \
  -Xswiftc -sanitize=fuzzer,address -Xswiftc -use-ld=lld --product concord-fuzz || exit 2
binary="$(CONCORD_FUZZ=1 $SWIFT build --scratch-path "$scratch" -c debug --show-bin-path)/concord-fuzz"

all_targets=$(ls Fuzz/Corpus)
targets=${FUZZ_TARGETS:-$all_targets}
found=0
summary=()
mkdir -p "$work"
# The targets that go through files write one per input: in memory when there is a tmpfs.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export CONCORD_FUZZ_SCRATCH=/dev/shm/concord-fuzz-$$
else
  export CONCORD_FUZZ_SCRATCH="$work/scratch"
fi
# No leak check at exit: Foundation keeps a few buffers for the life of the process (a 4 KB read
# buffer of Data(contentsOf:) was reported, on the empty input, as a crash of log-scanner).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
mkdir -p "$CONCORD_FUZZ_SCRATCH"
for target in $targets; do
  corpus="$work/corpus/$target"
  artifacts="$work/artifacts/$target"
  crashes="Fuzz/Crashes/$target"
  mkdir -p "$corpus" "$artifacts" "$crashes"
  rm -f "$artifacts"/*
  echo "== $target: ${seconds}s"
  log="$work/$target.log"
  CONCORD_FUZZ_TARGET=$target nice -n "$nice" "$binary" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -max_len=65536 \
    -detect_leaks=0 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$corpus" "Fuzz/Corpus/$target" >"$log" 2>&1
  status=$?
  executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  corpus_size=$(ls "$corpus" | wc -l)
  findings=0
  for artifact in "$artifacts"/*; do
    [ -f "$artifact" ] || continue
    findings=$((findings + 1))
    name=$(basename "$artifact")
    # Minimize crashes (a timeout or out-of-memory input is kept as found).
    case "$name" in
      crash-*)
        CONCORD_FUZZ_TARGET=$target nice -n "$nice" "$binary" -minimize_crash=1 -runs=20000 -detect_leaks=0 \
          -exact_artifact_path="$crashes/$name" "$artifact" >"$work/$target.minimize.log" 2>&1 \
          || cp "$artifact" "$crashes/$name"
        [ -f "$crashes/$name" ] || cp "$artifact" "$crashes/$name" ;;
      *) cp "$artifact" "$crashes/$name" ;;
    esac
    echo "   FOUND $crashes/$name"
    grep -m3 -E 'Fatal error|ERROR: AddressSanitizer|ERROR: libFuzzer|finding:' "$log" | sed 's/^/     /'
  done
  if [ $findings -gt 0 ]; then found=$((found + findings)); fi
  line=$(printf '%-20s %10s executions %8s/s  corpus %5s  findings %s (exit %s)' "$target" "${executions:-?}" "${rate:-?}" "$corpus_size" "$findings" "$status")
  echo "   $line"
  summary+=("$line")
done
rm -rf "$CONCORD_FUZZ_SCRATCH"
echo "== fuzzing summary (${seconds}s per target; logs in $work)"
printf '   %s\n' "${summary[@]}"
[ $found -eq 0 ] || { echo "== $found finding(s) saved under Fuzz/Crashes: fix them; make test replays them"; exit 1; }
