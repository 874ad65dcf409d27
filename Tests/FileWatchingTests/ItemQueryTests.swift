import ConcordSystem
import ConcordTestSupport
import FileWatching
import Foundation
import Synchronization
import Testing

@Suite("Item queries")
struct ItemQueryTests {
    let directory = TemporaryDirectory("query")

    private func line(_ change: ItemQuery.Change) -> String {
        func name(_ url: URL) -> String {
            String(FileSystemEvent.appeared(url).relative(to: directory.url).dropFirst(9))
        }
        switch change {
        case .gathered(let urls): return "gathered " + urls.map(name).joined(separator: ",")
        case .added(let url): return "added " + name(url)
        case .changed(let url): return "changed " + name(url)
        case .removed(let url): return "removed " + name(url)
        }
    }

    /// What a query delivered, and the script it drives: each step waits for the change it
    /// expects, then makes the next one.
    private final class Run: @unchecked Sendable {
        let lock = NSLock()
        var seen: [String] = []
        var step = 0
        let script: [(expect: String, then: @Sendable () throws -> Void)]
        let done = DispatchSemaphore(value: 0)
        var failure: (any Error)?

        init(_ script: [(expect: String, then: @Sendable () throws -> Void)]) { self.script = script }

        func heard(_ line: String) {
            lock.lock()
            defer { lock.unlock() }
            seen.append(line)
            guard step < script.count, line == script[step].expect else { return }
            do { try script[step].then() } catch { failure = error }
            step += 1
            if step == script.count { done.signal() }
        }

        var lines: [String] {
            lock.lock()
            defer { lock.unlock() }
            return seen
        }
    }

    @Test("Gathers matching files, then reports additions, changes and removals; other names stay out")
    func liveResults() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let watcher = try InotifyWatcher(settleWindow: .milliseconds(5))
        defer { watcher.stop() }
        directory.makeDirectory("device-a")
        try touch(directory("device-a", "001.log"))
        try touch(directory("device-a", "notes.txt"))
        try touch(directory("top.log"))
        let outside = TemporaryDirectory("query-outside")
        let base = directory
        let run = Run([
            (
                "gathered device-a/001.log,top.log",
                {
                    try touch(base("device-a", "002.log"))
                    try touch(base("device-a", "ignored.tmp"))
                }
            ),
            ("added device-a/002.log", { try AtomicFile.write(Array("v2".utf8), to: base("top.log").path) }),
            ("changed top.log", { try FileManager.default.removeItem(at: base("device-a", "001.log")) }),
            (
                "removed device-a/001.log",
                {
                    try FileManager.default.moveItem(at: base("device-a", "002.log"), to: base("device-a", "002.done"))
                }
            ),
            (
                "removed device-a/002.log",
                {
                    let incoming = outside.makeDirectory("device-b")
                    try touch(incoming.appendingPathComponent("009.log"))
                    try FileManager.default.moveItem(at: incoming, to: base("device-b"))
                }
            ),
            ("added device-b/009.log", {}),
        ])
        // The callback form delivers on the watcher's queue, not on Swift concurrency's threads:
        // a machine busy with other tests delays the script, and the bound below is the only
        // clock. (The async form is `iterationYieldsChanges()`'s.)
        let observation = try ItemQuery(scope: directory.url, matching: "*.log", watcher: watcher).observe { change in
            run.heard(self.line(change))
        }
        defer { observation.cancel() }
        let finished = run.done.wait(timeout: .now() + 60) == .success
        let seen = run.lines
        #expect(finished, "the script did not finish within 60 s: \(seen)")
        #expect(run.failure == nil, "a step failed: \(String(describing: run.failure))")
        for step in run.script { #expect(seen.contains(step.expect), "never saw: \(step.expect) in \(seen)") }
        #expect(!seen.contains { $0.contains(".txt") || $0.contains(".tmp") || $0.contains(".done") })
        #expect(seen.filter { $0 == "added device-a/002.log" }.count == 1)
    }

    @Test(
        "Iterating a query yields the gathered results first, then its changes",
        .timeLimit(.minutes(10))
    )
    func iterationYieldsChanges() async throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let watcher = try InotifyWatcher(settleWindow: .milliseconds(5))
        defer { watcher.stop() }
        try touch(directory("a.log"))
        let base = directory
        var seen: [String] = []
        for try await change in ItemQuery(scope: directory.url, matching: "*.log", watcher: watcher) {
            seen.append(line(change))
            if seen.count == 1 { try touch(base("b.log")) }
            // (The bound is the test's time limit, not a watchdog racing the loop: a busy
            // machine only delays the changes.)
            if seen.count == 2 { break }
        }
        #expect(seen == ["gathered a.log", "added b.log"])
    }
}
