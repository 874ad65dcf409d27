// Import scaling (issue "Sync engine, second generation", item 7): one device's N one-record logs
// imported by a device with a fresh SQLite store, at 1,000 and 20,000 logs, in the same run; and a
// pass that finds nothing new, with those logs applied. Rows are the 20,000-log form as a ratio
// to the 1,000-log form (flat per-log cost: 20x for the import, 1x for the idle pass), and the
// idle pass's own time.
//
// The logs are written directly (the bytes the exporter makes, without its `fsync`s, which only
// slow the setup down): the benchmark measures the importer, not the writer.
import Benchmark
import Dispatch
import FolderSync
import Foundation
import Persistence

let scalingRatio = BenchmarkMetric.custom(
    "20,000 logs / 1,000 logs (x100)",
    polarity: .prefersSmaller,
    useScalingFactor: false
)
let idleMetric = BenchmarkMetric.custom("idle pass (µs)", polarity: .prefersSmaller, useScalingFactor: false)

/// A container holding `count` one-record logs of device "source".
func makeLogContainer(_ scratch: Scratch, count: Int) -> URL {
    let container = scratch.fresh("scaling-\(count)")
    let folder = container.appendingPathComponent("bench/devices/source")
    try! FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    let start = UInt64(Date().timeIntervalSince1970 * 1000) - UInt64(count)
    for sequence in 1...UInt64(count) {
        let clock = SyncClock(time: start + sequence, counter: 0, device: "source")
        var change = SyncChange(id: .random(entity: "Item"))
        change.created = clock
        change.values = [
            "title": ClockedValue(value: .string("item \(sequence)"), clock: clock),
            "count": ClockedValue(value: .integer(Int64(sequence)), clock: clock),
        ]
        let log = LogFile(
            device: "source",
            sequence: sequence,
            schemaVersion: schema.version,
            created: Date(),
            payload: try! SyncPayload(changes: [change]).encoded()
        )
        try! log.encoded().write(to: folder.appendingPathComponent(ContainerLayout.logFileName(sequence: sequence)))
    }
    return container
}

/// Imports everything from `container` into a fresh store; returns the import's and then an
/// idle pass's time (ns).
func importAndIdle(_ scratch: Scratch, from container: URL, expecting count: Int) -> (import: UInt64, idle: UInt64) {
    let target = Side(at: scratch.fresh("scaling-target.sqlite"), container: container, device: "target")
    defer { target.coordinator.removeStore(target.store) }
    var applied = 0
    let importTime = nanoseconds {
        // One call applies everything available, in batches.
        applied = try! target.sync!.importAvailable().changes
    }
    precondition(applied == count, "imported \(applied) of \(count) changes")
    // The idle pass: the median of a few (the first after an import may still see its files settle).
    var idle: [UInt64] = []
    for _ in 0..<5 {
        idle.append(nanoseconds { precondition(try! target.sync!.importAvailable().logs == 0) })
    }
    return (importTime, idle.sorted()[idle.count / 2])
}

/// A container of `count` logs, made the first time a benchmark asks for it (a filtered run of
/// other benchmarks does not pay for it).
final class LazyContainer: @unchecked Sendable {
    private let scratch: Scratch
    private let count: Int
    private let lock = NSLock()
    private var made: URL?

    init(_ scratch: Scratch, count: Int) {
        self.scratch = scratch
        self.count = count
    }

    var url: URL {
        lock.withLock {
            if let made { return made }
            let url = makeLogContainer(scratch, count: count)
            made = url
            return url
        }
    }
}

func scalingBenchmarks(_ scratch: Scratch) {
    let smallContainer = LazyContainer(scratch, count: 1_000)
    let largeContainer = LazyContainer(scratch, count: 20_000)
    var small: URL { smallContainer.url }
    var large: URL { largeContainer.url }
    let configuration = Benchmark.Configuration(metrics: [scalingRatio], maxDuration: .seconds(120), maxIterations: 3)
    Benchmark("Sync import scaling 20k logs vs 1k", configuration: configuration) { benchmark in
        for _ in benchmark.scaledIterations {
            let one = importAndIdle(scratch, from: small, expecting: 1_000)
            let twenty = importAndIdle(scratch, from: large, expecting: 20_000)
            benchmark.measurement(scalingRatio, Int(twenty.import * 100 / max(one.import, 1)))
        }
    }
    Benchmark("Sync idle pass scaling 20k logs vs 1k", configuration: configuration) { benchmark in
        for _ in benchmark.scaledIterations {
            let one = importAndIdle(scratch, from: small, expecting: 1_000)
            let twenty = importAndIdle(scratch, from: large, expecting: 20_000)
            benchmark.measurement(scalingRatio, Int(twenty.idle * 100 / max(one.idle, 1)))
        }
    }
    Benchmark(
        "Sync idle pass at 20k logs",
        configuration: Benchmark.Configuration(metrics: [idleMetric], maxDuration: .seconds(120), maxIterations: 3)
    ) {
        benchmark in
        for _ in benchmark.scaledIterations {
            benchmark.measurement(idleMetric, Int(importAndIdle(scratch, from: large, expecting: 20_000).idle / 1_000))
        }
    }
}
