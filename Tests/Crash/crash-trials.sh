#!/usr/bin/env bash
# `make crash`: SIGKILL trials on a small synced store of each type (SQLite, JSON, plist), at
# random instants and at aimed points (during a save, an export, an import, an SQLite checkpoint,
# a compaction, a join), and at a failed sync of SQLite's -wal (`unsynced`: fdatasync fails with
# EIO and the helper kills itself right after the failed save, before the store closes: the save
# reported failed must not come back), and at a random source that fails (`norandom`: every
# getrandom(2) of an `add`, which gives the new item a random id as `notes add` does, fails with
# EPERM, as in a sandbox that denies it: the add must fail with the typed error, reason
# noRandomness, and save nothing, and every acknowledged item stays). The process killed is ConcordCrashHelper (Tests/Helpers); aimed points
# are file system calls caught by Tests/Crash/crashpoint.c (LD_PRELOAD), so Concord's code has no
# crash hooks. After every trial:
#   - the store opens (the helper's `check` exits 0);
#   - every acknowledged save (the helper printed `saved N`: the save had returned) is there;
#   - no record is partial (each item's title and 2 KB body are exactly what its save wrote);
#   - a second device converges: after the first device syncs and the second imports, both hold
#     the same items (a device that joined during the trial too).
# Prints trials, kills and failures per store and point; exits 1 if any trial failed, keeping its
# folder (.build-crash/run-*) for a look.
#
# CRASH_TRIALS (default 6)  trials per store and point; CRASH_HELPER: a built helper (no build)
# CRASH_STORES (default "sqlite json plist"), CRASH_POINTS (default all: random save export
#   import checkpoint compaction join unsynced norandom; CRASH_POINTS_sqlite etc. for one store type), CRASH_SEED
#   (default: from the clock), CONFIG (debug)
set -u
cd "$(dirname "$0")/../.."
SWIFT=${SWIFT:-swift}
CONFIG=${CONFIG:-debug}
trials=${CRASH_TRIALS:-6}
stores=${CRASH_STORES:-sqlite json plist}
points=${CRASH_POINTS:-random save export import checkpoint compaction join unsynced norandom}
seed=${CRASH_SEED:-$(date +%s)}
RANDOM=$seed

echo "== building ConcordCrashHelper and the crash-point library (seed $seed)"
if [ -n "${CRASH_HELPER:-}" ]; then
  helper=$CRASH_HELPER  # built already (the smoke run in `make test`)
else
  $SWIFT build -c "$CONFIG" --product ConcordCrashHelper >/dev/null || { echo "build failed"; exit 2; }
  helper="$($SWIFT build -c "$CONFIG" --show-bin-path)/ConcordCrashHelper"
fi
mkdir -p .build-crash
clang=$(dirname "$(readlink -f "$(command -v "$SWIFT")")")/clang
[ -x "$clang" ] || clang=cc
"$clang" -O1 -Wall -shared -fPIC -o .build-crash/libconcord-crashpoint.so Tests/Crash/crashpoint.c -ldl || exit 2
preload=$PWD/.build-crash/libconcord-crashpoint.so
work=$PWD/.build-crash/run-$$
rm -rf "$work"; mkdir -p "$work"

failures=0
declare -A count_trials count_kills count_failures
report_failure() {  # store point trial message
  failures=$((failures + 1))
  count_failures[$1/$2]=$(( ${count_failures[$1/$2]:-0} + 1 ))
  echo "   FAILED $1 $2 trial $3: $4"
}

# run DEVICE-DIR DEVICE COMMAND... (no crash)
run() {
  local data=$1 device=$2; shift 2
  "$helper" "$@" --store "$store" --data "$data" --container "$root/container" --device "$device"
}

# aimed CALL SUFFIX SKIP WHEN DATA DEVICE COMMAND...: runs the command with the crash point set;
# sets `out` (its output), `killed` (1 if it was killed at the point).
aimed() {
  local call=$1 suffix=$2 skip=$3 when=$4; shift 4
  local mark="$root/killed-mark"
  rm -f "$mark"
  out=$(CONCORD_CRASH_CALL=$call CONCORD_CRASH_SUFFIX=$suffix CONCORD_CRASH_SKIP=$skip CONCORD_CRASH_WHEN=$when \
    CONCORD_CRASH_MARK=$mark LD_PRELOAD=$preload run "$@" 2>>"$root/stderr")
  killed=0; [ -f "$mark" ] && killed=1
  return 0
}

