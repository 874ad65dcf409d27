// What SQLiteStore's open costs on a large store (CONCORD_BENCH_OPEN_MB, default 100 MB), next to
// the raw operation it wraps: `sqlite3_open_v2` of the same file and `PRAGMA quick_check` run to
// the end. Two states of the file:
//   - clean: closed cleanly and checked recently, so the store reads the header only;
//   - after a kill: the files as a process killed with the store open left them (a commit still
//     in the -wal), so the store runs `PRAGMA integrity_check` (indexes against their tables)
//     before anything can write the file.
// Each state has a row for the store, one for the raw open, and a "ratio" row that times both
// back to back in each iteration (alternating which goes first) and reports store/raw in percent.
// A store opened after a kill records its check, so every iteration of that state opens a fresh
// copy of the killed files (made outside the measurement).
//
// Each benchmark runs in a process of its own: the first to need the store builds it in a folder
// named after the benchmark tool's process, which the others reuse; folders of earlier runs whose
// tool has ended are removed.
import Benchmark
import Foundation
import GRDBSQLite
import Persistence
import SQLiteStore

/// The store's size in MB: `CONCORD_BENCH_OPEN_MB` (default 100; 1 for a smoke run).
private let openMegabytes = ProcessInfo.processInfo.environment["CONCORD_BENCH_OPEN_MB"].flatMap(Int.init) ?? 100

/// About 4.4 KB of file per record (a 1.5 KB blob on pages of its own, two indexes' entries).
private let openRowCount = max(openMegabytes * 230, 50)

private let openSchema: Schema = try! Schema(
    version: 1,
    entities: [
        EntityDescription(
            "Item",
            attributes: [
                AttributeDescription("title", .string, isIndexed: true),
                AttributeDescription("number", .integer, isIndexed: true),
                AttributeDescription("blob", .data),
            ]
        )
    ]
)

private func openItem(_ index: Int) -> Persistence.Record {
    Persistence.Record(
        id: .deterministic(entity: "Item", name: "item \(index)"),
        values: [
            "title": .string("item \(index)"), "number": .integer(Int64(index)),
            "blob": .data(Data(repeating: UInt8(index % 251), count: 1500)),
        ]
    )
}

/// The measured store, clean and as a kill left it, built once per benchmark run.
private final class OpenFixture: @unchecked Sendable {
    let directory: URL
    let clean: URL
    let killed: URL
    private var copies = 0

    init() {
        let base = URL(fileURLWithPath: NSTemporaryDirectory()).resolvingSymlinksInPath()
        let prefix = "concord-open-bench-"
        // Folders of runs whose benchmark tool has ended.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: base.path)) ?? []
        where name.hasPrefix(prefix) {
            let owner = name.dropFirst(prefix.count).prefix { $0 != "-" }
            if !FileManager.default.fileExists(atPath: "/proc/\(owner)") {
                try? FileManager.default.removeItem(at: base.appendingPathComponent(name))
            }
        }
        directory = base.appendingPathComponent("\(prefix)\(getppid())-\(openRowCount)")
        clean = directory.appendingPathComponent("clean.sqlite")
        killed = directory.appendingPathComponent("killed.sqlite")
        let ready = directory.appendingPathComponent("ready")
        guard !FileManager.default.fileExists(atPath: ready.path) else { return }
        try? FileManager.default.removeItem(at: directory)
        try! FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try! SQLiteStore(url: clean, schema: openSchema, options: StoreOptions(presentsFiles: false))
        for start in stride(from: 0, to: openRowCount, by: 5000) {
            try! store.commit(StoreChanges(inserts: (start..<min(start + 5000, openRowCount)).map(openItem)))
        }
        store.close()
        // A process killed with the store open: its files as they are, a commit in the -wal.
        let live = try! SQLiteStore(url: clean, schema: openSchema, options: StoreOptions(presentsFiles: false))
        try! live.commit(StoreChanges(inserts: [openItem(openRowCount)]))
        Self.copy(clean, to: killed)
        live.close()
        precondition(FileManager.default.fileExists(atPath: killed.path + "-wal"), "the killed copy has no -wal")
        _ = FileManager.default.createFile(atPath: ready.path, contents: nil)
    }

    /// Copies the database with its `-wal` and `-shm`, as they are on disk now.
    static func copy(_ source: URL, to target: URL) {
        for (from, to) in zip(SQLiteStore.files(at: source), SQLiteStore.files(at: target)) {
            try? FileManager.default.removeItem(at: to)
            if FileManager.default.fileExists(atPath: from.path) { try! FileManager.default.copyItem(at: from, to: to) }
        }
    }

    /// A fresh copy of the files a kill left.
    func killedCopy() -> URL {
        copies += 1
        let url = directory.appendingPathComponent("killed-copy-\(getpid())-\(copies).sqlite")
        Self.copy(killed, to: url)
        return url
    }

    func remove(_ url: URL) {
        for file in SQLiteStore.files(at: url) { try? FileManager.default.removeItem(at: file) }
    }
}

