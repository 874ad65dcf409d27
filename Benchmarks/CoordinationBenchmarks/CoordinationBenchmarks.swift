import Benchmark
import FileCoordination
import Foundation

// Coordination benchmarks. Every wrapped operation is paired with the raw operation it wraps,
// measured in the same run, and a "ratio" benchmark times both back to back in each iteration
// and reports wrapped/raw in percent (100 = no overhead).
#if canImport(Glibc)
import Glibc
#endif

/// A tree `depth` directories deep with a 4 KiB file at the bottom, and lock files for the raw
/// lock sequence (one per ancestor, one for the file) outside it.
struct Fixture: @unchecked Sendable {
    let file: URL
    let lockFiles: [String]
    let payload = Data(repeating: 0x5a, count: 4096)

    init(depth: Int) {
        let base = URL(fileURLWithPath: NSTemporaryDirectory()).resolvingSymlinksInPath()
            .appendingPathComponent("concord-bench-\(getpid())-\(depth)")
        var folder = base
        for level in 0..<depth { folder.appendPathComponent("d\(level)") }
        try! FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        file = folder.appendingPathComponent("item.bin")
        try! payload.write(to: file)
        let locks = base.appendingPathComponent("raw-locks")
        try! FileManager.default.createDirectory(at: locks, withIntermediateDirectories: true)
        // As many locks as the coordinator takes: one per proper ancestor (not "/"), one for the file.
        let ancestors = file.path.split(separator: "/").count - 1
        lockFiles = (0...ancestors).map { locks.appendingPathComponent("lock-\($0)").path }
    }
}

// MARK: - Raw operations, written by hand with the C library

@inline(__always)
func rawRead(_ path: String) {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    var buffer = [UInt8](repeating: 0, count: 4096)
    _ = read(fd, &buffer, 4096)
    close(fd)
    blackHole(buffer)
}

/// open + flock + unlock + close on each lock file: shared on the ancestors, exclusive on the item.
@inline(__always)
func rawLockSequence(_ lockFiles: [String]) {
    var descriptors: [Int32] = []
    descriptors.reserveCapacity(lockFiles.count)
    for (index, path) in lockFiles.enumerated() {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        flock(fd, index == lockFiles.count - 1 ? LOCK_EX : LOCK_SH)
        descriptors.append(fd)
    }
    for fd in descriptors.reversed() {
        flock(fd, LOCK_UN)
        close(fd)
    }
}

/// Temporary file in the same directory, write, fsync, rename, fsync of the directory.
@inline(__always)
func rawAtomicWrite(_ data: Data, to path: String) {
    let directory = (path as NSString).deletingLastPathComponent
    let temporary = directory + "/.raw-tmp"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    data.withUnsafeBytes { _ = write(fd, $0.baseAddress!, $0.count) }
    fsync(fd)
    close(fd)
    rename(temporary, path)
    let dfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    fsync(dfd)
    close(dfd)
}

// MARK: - Wrapped operations

@inline(__always)
func coordinatedRead(_ coordinator: FileCoordinator, _ url: URL) {
    try! coordinator.coordinate(readingItemAt: url, options: .withoutChanges) { url in rawRead(url.path) }
}

@inline(__always)
func coordinatedLock(_ coordinator: FileCoordinator, _ url: URL) {
    try! coordinator.coordinate(writingItemAt: url) { _ in }
}

@inline(__always)
func coordinatedAtomicWrite(_ coordinator: FileCoordinator, _ fixture: Fixture) {
    try! coordinator.replaceContentsOfItem(at: fixture.file, with: fixture.payload)
}

/// Nanoseconds to run `body` `count` times.
@inline(__always)
func time(_ count: Int, _ body: () -> Void) -> UInt64 {
    let start = DispatchTime.now().uptimeNanoseconds
    for _ in 0..<count { body() }
    return DispatchTime.now().uptimeNanoseconds - start
}

let ratioMetric = BenchmarkMetric.custom("ratio to raw (%)", polarity: .prefersSmaller, useScalingFactor: false)

/// Registers raw, wrapped and ratio benchmarks for one pair.
func pair(
    _ name: String,
    depth: Int,
    batch: Int,
    fast: Bool,
    raw: @escaping @Sendable (Fixture) -> Void,
    wrapped: @escaping @Sendable (FileCoordinator, Fixture) -> Void
) {
    let fixture = Fixture(depth: depth)
    let coordinator = FileCoordinator()
    let timing = Benchmark.Configuration(
        metrics: [.wallClock, .throughput],
        maxDuration: .seconds(fast ? 1 : 2),
        maxIterations: fast ? 100_000 : 500
    )
    Benchmark("\(name) raw, depth \(depth)", configuration: timing) { benchmark in
        for _ in benchmark.scaledIterations { raw(fixture) }
    }
    Benchmark("\(name) coordinated, depth \(depth)", configuration: timing) { benchmark in
        for _ in benchmark.scaledIterations { wrapped(coordinator, fixture) }
    }
    Benchmark(
        "\(name) ratio, depth \(depth)",
        configuration: .init(
            metrics: [ratioMetric],
            maxDuration: .seconds(fast ? 2 : 4),
            maxIterations: fast ? 1_000 : 60
        )
    ) { benchmark in
        for iteration in benchmark.scaledIterations {
            // Alternate which goes first so neither always runs on a warmer cache.
            var rawTime: UInt64 = 0
            var wrappedTime: UInt64 = 0
            if iteration % 2 == 0 {
                rawTime = time(batch) { raw(fixture) }
                wrappedTime = time(batch) { wrapped(coordinator, fixture) }
            } else {
                wrappedTime = time(batch) { wrapped(coordinator, fixture) }
                rawTime = time(batch) { raw(fixture) }
            }
            benchmark.measurement(ratioMetric, Int(wrappedTime * 100 / max(rawTime, 1)))
        }
    }
}

let benchmarks: @Sendable () -> Void = {
    // This executable, started again by `PresentingProcesses`, presents items until killed.
    if let list = ProcessInfo.processInfo.environment[PresentingProcesses.environmentVariable] { presentForever(list) }

    for depth in [1, 4, 9] {
        pair(
            "lock sequence (write, empty accessor)",
            depth: depth,
            batch: 50,
            fast: true,
            raw: { rawLockSequence($0.lockFiles) },
            wrapped: { coordinatedLock($0, $1.file) }
        )
        pair(
            "read 4 KiB",
            depth: depth,
            batch: 50,
            fast: true,
            raw: { rawRead($0.file.path) },
            wrapped: { coordinatedRead($0, $1.file) }
        )
        pair(
            "atomic write 4 KiB",
            depth: depth,
            batch: 3,
            fast: false,
            raw: { rawAtomicWrite($0.payload, to: $0.file.path) },
            wrapped: { coordinatedAtomicWrite($0, $1) }
        )
    }
    presentedElsewhere()
}