# random DATA DEVICE COMMAND...: runs it and SIGKILLs it at a random instant of the time a save
# takes (`span`, measured once per store).
random_kill() {
  local data=$1 device=$2; shift 2
  # (exec: the background job is the helper itself, so the kill reaches it.)
  (exec "$helper" "$@" --store "$store" --data "$data" --container "$root/container" --device "$device") \
    >"$root/out" 2>>"$root/stderr" &
  local pid=$!
  local delay=$(( (RANDOM * 32768 + RANDOM) % span ))
  sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  local status=$?
  out=$(cat "$root/out")
  killed=0; [ $status -eq 137 ] && killed=1
}

# The store's write that a save or an import makes: SQLite appends to its log, the others
# replace their file.
store_write() {
  case $store in
    sqlite) echo "pwrite items.sqlite-wal" ;;
    json) echo "rename items.json" ;;
    plist) echo "rename items.plist" ;;
  esac
}

when() { [ $((RANDOM % 2)) -eq 0 ] && echo before || echo after; }

# Checks the device's store: opens, nothing partial, every acknowledged item there. Sets `items`.
check_store() {  # data device trial
  local listing
  if ! listing=$(run "$1" "$2" check 2>>"$root/stderr"); then
    report_failure "$store" "$point" "$3" "the store of $2 does not open: $(tail -1 "$root/stderr")"; items=""; return 1
  fi
  if grep -q '^BAD' <<<"$listing"; then
    report_failure "$store" "$point" "$3" "$2 holds a partial record: $(grep -m1 '^BAD' <<<"$listing")"; return 1
  fi
  items=$(grep '^item' <<<"$listing")
  if [ "$2" = a ]; then
    for number in $(cat "$root/acked"); do
      grep -qx "item $number" <<<"$items" || { report_failure "$store" "$point" "$3" "acknowledged item $number is missing"; return 1; }
    done
  fi
}

# Checks that `data`/`device` converges with device a: a syncs (exporting what it kept), the
# other imports.
check_converges() {  # data device trial
  run "$root/a" a sync >/dev/null 2>>"$root/stderr" || { report_failure "$store" "$point" "$3" "a cannot sync: $(tail -1 "$root/stderr")"; return 1; }
  run "$1" "$2" sync >/dev/null 2>>"$root/stderr" || { report_failure "$store" "$point" "$3" "$2 cannot sync: $(tail -1 "$root/stderr")"; return 1; }
  check_store "$root/a" a "$3" || return 1
  local a_items=$items
  check_store "$1" "$2" "$3" || return 1
  if [ "$a_items" != "$items" ]; then
    report_failure "$store" "$point" "$3" "$2 does not converge with a: $(diff <(echo "$a_items") <(echo "$items") | head -3 | tr '\n' ' ')"
    return 1
  fi
}

# save_acked N: a save without a crash.
save_acked() { run "$root/a" a save "$1" >/dev/null 2>>"$root/stderr" && echo "$1" >>"$root/acked"; }

