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

    @Test("Gathers matching files, then reports additions, changes and removals; other names stay out")
    func liveResults() async throws {
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
        // Each step waits for the change it expects, then makes the next one: the test is
        // driven by the query's own events, and a watchdog bounds the whole.
        let script: [(expect: String, then: @Sendable () throws -> Void)] = [
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
        ]
        let query = ItemQuery(scope: directory.url, matching: "*.log", watcher: watcher)
        let consumer = Task { () throws -> [String] in
            var seen: [String] = []
            var step = 0
            for try await change in query {
                seen.append(line(change))
                if step < script.count, seen.last == script[step].expect {
                    try script[step].then()
                    step += 1
                    if step == script.count { break }
                }
            }
            return seen
        }
        let watchdog = Task {
            try await Task.sleep(for: .seconds(30))
            consumer.cancel()
        }
        let seen = try await consumer.value
        watchdog.cancel()
        for step in script { #expect(seen.contains(step.expect), "never saw: \(step.expect) in \(seen)") }
        #expect(!seen.contains { $0.contains(".txt") || $0.contains(".tmp") || $0.contains(".done") })
        #expect(seen.filter { $0 == "added device-a/002.log" }.count == 1)
    }
}