/// `sqlite3_open_v2` and `PRAGMA quick_check` stepped to the end; the connection is returned
/// open, to be closed outside the measurement.
private func rawOpenAndQuickCheck(_ url: URL) -> OpaquePointer? {
    var db: OpaquePointer?
    precondition(sqlite3_open_v2(url.path, &db, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK)
    var statement: OpaquePointer?
    precondition(sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &statement, nil) == SQLITE_OK)
    var result = ""
    while sqlite3_step(statement) == SQLITE_ROW { result = String(cString: sqlite3_column_text(statement, 0)) }
    sqlite3_finalize(statement)
    precondition(result == "ok", "quick_check: \(result)")
    return db
}

private func openStore(_ url: URL) -> SQLiteStore {
    try! SQLiteStore(url: url, schema: openSchema, options: StoreOptions(presentsFiles: false))
}

private let openRatio = BenchmarkMetric.custom("ratio to raw (%)", polarity: .prefersSmaller, useScalingFactor: false)

private func openNanoseconds(_ body: () -> Void) -> UInt64 {
    let start = DispatchTime.now().uptimeNanoseconds
    body()
    return DispatchTime.now().uptimeNanoseconds - start
}

/// Counts ratio iterations, so raw and store alternate which runs first.
/// The store's open time as a percentage of the raw open plus `quick_check`, both timed now, in
/// an order that alternates with `turn` (neither always runs on a warmer cache).
private func openRatioPercent(raw: URL, store storeURL: URL, turn: OpenTurn) -> Int {
    var rawTime: UInt64 = 0
    var storeTime: UInt64 = 0
    func timeRaw() {
        var db: OpaquePointer?
        rawTime = openNanoseconds { db = rawOpenAndQuickCheck(raw) }
        sqlite3_close_v2(db)
    }
    func timeStore() {
        var store: SQLiteStore?
        storeTime = openNanoseconds { store = openStore(storeURL) }
        store?.close()
    }
    if turn.next() % 2 == 0 {
        timeRaw()
        timeStore()
    } else {
        timeStore()
        timeRaw()
    }
    return Int(storeTime * 100 / max(rawTime, 1))
}

private final class OpenTurn: @unchecked Sendable {
    private var value = 0
    func next() -> Int {
        value += 1
        return value
    }
}

/// Fixture made on first use: registration runs in every benchmark's process, measured or not.
private final class LazyOpenFixture: @unchecked Sendable {
    private let lock = NSLock()
    private var made: OpenFixture?
    var fixture: OpenFixture {
        lock.withLock {
            if let made { return made }
            let fixture = OpenFixture()
            made = fixture
            return fixture
        }
    }
}

func sqliteOpenBenchmarks() {
    let lazy = LazyOpenFixture()
    let size = "\(openMegabytes) MB"
    let timing = Benchmark.Configuration(
        metrics: [.wallClock],
        scalingFactor: .one,
        maxDuration: .seconds(20),
        maxIterations: 10
    )
    let ratio = Benchmark.Configuration(metrics: [openRatio], maxDuration: .seconds(40), maxIterations: 10)

    // A clean store, checked recently: the store reads the header only.
    Benchmark("SQLite open \(size) clean raw sqlite3 + quick_check", configuration: timing) { benchmark in
        let fixture = lazy.fixture
        benchmark.startMeasurement()
        let db = rawOpenAndQuickCheck(fixture.clean)
        benchmark.stopMeasurement()
        sqlite3_close_v2(db)
    }
    Benchmark("SQLite open \(size) clean SQLiteStore", configuration: timing) { benchmark in
        let fixture = lazy.fixture
        benchmark.startMeasurement()
        let store = openStore(fixture.clean)
        benchmark.stopMeasurement()
        store.close()
    }
    let cleanTurn = OpenTurn()
    Benchmark("SQLite open \(size) clean ratio", configuration: ratio) { benchmark in
        let fixture = lazy.fixture
        for _ in benchmark.scaledIterations {
            benchmark.measurement(
                openRatio,
                openRatioPercent(raw: fixture.clean, store: fixture.clean, turn: cleanTurn)
            )
        }
    }

    // The files a kill left: the store runs integrity_check before it writes.
    Benchmark("SQLite open \(size) after a kill raw sqlite3 + quick_check", configuration: timing) { benchmark in
        let fixture = lazy.fixture
        let url = fixture.killedCopy()
        defer { fixture.remove(url) }
        benchmark.startMeasurement()
        let db = rawOpenAndQuickCheck(url)
        benchmark.stopMeasurement()
        sqlite3_close_v2(db)
    }
    Benchmark("SQLite open \(size) after a kill SQLiteStore", configuration: timing) { benchmark in
        let fixture = lazy.fixture
        let url = fixture.killedCopy()
        defer { fixture.remove(url) }
        benchmark.startMeasurement()
        let store = openStore(url)
        benchmark.stopMeasurement()
        store.close()
    }
    let killedTurn = OpenTurn()
    Benchmark("SQLite open \(size) after a kill ratio", configuration: ratio) { benchmark in
        let fixture = lazy.fixture
        for _ in benchmark.scaledIterations {
            let rawURL = fixture.killedCopy()
            let storeURL = fixture.killedCopy()
            let percent = openRatioPercent(raw: rawURL, store: storeURL, turn: killedTurn)
            fixture.remove(rawURL)
            fixture.remove(storeURL)
            benchmark.measurement(openRatio, percent)
        }
    }
}
