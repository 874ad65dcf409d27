import Benchmark
import Dispatch
import FolderSync
import Foundation
import Persistence
import SQLiteStore

// Sync benchmarks: each sync operation next to the plain store operation it wraps, measured in
// the same run, with "ratio" rows.
//
// - Import: applying 5,000 inserted records from 50 logs into a fresh SQLite store, against one
//   context save of the same 5,000 records into a fresh SQLite store. The row is the import's
//   throughput as a percentage of the direct commit's (goal: 50 % or more).
// - Export: a one-record save with live sync (the outbox entry in the commit; the log written
//   after it by the sync queue, batched when saves come fast) against the same save without
//   sync: the p50 of each, as a percentage (goal: 130 % or less). And the one-shot form, a save
//   followed by `exportPending()` (a command that exits after its save), against the save alone.
// - Scaling (ScalingBenchmarks.swift): importing 20,000 logs against 1,000, and a pass that finds
//   nothing new at both sizes.
// - Change cost (ChangeCostSyncBenchmarks.swift): an arriving one-note log, a one-shot save and an
//   idle pass with a folder of 100,000 notes against one of 1,000.
// - Latency: a log renamed into the shared container until its record is visible in another
//   FolderSync's SQLite store, through the live watcher: in this process, and in another process
//   (this executable started again as the reader, which says when the import committed) (goal:
//   p50 under 5 ms).
#if canImport(Glibc)
import Glibc
#endif

let schema = try! Schema(
    version: 1,
    entities: [
        EntityDescription(
            "Item",
            attributes: [
                AttributeDescription("title", .string),
                AttributeDescription("count", .integer, defaultValue: 0),
            ]
        )
    ]
)

let registry: StoreRegistry = {
    let registry = StoreRegistry()
    registry.register(SQLiteStore.self)
    return registry
}()

let importRatio = BenchmarkMetric.custom(
    "import throughput / direct (%)",
    polarity: .prefersLarger,
    useScalingFactor: false
)
let exportRatio = BenchmarkMetric.custom(
    "save with sync / without (%)",
    polarity: .prefersSmaller,
    useScalingFactor: false
)
let latencyMetric = BenchmarkMetric.custom("rename to visible (µs)", polarity: .prefersSmaller, useScalingFactor: false)

/// A scratch directory for the whole run.
final class Scratch: @unchecked Sendable {
    let root: URL
    private var counter = 0
    init() {
        root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("sync-bench-\(UUID().uuidString)")
        try! FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(at: root) }
    func fresh(_ name: String) -> URL {
        counter += 1
        let folder = root.appendingPathComponent("\(counter)")
        try! FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder.appendingPathComponent(name)
    }
}

/// A store on a coordinator of its own.
struct Side {
    let coordinator: StoreCoordinator
    let store: any PersistentStore
    let sync: FolderSync?

    init(at url: URL, container: URL?, device: String) {
        let coordinator = StoreCoordinator(schema: schema, registry: registry)
        let store = try! coordinator.addStore(ofType: "sqlite", at: url, options: StoreOptions(presentsFiles: false))
        self.coordinator = coordinator
        self.store = store
        sync = container.map {
            try! FolderSync(coordinator: coordinator, store: store, container: $0, storeName: "bench", deviceID: device)
        }
    }

    func insert(_ records: ArraySlice<Record>) {
        let context = ObjectContext(coordinator: coordinator, origin: .local)
        for record in records { try! context.insert(record) }
        try! context.save()
    }
}

func nanoseconds(_ body: () -> Void) -> UInt64 {
    let start = DispatchTime.now().uptimeNanoseconds
    body()
    return DispatchTime.now().uptimeNanoseconds - start
}

/// Counts ratio iterations, so the two sides alternate which runs first.
final class Turn: @unchecked Sendable {
    private var value = 0
    func next() -> Int {
        value += 1
        return value
    }
}

