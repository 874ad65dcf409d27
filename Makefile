# Concord: the two commands are `make demo` and `make test`. Both install what they need.

SWIFT        ?= swift
CONFIG       ?= debug
# Debian packages the build, the tests and the demo need beyond the Swift toolchain (util-linux
# and mount: setpriv and a read-only bind mount in the SQLite folder-access tests; strace: the
# random-source failure injected in RandomSourceFailureTests).
DEB_PACKAGES ?= git ca-certificates procps inotify-tools libsqlite3-dev util-linux mount strace
# Debian packages only `make test-engine` needs: the real file-sync engines it drives (Syncthing
# for the Notes runs and ConflictEngineTests' Syncthing case; rclone 1.60 and unison for its
# other cases, which also run under `make test` wherever those two are installed).
ENGINE_PACKAGES ?= syncthing rclone unison
BIN           = .build/$(CONFIG)

.PHONY: all deps deps-engine install-packages build test test-templates test-engine test-memory soak fuzz fuzz-seeds crash \
        demo demo-coordination demo-documents bench format lint docs clean

all: build

# Installs the Debian packages that are missing (apt-get update runs only when one is).
deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_PACKAGES)"

deps-engine: deps
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(ENGINE_PACKAGES)"

install-packages:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y $$missing; \
	fi

build: deps
	$(SWIFT) build -c $(CONFIG) --build-tests

# The whole suite: unit tests, multi-process integration tests, short smoke runs of the slow ones.
# Fails too if the run leaves a process behind (a helper, an inotifywait witness, a notes
# launch): every child inherits CONCORD_TEST_RUN, and .ci/leftover-processes names the ones
# still running after `swift test` ends.
test: build
	@run="concord-test-$$$$-$$(date +%s%N)"; status=0; \
	echo "CONCORD_TEST_RUN=$$run $(SWIFT) test -c $(CONFIG) --skip-build"; \
	CONCORD_TEST_RUN=$$run $(SWIFT) test -c $(CONFIG) --skip-build || status=$$?; \
	.ci/leftover-processes "$$run" || status=1; \
	$(MAKE) --no-print-directory test-templates || status=1; \
	exit $$status

# The templates in Samples/ are packages of their own that depend on Concord by path, as an
# adopter's copy would: each builds (Concord's products again, in its own .build) and runs its
# tests (the store plugin's StoreConformance checks, the entity policies).
TEMPLATES ?= Samples/StorePluginTemplate
test-templates: deps
	@status=0; for template in $(TEMPLATES); do \
	  echo "== $$template"; \
	  ( cd $$template && $(SWIFT) build -c $(CONFIG) --build-tests && $(SWIFT) test -c $(CONFIG) --skip-build ) || status=1; \
	done; \
	exit $$status

# The Notes sample carried by real file-sync engines from Debian: Syncthing daemons on loopback
# (127.0.0.1 only) with two devices and with three, unison (`unison A B -batch -auto -times`) and
# rclone bisync (with --resync after a critical error) run in a loop between local folders. Each
# run: 30 s of random concurrent edits with staged clashes and a paused link, then checks against
# a ledger of every command (every field ends with its last write). ENGINE_RUNS=10 repeats it;
# ENGINES=unison,rclone narrows (syncthing, syncthingThree, unison, rclone); every run is
# reported, and the target fails if any run did. A failed run keeps its folder and says where.
ENGINES ?=
ENGINE_RUNS ?= 1
test-engine: deps-engine build
	@failed=0; for run in $$(seq 1 $(ENGINE_RUNS)); do \
	  echo "== engine run $$run of $(ENGINE_RUNS)"; \
	  if CONCORD_ENGINE_TESTS=1 CONCORD_ENGINES="$(ENGINES)" $(SWIFT) test -c $(CONFIG) --skip-build --filter EngineTests; then \
	    echo "== engine run $$run: passed"; else echo "== engine run $$run: FAILED"; failed=$$((failed + 1)); fi; \
	done; \
	echo "== engine runs: $$(( $(ENGINE_RUNS) - failed )) of $(ENGINE_RUNS) passed"; \
	[ $$failed -eq 0 ]

# The long runs: 2,000 seeds of the multi-device sync simulation, both models, split over
# SOAK_JOBS test processes (one process keeps about one core busy); each slice's output goes to
# .build/soak/slice-N.log, and the failing seeds are printed at the end. The slices run the test
# binary itself: `swift test` runs sharing one build folder wait for each other's lock.
SOAK_SEEDS ?= 2000
SOAK_FIRST ?= 1
SOAK_JOBS ?= 2
soak: build
	@mkdir -p .build/soak; rm -f .build/soak/slice-*.log; \
	per=$$(( ($(SOAK_SEEDS) + $(SOAK_JOBS) - 1) / $(SOAK_JOBS) )); pids=""; \
	for job in $$(seq 0 $$(( $(SOAK_JOBS) - 1 ))); do \
	  first=$$(( $(SOAK_FIRST) + job * per )); \
	  count=$$(( $(SOAK_SEEDS) - job * per < per ? $(SOAK_SEEDS) - job * per : per )); \
	  [ $$count -gt 0 ] || continue; \
	  filter=SyncConvergenceTests/devicesConverge; [ $$job -eq 0 ] && filter=SyncConvergenceTests; \
	  echo "== soak slice $$job: seeds $$first to $$(( first + count - 1 ))"; \
	  CONCORD_SYNC_FIRST_SEED=$$first CONCORD_SYNC_SEEDS=$$count $(BIN)/ConcordPackageTests.xctest \
	    --testing-library swift-testing --filter $$filter > .build/soak/slice-$$job.log 2>&1 & pids="$$pids $$!"; \
	done; \
	failed=0; for pid in $$pids; do wait $$pid || failed=1; done; \
	grep -h 'Test run with' .build/soak/slice-*.log; \
	grep -ho 'recorded an issue with 1 argument seed → [0-9]*' .build/soak/slice-*.log | sort -u; \
	[ $$failed -eq 0 ] && echo "== soak: passed" || { echo "== soak: FAILED (.build/soak/slice-*.log)"; exit 1; }

