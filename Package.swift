// swift-tools-version: 6.1
import PackageDescription

import class Foundation.ProcessInfo

let package = Package(
    name: "Concord",
    // Linux only: a build elsewhere stops at an #error in ConcordSystem (Sources/ConcordSystem/Platform.swift).
    // The macOS line lets a Mac resolve the package and open it in an editor.
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "FileCoordination", targets: ["FileCoordination"]),
        .library(name: "FileWatching", targets: ["FileWatching"]),
        .library(name: "Persistence", targets: ["Persistence"]),
        .library(name: "SQLiteStore", targets: ["SQLiteStore"]),
        .library(name: "PlistStore", targets: ["PlistStore"]),
        .library(name: "JSONStore", targets: ["JSONStore"]),
        // The contract every store plugin must meet, runnable against any plugin (ours or yours).
        .library(name: "StoreConformance", targets: ["StoreConformance"]),
        .library(name: "FolderSync", targets: ["FolderSync"]),
        .library(name: "SyncTestKit", targets: ["SyncTestKit"]),
        // For adopters' tests: a recording presenter, child processes, temporary directories.
        .library(name: "FileCoordinationTesting", targets: ["FileCoordinationTesting"]),
        .executable(name: "concord", targets: ["concord"]),
        .executable(name: "notes", targets: ["notes"]),
        .executable(name: "documents", targets: ["documents"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // `swift package generate-documentation` (`make docs`).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // Declarations Swift's Glibc module does not export (eventfd).
        .target(name: "CConcordShims"),
        // The system layer: every kernel facility Concord uses, wrapped once.
        .target(
            name: "ConcordSystem",
            dependencies: ["CConcordShims", .product(name: "SystemPackage", package: "swift-system")]
        ),
        // inotify watching: files and trees, moves paired, overflow rescanned, item queries.
        .target(
            name: "FileWatching",
            dependencies: ["ConcordSystem", .product(name: "Logging", package: "swift-log")]
        ),
        // FileCoordinator and FilePresenter on flock(2).
        .target(
            name: "FileCoordination",
            dependencies: ["ConcordSystem", "FileWatching", .product(name: "Logging", package: "swift-log")]
        ),
        // The record model (schemas, object ids, records), object contexts and their save
        // pipeline, the store plugin API, the registry, the store coordinator and migration.
        .target(
            name: "Persistence",
            dependencies: ["ConcordSystem", "FileCoordination", .product(name: "Logging", package: "swift-log")]
        ),
        // Store plugins: each imports only the public API of Persistence and FileCoordination.
        .target(
            name: "SQLiteStore",
            dependencies: [
                "Persistence", "FileCoordination", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ],
            path: "Plugins/SQLiteStore"
        ),
        .target(name: "PlistStore", dependencies: ["Persistence", "FileCoordination"], path: "Plugins/PlistStore"),
        .target(name: "JSONStore", dependencies: ["Persistence", "FileCoordination"], path: "Plugins/JSONStore"),
        // Folder sync: per-device transaction logs in a shared container directory.
        .target(
            name: "FolderSync",
            dependencies: [
                "ConcordSystem", "Persistence", "FileCoordination", "FileWatching",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The decoders of files other devices and processes write, as the fuzzers (`make fuzz`)
        // and the corpus replay (`FuzzTests`) drive them (Fuzz/README.md).
        .target(
            name: "FuzzTargets",
            dependencies: ["FolderSync", "Persistence", "JSONStore", "PlistStore", "SyncTestKit"]
        ),
        // The store-plugin conformance suite (a test kit: no dependency on a test framework).
        .target(name: "StoreConformance", dependencies: ["Persistence"]),
        // The `concord` command-line tool: doctor, log, store check and salvage, watch, demo.
        .executableTarget(
            name: "concord",
            dependencies: [
                "FileCoordination", "Persistence", "FolderSync", "SQLiteStore", "JSONStore", "PlistStore",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The Notes sample: a small app on the public products only (Samples/Notes/README.md).
        .executableTarget(
            name: "notes",
            dependencies: [
                "FileCoordination", "Persistence", "SQLiteStore", "JSONStore", "PlistStore", "FolderSync",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Samples/Notes",
            exclude: ["README.md"]
        ),
        // The Documents sample: conflict versions shown and resolved (Samples/Documents/README.md).
        .executableTarget(
            name: "documents",
            dependencies: [
                "FileCoordination",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Samples/Documents",
            exclude: ["README.md"]
        ),
        // A helper process the multi-process tests spawn.
        .executableTarget(
            name: "ConcordTestHelper",
            dependencies: [
                "FileCoordination", "FileWatching", "Persistence", "SQLiteStore", "JSONStore", "PlistStore",
                "FolderSync",
                "SyncTestKit",
            ],
            path: "Tests/Helpers/ConcordTestHelper"
        ),
        // The process `make crash` kills at random and at aimed points (Tests/Crash).
        .executableTarget(
            name: "ConcordCrashHelper",
            dependencies: ["Persistence", "SQLiteStore", "JSONStore", "PlistStore", "FolderSync"],
            path: "Tests/Helpers/ConcordCrashHelper"
        ),
        // The test kit for adopters (and the project's own tests): a recording presenter whose
        // waits are bounded, child processes to start and read lines from, temporary directories,
        // held coordinated accesses. No dependency on a test framework.
        .target(name: "FileCoordinationTesting", dependencies: ["FileCoordination", "ConcordSystem"]),
        // The project's own test fixtures on top of it (re-exported): the test helper process,
        // watcher event recording, the inotify watch-limit lock.
        .target(
            name: "ConcordTestSupport",
            dependencies: ["FileCoordinationTesting", "FileCoordination", "FileWatching", "ConcordSystem"],
            path: "Tests/TestSupport"
        ),
        .testTarget(
            name: "FileCoordinationTests",
            dependencies: ["FileCoordination", "ConcordSystem", "ConcordTestSupport"]
        ),
        .testTarget(
            name: "FileWatchingTests",
            dependencies: ["FileWatching", "ConcordSystem", "ConcordTestSupport"]
        ),
        .testTarget(
            name: "PersistenceTests",
            dependencies: ["Persistence", "FileCoordination", "StoreConformance", "ConcordTestSupport"]
        ),
        // The deterministic multi-device sync simulator (a test kit: N devices, one container,
        // delivery order, delays, duplicates, partial files and conflict copies from a seed).
        .target(name: "SyncTestKit", dependencies: ["FolderSync", "Persistence"]),
        .testTarget(
            name: "FolderSyncTests",
            dependencies: [
                "SyncTestKit", "FolderSync", "Persistence", "FileCoordination", "ConcordTestSupport", "SQLiteStore",
                "ConcordTestHelper",
            ]
        ),
        // The three plugins: conformance, corrupt files, migration between them.
        .testTarget(
            name: "StorePluginTests",
            dependencies: [
                "Persistence", "StoreConformance", "SQLiteStore", "PlistStore", "JSONStore", "ConcordTestSupport",
                "ConcordCrashHelper",
            ]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "FileCoordination", "ConcordSystem", "ConcordTestSupport", "ConcordTestHelper",
                "Persistence", "SQLiteStore", "PlistStore", "JSONStore", "FolderSync", "SyncTestKit", "documents",
            ]
        ),
        // Every file under Fuzz/Corpus and Fuzz/Crashes through the fuzzers' entry points.
        .testTarget(
            name: "FuzzTests",
            dependencies: ["FuzzTargets", "FolderSync", "Persistence", "SyncTestKit", "JSONStore", "PlistStore"]
        ),
        // The `concord` tool: doctor on damaged containers, log, store check and salvage, watch.
        .testTarget(
            name: "ConcordToolTests",
            dependencies: [
                "concord", "ConcordTestSupport", "FolderSync", "Persistence", "SQLiteStore", "JSONStore", "PlistStore",
                "SyncTestKit", .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        // The Notes sample driven as a user would, in separate processes.
        .testTarget(
            name: "NotesSampleTests",
            dependencies: ["notes", "ConcordTestSupport", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        // The Notes sample across a real file-sync engine: two Syncthing daemons on loopback
        // (`make test-engine`; skipped unless CONCORD_ENGINE_TESTS=1).
        .testTarget(name: "EngineTests", dependencies: ["notes", "ConcordTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)

// The benchmarks (ordo-one/benchmark) join the package only for `make bench`, which sets
// CONCORD_BENCHMARKS=1 and builds in its own scratch directory, so `make test` never builds the
// harness.
if ProcessInfo.processInfo.environment["CONCORD_BENCHMARKS"] != nil {
    package.dependencies.append(
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"])
    )
    package.targets.append(
        .executableTarget(
            name: "CoordinationBenchmarks",
            dependencies: ["FileCoordination", .product(name: "Benchmark", package: "benchmark")],
            path: "Benchmarks/CoordinationBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    )
    package.targets.append(
        .executableTarget(
            name: "WatchingBenchmarks",
            dependencies: [
                "FileCoordination", "FileWatching", "ConcordSystem",
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/WatchingBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    )
    package.targets.append(
        .executableTarget(
            name: "StoreBenchmarks",
            dependencies: [
                "Persistence", "SQLiteStore", "PlistStore", "JSONStore",
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/StoreBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    )
    package.targets.append(
        .executableTarget(
            name: "SyncBenchmarks",
            dependencies: [
                "Persistence", "SQLiteStore", "FolderSync", .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/SyncBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    )
}

// The libFuzzer driver joins the package only for `make fuzz`, which sets CONCORD_FUZZ=1 and
// builds it with `-sanitize=fuzzer,address` in its own scratch directory (Fuzz/README.md).
if ProcessInfo.processInfo.environment["CONCORD_FUZZ"] != nil {
    package.targets.append(
        .executableTarget(name: "concord-fuzz", dependencies: ["FuzzTargets"], path: "Fuzz/Driver")
    )
    package.products.append(.executable(name: "concord-fuzz", targets: ["concord-fuzz"]))
}