/// The other process of the cross-process latency benchmark: syncs live from the container named
/// by `CONCORD_SYNC_BENCH_READER` into a store of its own, prints `ready`, then `imported` after
/// each import has committed, until its standard input closes.
func runLatencyReader(container: URL, store: URL) -> Never {
    let side = Side(at: store, container: container, device: "reader")
    let sync = side.sync!
    let observer = NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) {
        note in
        if case .imported(let logs, _)? = note.userInfo?["event"] as? SyncEvent, logs > 0 {
            FileHandle.standardOutput.write(Data("imported\n".utf8))
        }
    }
    try! sync.start()
    sync.waitForQueuedWork()
    FileHandle.standardOutput.write(Data("ready\n".utf8))
    while readLine() != nil {}
    NotificationCenter.default.removeObserver(observer)
    sync.stop()
    exit(0)
}

/// The lines a child process prints, read with a bound.
final class ChildLines: @unchecked Sendable {
    let process = Process()
    private let output = Pipe()
    private let input = Pipe()
    private var buffer: [UInt8] = []

    init(environment: [String: String]) {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = []
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = output
        process.standardInput = input
        try! process.run()
    }

    /// The next line, or `nil` after `seconds`.
    func next(within seconds: Int) -> String? {
        let fd = output.fileHandleForReading.fileDescriptor
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(seconds) * 1_000_000_000
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                defer { buffer.removeSubrange(...newline) }
                return String(decoding: buffer[..<newline], as: UTF8.self)
            }
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { return nil }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, Int32((deadline - now) / 1_000_000 + 1)) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = read(fd, &chunk, chunk.count)
            guard count > 0 else { return nil }
            buffer.append(contentsOf: chunk[..<count])
        }
    }

    /// Skips lines until `expected` (the reader's own chatter, if any); `false` on timeout.
    func wait(for expected: String, within seconds: Int) -> Bool {
        while let line = next(within: seconds) { if line == expected { return true } }
        return false
    }

    func finish() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}

