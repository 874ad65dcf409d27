import Benchmark
import ConcordSystem
import FileCoordination
import FileWatching
import Foundation

// Change-notification latency: from a pwrite to the moment the presenter's
// presentedItemDidChange runs, next to a raw inotify read of the same kind of event, in the same
// run. The write comes from another thread without coordination, which the kernel reports
// exactly as a write from another process.
#if canImport(Glibc)
import Glibc
#endif

final class Gate: @unchecked Sendable {
    private let condition = ConditionLock()
    private var count = 0
    func signal() {
        condition.withLock {
            count += 1
            condition.broadcast()
        }
    }
    func wait() {
        condition.withLock {
            while count == 0 { condition.wait(until: nil) }
            count -= 1
        }
    }
}

final class SignallingPresenter: FilePresenter, @unchecked Sendable {
    let url: URL
    let gate = Gate()
    init(_ url: URL) { self.url = url }
    var presentedItemURL: URL? { url }
    func presentedItemDidChange() { gate.signal() }
}

struct Scene: @unchecked Sendable {
    let directory: URL
    let file: URL
    let fd: Int32
    init(_ name: String) {
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "concord-watch-bench-\(getpid())-\(name)"
        )
        try! FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        file = directory.appendingPathComponent("item.txt")
        FileManager.default.createFile(atPath: file.path, contents: Data("0".utf8))
        fd = open(file.path, O_WRONLY | O_CLOEXEC)
    }
    func poke() {
        var byte: UInt8 = 0x31
        _ = pwrite(fd, &byte, 1, 0)
    }
}

/// Raw: an inotify descriptor on the directory and a thread blocked reading it, which wakes the
/// waiting thread for each event: the least any watcher that tells another thread can do.
final class RawInotify: @unchecked Sendable {
    let fd: Int32
    let gate = Gate()
    init(_ scene: Scene) {
        fd = inotify_init1(Int32(IN_CLOEXEC))
        _ = inotify_add_watch(fd, scene.directory.path, UInt32(IN_MODIFY))
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65536)
            while read(fd, &buffer, buffer.count) > 0 { gate.signal() }
        }
    }
    func waitForEvent() { gate.wait() }
}

let benchmarks: @Sendable () -> Void = {
    let metrics: [BenchmarkMetric] = [.wallClock]
    let configuration = Benchmark.Configuration(metrics: metrics, maxDuration: .seconds(3), maxIterations: 5_000)

    let rawScene = Scene("raw")
    let raw = RawInotify(rawScene)
    Benchmark("change latency: raw inotify read", configuration: configuration) { benchmark in
        for _ in benchmark.scaledIterations {
            rawScene.poke()
            raw.waitForEvent()
        }
    }

    FileCoordinator.presenterSettleWindow = .zero
    let presenterScene = Scene("presenter")
    let presenter = SignallingPresenter(presenterScene.file)
    FileCoordinator.addFilePresenter(presenter)
    Benchmark("change latency: presenter, coalescing off", configuration: configuration) { benchmark in
        for _ in benchmark.scaledIterations {
            presenterScene.poke()
            presenter.gate.wait()
        }
        withExtendedLifetime(presenter) {}
    }

    let settledScene = Scene("settled")
    let settledGate = Gate()
    let watcher = try! InotifyWatcher()  // the default settle window
    let watch = try! watcher.watch(settledScene.file) { events in
        if events.contains(where: { if case .changed = $0 { return true } else { return false } }) {
            settledGate.signal()
        }
    }
    Benchmark(
        "change latency: watcher, default settle window",
        configuration: .init(metrics: metrics, maxDuration: .seconds(3), maxIterations: 200)
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            settledScene.poke()
            settledGate.wait()
        }
        withExtendedLifetime(watch) {}
    }

    let ratio = BenchmarkMetric.custom("ratio to raw (%)", polarity: .prefersSmaller, useScalingFactor: false)
    Benchmark(
        "change latency ratio: presenter (coalescing off) / raw inotify",
        configuration: .init(metrics: [ratio], maxDuration: .seconds(3), maxIterations: 500)
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            var rawTime: UInt64 = 0
            var presenterTime: UInt64 = 0
            for _ in 0..<10 {
                let start = DispatchTime.now().uptimeNanoseconds
                rawScene.poke()
                raw.waitForEvent()
                let middle = DispatchTime.now().uptimeNanoseconds
                presenterScene.poke()
                presenter.gate.wait()
                presenterTime += DispatchTime.now().uptimeNanoseconds - middle
                rawTime += middle - start
            }
            benchmark.measurement(ratio, Int(presenterTime * 100 / max(rawTime, 1)))
        }
    }
}