# The importing device's peak memory for a container ten times larger (ImportMemoryTests;
# CONCORD_IMPORT_RECORDS=30000,300000 for the issue's figures).
test-memory: build
	CONCORD_IMPORT_MEMORY=1 $(SWIFT) test -c $(CONFIG) --skip-build --filter ImportMemoryTests

# libFuzzer on every decoder of files other devices and processes write (Fuzz/README.md):
# FUZZ_SECONDS per target (FUZZ_TARGETS="log payload" narrows), executions per target reported,
# crashes minimized into Fuzz/Crashes/<target>/ (which `make test` replays). Built with
# -sanitize=fuzzer,address in .build-fuzz, so the test build is untouched.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_TARGETS="$(FUZZ_TARGETS)" SWIFT=$(SWIFT) Fuzz/run-fuzzers.sh

# Rewrites the seed corpus (Fuzz/Corpus) from a real two-device run.
fuzz-seeds: build
	CONCORD_FUZZ_SEEDS=$(CURDIR)/Fuzz/Corpus $(SWIFT) test -c $(CONFIG) --skip-build --filter FuzzCorpusSeeds

# SIGKILL trials on a synced store of each type, at random and at aimed points (save, export,
# import, SQLite checkpoint, compaction, join, a failed SQLite -wal sync, an add with no randomness), each checked: the store opens, every acknowledged
# save is there, no record is partial, a second device converges (Tests/Crash/crash-trials.sh).
# CRASH_TRIALS per store and point; CRASH_POINTS / CRASH_STORES narrow; CRASH_SEED replays.
CRASH_TRIALS ?= 6
CRASH_STORES ?=
CRASH_POINTS ?=
CRASH_SEED   ?=
crash: deps
	CRASH_TRIALS=$(CRASH_TRIALS) CRASH_STORES="$(CRASH_STORES)" CRASH_POINTS="$(CRASH_POINTS)" CRASH_SEED=$(CRASH_SEED) \
	  CONFIG=$(CONFIG) SWIFT=$(SWIFT) Tests/Crash/crash-trials.sh

# The Notes sample: two devices (an SQLite store and a JSON store, each a separate process) syncing
# through one container folder, told step by step (Samples/Notes/README.md).
demo: deps
	$(SWIFT) build -c $(CONFIG) --product notes
	$(BIN)/notes demo

# The Documents sample: two devices edit one document at once, the engine keeps both (rclone
# bisync when installed, e.g. by `make deps-engine`; else a stand-in that does what Syncthing
# does), one device keeps both edits and the other hears the conflict go (Samples/Documents/README.md).
demo-documents: deps
	$(SWIFT) build -c $(CONFIG) --product documents
	$(BIN)/documents demo

# Shows two processes coordinating on one file, and presenters being asked and told.
demo-coordination: deps
	$(SWIFT) build -c $(CONFIG) --product concord
	$(BIN)/concord demo

# The benchmarks (ordo-one/benchmark): each wrapped operation next to the raw one it wraps, and a
# "ratio" row (wrapped / raw, in %) measured back to back in the same run. BENCH_FILTER=regex
# narrows the run. Built in .build-bench so the test build never compiles the harness.
# The SQLite open rows (clean, and after a kill, against sqlite3_open + PRAGMA quick_check) use a
# 100 MB store; CONCORD_BENCH_OPEN_MB=1 runs them small (BENCH_FILTER='SQLite open.*').
BENCH_FILTER ?= .*
bench: deps
	CONCORD_BENCHMARKS=1 $(SWIFT) package --scratch-path .build-bench --disable-sandbox \
	  benchmark --no-progress --filter '$(BENCH_FILTER)'

# Formatting: the toolchain's swift-format with the rules in .swift-format (swift-nio's: 4 spaces,
# 120 columns, ordered imports). `make format` rewrites the tree in place; `make lint` fails on any
# violation (CI runs it after the tests). Two of swift-nio's rules are off: OnlyOneTrailingClosureArgument
# (`token.whileRegistered({ ... }) { ... }` reads better than either alternative) and
# DontRepeatTypeInStaticProperties (`Inotify.Mask.addToMask` keeps the kernel's IN_MASK_ADD name).
FORMAT_PATHS ?= Package.swift Sources Plugins Tests Benchmarks Fuzz/Driver Samples/Notes Samples/Documents \
                $(foreach template,$(TEMPLATES),$(template)/Package.swift $(template)/Sources $(template)/Tests)
format:
	$(SWIFT) format format --in-place --parallel --recursive $(FORMAT_PATHS)

lint:
	$(SWIFT) format lint --strict --parallel --recursive $(FORMAT_PATHS)

# The DocC catalog of every library product (swift-docc-plugin), warnings as errors: a broken
# symbol link or an undocumented parameter fails the build. Archives go to
# .build/plugins/Swift-DocC/outputs/PRODUCT.doccarchive. CI runs it after the tests.
DOC_TARGETS ?= FileCoordination FileWatching Persistence SQLiteStore PlistStore JSONStore StoreConformance \
               FolderSync SyncTestKit FileCoordinationTesting
docs: deps
	$(SWIFT) package --disable-sandbox generate-documentation --warnings-as-errors \
	  $(foreach target,$(DOC_TARGETS),--target $(target))

clean:
	rm -rf .build .build-bench .build-fuzz .build-crash $(addsuffix /.build,$(TEMPLATES))
