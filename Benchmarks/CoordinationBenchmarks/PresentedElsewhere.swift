import Benchmark
import FileCoordination
import Foundation

// Coordinations while other processes present items: the cost of asking presenters in other
// processes first (one round trip per involved process), and what registered presenters on
// unrelated items cost a coordination that involves none of them (a `stat` of the presenter
// directory and a few hash look-ups).
#if canImport(Glibc)
import Glibc
#endif

/// A presenter that answers every message at once.
final class QuietPresenter: FilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    init(_ url: URL) { presentedItemURL = url }
}

/// Registers a presenter for every path listed in the file at `list`, says so on standard output,
/// and stays until killed.
func presentForever(_ list: String) -> Never {
    let paths = (try? String(contentsOfFile: list, encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
    let presenters = paths.map { QuietPresenter(URL(fileURLWithPath: $0)) }
    for presenter in presenters { FileCoordinator.addFilePresenter(presenter) }
    FileHandle.standardOutput.write(Data("presenting\n".utf8))
    // Until the benchmark that started it is gone, however it ended.
    let parent = getppid()
    while getppid() == parent { usleep(100_000) }
    withExtendedLifetime(presenters) {}
    exit(0)
}

/// Copies of this executable that present items, for as long as the value lives.
final class PresentingProcesses: @unchecked Sendable {
    static let environmentVariable = "CONCORD_BENCH_PRESENT"
    private var processes: [Process] = []

    /// Starts `count` processes, each presenting `paths`, and waits until all of them have registered.
    init(count: Int, presenting paths: [String]) {
        let list = NSTemporaryDirectory() + "concord-bench-present-\(getpid())-\(UUID().uuidString)"
        try! Data(paths.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: list))
        defer { unlink(list) }
        var environment = ProcessInfo.processInfo.environment
        environment[Self.environmentVariable] = list
        for _ in 0..<count {
            let process = Process()
            let output = Pipe()
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            process.environment = environment
            process.standardOutput = output
            process.standardInput = FileHandle.nullDevice
            try! process.run()
            processes.append(process)
            // "presenting" arrives once its presenters are registered (the harness may print other
            // lines first; the pipe closes if it died).
            var text = ""
            while !text.contains("presenting\n") {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
        }
    }

    deinit {
        for process in processes where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// One coordinated write of 4 KiB in place (no accessor-side fsync: the messaging is what is measured).
@inline(__always)
func coordinatedWrite(_ coordinator: FileCoordinator, _ url: URL, _ payload: Data) {
    try! coordinator.coordinate(writingItemAt: url) { url in try! payload.write(to: url) }
}

/// The presenting processes of the benchmark running now: started once (the harness runs a
/// benchmark's closure once per sample), replaced when another benchmark needs others.
enum CurrentPresenters {
    nonisolated(unsafe) private static var current: (key: String, processes: PresentingProcesses?)?
    private static let lock = NSLock()

    static func ensure(_ key: String, _ start: () -> PresentingProcesses?) {
        lock.withLock {
            if current?.key == key { return }
            current = nil
            current = (key, start())
            // Past the presenter directory's change (a coordination reads it again while it might
            // still change within one timestamp tick).
            usleep(200_000)
        }
    }
}

/// Registers a ratio benchmark that times `measured` against `baseline` back to back, in batches
/// of `batch`, with the presenting processes `setUp` starts (once) running.
func ratio(
    _ name: String,
    batch: Int,
    iterations: Int,
    setUp: @escaping @Sendable () -> PresentingProcesses?,
    baseline: @escaping @Sendable () -> Void,
    measured: @escaping @Sendable () -> Void
) {
    Benchmark(name, configuration: .init(metrics: [ratioMetric], maxDuration: .seconds(10), maxIterations: iterations))
    { benchmark in
        CurrentPresenters.ensure(name, setUp)
        baseline()
        measured()
        for iteration in benchmark.scaledIterations {
            var baselineTime: UInt64 = 0
            var measuredTime: UInt64 = 0
            if iteration % 2 == 0 {
                baselineTime = time(batch) { baseline() }
                measuredTime = time(batch) { measured() }
            } else {
                measuredTime = time(batch) { measured() }
                baselineTime = time(batch) { baseline() }
            }
            benchmark.measurement(ratioMetric, Int(measuredTime * 100 / max(baselineTime, 1)))
        }
    }
}

func presentedElsewhere() {
    // The lock sequence again, while another process presents 1,000 items that no coordination
    // here touches: compare with "lock sequence (write, empty accessor) ratio, depth 4".
    let fixture = Fixture(depth: 4)
    let coordinator = FileCoordinator()
    let unrelated = fixture.file.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(
        "unrelated"
    )
    try! FileManager.default.createDirectory(at: unrelated, withIntermediateDirectories: true)
    let unrelatedPaths = (0..<1_000).map { unrelated.appendingPathComponent("item-\($0)").path }
    ratio(
        "lock sequence (write, empty accessor) ratio, depth 4, 1000 presenters in another process",
        batch: 50,
        iterations: 1_000,
        setUp: { PresentingProcesses(count: 1, presenting: unrelatedPaths) },
        baseline: { rawLockSequence(fixture.lockFiles) },
        measured: { coordinatedLock(coordinator, fixture.file) }
    )

    // A coordinated write of an item presented in 0, 1 and 10 other processes, each against the
    // same write of an item nobody presents.
    let folder = fixture.file.deletingLastPathComponent()
    let presented = folder.appendingPathComponent("presented.bin")
    let alone = folder.appendingPathComponent("alone.bin")
    try! fixture.payload.write(to: presented)
    try! fixture.payload.write(to: alone)
    for count in [0, 1, 10] {
        ratio(
            "write of an item presented in \(count) other processes, ratio to none",
            batch: 20,
            iterations: 200,
            setUp: { count == 0 ? nil : PresentingProcesses(count: count, presenting: [presented.path]) },
            baseline: { coordinatedWrite(coordinator, alone, fixture.payload) },
            measured: { coordinatedWrite(coordinator, presented, fixture.payload) }
        )
    }
}