let benchmarks: @Sendable () -> Void = {
    if let container = ProcessInfo.processInfo.environment["CONCORD_SYNC_BENCH_READER"],
        let store = ProcessInfo.processInfo.environment["CONCORD_SYNC_BENCH_READER_STORE"]
    {
        runLatencyReader(container: URL(fileURLWithPath: container), store: URL(fileURLWithPath: store))
    }
    let scratch = Scratch()
    let records = (0..<5_000).map { index in
        Record(
            id: .random(entity: "Item"),
            values: ["title": .string("item \(index)"), "count": .integer(Int64(index))]
        )
    }

    // The logs to import: 50 saves of 100 records by one device.
    let container = scratch.fresh("container")
    try! FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
    do {
        let source = Side(at: scratch.fresh("source.sqlite"), container: container, device: "source")
        for start in stride(from: 0, to: records.count, by: 100) { source.insert(records[start..<start + 100]) }
        try! source.sync!.exportPending()
        source.coordinator.removeStore(source.store)
    }

    let timing = Benchmark.Configuration(
        metrics: [.wallClock, .throughput],
        scalingFactor: .one,
        maxDuration: .seconds(10),
        maxIterations: 10
    )

    Benchmark("Sync import 5k changes from 50 logs", configuration: timing) { benchmark in
        let target = Side(at: scratch.fresh("target.sqlite"), container: container, device: "target")
        benchmark.startMeasurement()
        let report = try! target.sync!.importAvailable()
        benchmark.stopMeasurement()
        precondition(report.changes == records.count)
    }
    Benchmark("Sync import 5k direct save", configuration: timing) { benchmark in
        let target = Side(at: scratch.fresh("direct.sqlite"), container: nil, device: "")
        benchmark.startMeasurement()
        target.insert(records[...])
        benchmark.stopMeasurement()
    }
    let importTurn = Turn()
    Benchmark(
        "Sync import ratio",
        configuration: Benchmark.Configuration(metrics: [importRatio], maxDuration: .seconds(30), maxIterations: 10)
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            let synced = Side(at: scratch.fresh("target.sqlite"), container: container, device: "target")
            let direct = Side(at: scratch.fresh("direct.sqlite"), container: nil, device: "")
            var importTime: UInt64 = 0
            var directTime: UInt64 = 0
            if importTurn.next() % 2 == 0 {
                importTime = nanoseconds { _ = try! synced.sync!.importAvailable() }
                directTime = nanoseconds { direct.insert(records[...]) }
            } else {
                directTime = nanoseconds { direct.insert(records[...]) }
                importTime = nanoseconds { _ = try! synced.sync!.importAvailable() }
            }
            benchmark.measurement(importRatio, Int(directTime * 100 / max(importTime, 1)))
        }
    }

    // Export overhead, live: 100 one-record saves each, timed one by one and interleaved, with
    // live sync exporting behind them and without sync.
    let liveTurn = Turn()
    Benchmark(
        "Sync save p50 with live sync vs without",
        configuration: Benchmark.Configuration(metrics: [exportRatio], maxDuration: .seconds(60), maxIterations: 10)
    ) {
        benchmark in
        for _ in benchmark.scaledIterations {
            let exportContainer = scratch.fresh("live-export-container")
            try! FileManager.default.createDirectory(at: exportContainer, withIntermediateDirectories: true)
            let synced = Side(at: scratch.fresh("synced.sqlite"), container: exportContainer, device: "exporter")
            let plain = Side(at: scratch.fresh("plain.sqlite"), container: nil, device: "")
            try! synced.sync!.start()
            // The saves are interleaved one by one, in alternating order, so that both sides see
            // the same machine (its load drifts by more than the difference measured). The export
            // live sync defers behind a save finishes before the next plain save (its file writes
            // would slow that one, and flatter the ratio).
            var syncTimes: [UInt64] = []
            var plainTimes: [UInt64] = []
            let first = liveTurn.next()
            for index in 0..<100 {
                let slice = records[index..<index + 1]
                if (first + index) % 2 == 0 {
                    syncTimes.append(nanoseconds { synced.insert(slice) })
                    synced.sync!.waitForQueuedWork()
                    plainTimes.append(nanoseconds { plain.insert(slice) })
                } else {
                    plainTimes.append(nanoseconds { plain.insert(slice) })
                    syncTimes.append(nanoseconds { synced.insert(slice) })
                    synced.sync!.waitForQueuedWork()
                }
            }
            // Every save's log reaches the container (outside the measurement): nothing is left to
            // write (live maintenance may have folded the first ones into a baseline meanwhile).
            synced.sync!.waitForQueuedWork()
            precondition(try! synced.sync!.lastLocalSequence() == 100, "a save made no log")
            precondition(try! synced.sync!.exportPending() == 0, "live sync left logs unwritten")
            synced.sync!.stop()
            func p50(_ times: [UInt64]) -> UInt64 { times.sorted()[times.count / 2] }
            benchmark.measurement(exportRatio, Int(p50(syncTimes) * 100 / max(p50(plainTimes), 1)))
        }
    }

    // Export overhead, one-shot: 100 one-record saves, each followed by its export, and without.
    let exportTurn = Turn()
    Benchmark(
        "Sync save then export vs save",
        configuration: Benchmark.Configuration(metrics: [exportRatio], maxDuration: .seconds(30), maxIterations: 10)
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            let exportContainer = scratch.fresh("export-container")
            try! FileManager.default.createDirectory(at: exportContainer, withIntermediateDirectories: true)
            let synced = Side(at: scratch.fresh("synced.sqlite"), container: exportContainer, device: "exporter")
            let plain = Side(at: scratch.fresh("plain.sqlite"), container: nil, device: "")
            func withSync() {
                for index in 0..<100 {
                    synced.insert(records[index..<index + 1])
                    try! synced.sync!.exportPending()
                }
            }
            func without() {
                for index in 0..<100 { plain.insert(records[index..<index + 1]) }
            }
            var syncTime: UInt64 = 0
            var plainTime: UInt64 = 0
            if exportTurn.next() % 2 == 0 {
                syncTime = nanoseconds(withSync)
                plainTime = nanoseconds(without)
            } else {
                plainTime = nanoseconds(without)
                syncTime = nanoseconds(withSync)
            }
            benchmark.measurement(exportRatio, Int(syncTime * 100 / max(plainTime, 1)))
        }
    }

    // Latency: a log renamed into the container until its record is in the other store.
    Benchmark(
        "Sync live latency rename to visible",
        configuration: Benchmark.Configuration(metrics: [latencyMetric], maxDuration: .seconds(20), maxIterations: 200)
    ) { benchmark in
        let shared = scratch.fresh("live-container")
        let staging = scratch.fresh("staging-container")
        for folder in [shared, staging] {
            try! FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        let writer = Side(at: scratch.fresh("writer.sqlite"), container: staging, device: "writer")
        let reader = Side(at: scratch.fresh("reader.sqlite"), container: shared, device: "reader")
        let imported = DispatchSemaphore(value: 0)
        let observer = NotificationCenter.default.addObserver(
            forName: .concordSyncEvent,
            object: reader.sync!,
            queue: nil
        ) { note in
            if case .imported? = note.userInfo?["event"] as? SyncEvent { imported.signal() }
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        try! reader.sync!.start()
        defer { reader.sync!.stop() }
        let writerFolder = shared.appendingPathComponent("bench/devices/writer")
        try! FileManager.default.createDirectory(at: writerFolder, withIntermediateDirectories: true)
        reader.sync!.waitForQueuedWork()
        for iteration in benchmark.scaledIterations {
            let record = records[iteration % records.count]
            var fresh = record
            fresh.id = .random(entity: "Item")
            writer.insert([fresh][...])
            try! writer.sync!.exportPending()
            let sequence = try! writer.sync!.lastLocalSequence()
            let name = ContainerLayout.logFileName(sequence: sequence)
            let temporary = writerFolder.appendingPathComponent(".syncthing.\(name).tmp")
            try! Data(contentsOf: staging.appendingPathComponent("bench/devices/writer/\(name)")).write(to: temporary)
            let start = DispatchTime.now().uptimeNanoseconds
            precondition(rename(temporary.path, writerFolder.appendingPathComponent(name).path) == 0)
            while try! reader.store.records(with: [fresh.id]).isEmpty {
                precondition(imported.wait(timeout: .now() + .seconds(5)) == .success, "the log was not imported")
            }
            benchmark.measurement(latencyMetric, Int((DispatchTime.now().uptimeNanoseconds - start) / 1_000))
        }
    }
    // The same, across processes: the reader is this executable started again.
    Benchmark(
        "Sync cross-process latency rename to visible",
        configuration: Benchmark.Configuration(metrics: [latencyMetric], maxDuration: .seconds(20), maxIterations: 200)
    ) { benchmark in
        let shared = scratch.fresh("process-container")
        let staging = scratch.fresh("process-staging")
        for folder in [shared, staging] {
            try! FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        let writerFolder = shared.appendingPathComponent("bench/devices/writer")
        try! FileManager.default.createDirectory(at: writerFolder, withIntermediateDirectories: true)
        let writer = Side(at: scratch.fresh("writer.sqlite"), container: staging, device: "writer")
        let reader = ChildLines(environment: [
            "CONCORD_SYNC_BENCH_READER": shared.path,
            "CONCORD_SYNC_BENCH_READER_STORE": scratch.fresh("reader.sqlite").path,
        ])
        defer { reader.finish() }
        precondition(reader.wait(for: "ready", within: 30), "the reader process did not start")
        for iteration in benchmark.scaledIterations {
            var fresh = records[iteration % records.count]
            fresh.id = .random(entity: "Item")
            writer.insert([fresh][...])
            try! writer.sync!.exportPending()
            let name = ContainerLayout.logFileName(sequence: try! writer.sync!.lastLocalSequence())
            let temporary = writerFolder.appendingPathComponent(".syncthing.\(name).tmp")
            try! Data(contentsOf: staging.appendingPathComponent("bench/devices/writer/\(name)")).write(to: temporary)
            let start = DispatchTime.now().uptimeNanoseconds
            precondition(rename(temporary.path, writerFolder.appendingPathComponent(name).path) == 0)
            precondition(reader.wait(for: "imported", within: 5), "the reader process did not import the log")
            benchmark.measurement(latencyMetric, Int((DispatchTime.now().uptimeNanoseconds - start) / 1_000))
        }
    }
    scalingBenchmarks(scratch)
    changeCostSyncBenchmarks(scratch)
}