for store in $stores; do
  root=$work/$store
  mkdir -p "$root/container"
  : >"$root/acked"
  next=1
  started=$(date +%s%N)
  save_acked $next; next=$((next + 1))
  save_acked $next; next=$((next + 1))
  span=$(( ($(date +%s%N) - started) / 2000000 + 1 ))  # milliseconds per save
  run "$root/b" b sync >/dev/null 2>>"$root/stderr"
  store_points_variable=CRASH_POINTS_$store
  for point in ${!store_points_variable:-$points}; do
    [ "$point" = checkpoint ] || [ "$point" = unsynced ] && [ "$store" != sqlite ] && continue
    for trial in $(seq 1 "$trials"); do
      count_trials[$store/$point]=$(( ${count_trials[$store/$point]:-0} + 1 ))
      number=$next; next=$((next + 1))
      other_data=$root/b; other=b
      set -- $(store_write)
      case $point in
        random) random_kill "$root/a" a save $number ;;
        save) aimed "$1" "$2" $((RANDOM % 2)) "$(when)" "$root/a" a save $number ;;
        export) aimed link .cclog 0 "$(when)" "$root/a" a save $number ;;
        checkpoint) aimed pwrite items.sqlite $((RANDOM % 3)) "$(when)" "$root/a" a save $number ;;
        unsynced)
          # The -wal's third sync of the launch: after the header's and sync's start, the save's
          # commit (`strace -e trace=fdatasync -y` on a save shows them).
          CONCORD_CRASH_FAIL=5 CONCORD_CRASH_DIE_ON_FAILURE=1 \
            aimed fdatasync items.sqlite-wal 2 after "$root/a" a save $number
          grep -q "^failed $number" <<<"$out" && killed=1 ;;
        norandom)
          # No randomness for the launch: every getrandom(2) fails with EPERM. (The Swift runtime
          # falls back to /dev/urandom for its own needs; Concord's ids must not.)
          CONCORD_CRASH_FAIL=1 CONCORD_CRASH_EVERY=1 aimed getrandom "" 0 before "$root/a" a add $number
          if grep -q "^failed $number noRandomness: " <<<"$out"; then
            killed=1
          else
            report_failure "$store" "$point" "$trial" "the add without randomness did not fail with noRandomness: $(head -c 300 <<<"$out") $(tail -1 "$root/stderr")"
          fi ;;
        import)
          save_acked $number; number=$next; next=$((next + 1)); save_acked $number
          aimed "$1" "$2" $((RANDOM % 3)) "$(when)" "$root/b" b sync ;;
        compaction)
          save_acked $number
          run "$root/b" b sync >/dev/null 2>>"$root/stderr"
          if [ $((RANDOM % 2)) -eq 0 ]; then
            aimed rename .ccbase 0 "$(when)" "$root/a" a compact
          else
            aimed unlink .cclog $((RANDOM % 2)) "$(when)" "$root/a" a compact
          fi ;;
        join)
          save_acked $number
          other_data=$root/join-$trial; other=join$trial
          case $((RANDOM % 3)) in
            0) aimed rename .plist 0 "$(when)" "$other_data" "$other" sync ;;  # registration, identity
            1) aimed "$1" "$2" $((RANDOM % 3)) "$(when)" "$other_data" "$other" sync ;;  # the joining import
            2) random_kill "$other_data" "$other" sync ;;
          esac ;;
      esac
      # A save acknowledged before the kill must survive it.
      if grep -qx "saved $number" <<<"$out"; then echo "$number" >>"$root/acked"; fi
      [ "$killed" = 1 ] && count_kills[$store/$point]=$(( ${count_kills[$store/$point]:-0} + 1 ))
      attempted=$number  # (check_store's loop sets `number`)
      if check_store "$root/a" a "$trial" && { [ "$point" = unsynced ] || [ "$point" = norandom ]; } \
        && ! grep -qx "saved $attempted" <<<"$out" && grep -qx "item $attempted" <<<"$items"; then
        report_failure "$store" "$point" "$trial" "item $attempted, whose save failed, is in the store"
        continue
      fi
      check_store "$root/a" a "$trial" && check_converges "$other_data" "$other" "$trial"
    done
  done
done

echo "== crash trials (seed $seed; $trials per store and point)"
printf '   %-8s %-11s %7s %6s %9s\n' store point trials kills failures
total_trials=0; total_kills=0
for store in $stores; do
  for point in random save export import checkpoint compaction join unsynced norandom; do
    key=$store/$point
    [ -n "${count_trials[$key]:-}" ] || continue
    printf '   %-8s %-11s %7s %6s %9s\n' "$store" "$point" "${count_trials[$key]}" "${count_kills[$key]:-0}" "${count_failures[$key]:-0}"
    total_trials=$((total_trials + count_trials[$key])); total_kills=$((total_kills + ${count_kills[$key]:-0}))
  done
done
echo "   total: $total_trials trials, $total_kills kills, $failures failures"
if [ $failures -eq 0 ]; then rm -rf "$work"; else echo "== kept $work"; exit 1; fi
