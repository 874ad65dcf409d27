import ConcordSystem
import ConcordTestSupport
import FileWatching
import Foundation
import Synchronization
import Testing

/// Iterates a query on a task of its own and records the changes as lines relative to a base.
final class QueryRecorder: @unchecked Sendable {
    private let condition = ConditionLock()
    private var log: [String] = []
    private var task: Task<Void, Never>?

    init(_ query: ItemQuery, base: URL) {
        task = Task { [self] in
            do {
                for try await change in query {
                    let line: String
                    switch change {
                    case .gathered(let urls): line = "gathered " + urls.map { FileSystemEvent.appeared($0).relative(to: base).dropFirst(9) }.joined(separator: ",")
                    case .added(let url): line = "added " + FileSystemEvent.appeared(url).relative(to: base).dropFirst(9)
                    case .changed(let url): line = "changed " + FileSystemEvent.appeared(url).relative(to: base).dropFirst(9)
                    case .removed(let url): line = "removed " + FileSystemEvent.appeared(url).relative(to: base).dropFirst(9)
                    }
                    condition.withLock {
                        log.append(line)
                        condition.broadcast()
                    }
                }
            } catch {
                condition.withLock { log.append("error \(error)") }
            }
        }
    }

    var lines: [String] { condition.withLock { log } }

    @discardableResult
    func wait(for line: String, timeout: Duration = .seconds(10)) -> Bool {
        let deadline = Deadline.after(timeout)
        return condition.withLock {
            while !log.contains(line) {
                if !condition.wait(until: deadline) && !log.contains(line) { return false }
            }
            return true
        }
    }

    func stop() { task?.cancel() }
}

@Suite("Item queries")
struct ItemQueryTests {
    let directory = TemporaryDirectory("query")

    @Test("Gathers matching files, then reports additions, changes and removals; other names stay out")
    func liveResults() throws {
        try WatchLimitLock.shared {
            let watcher = try InotifyWatcher(settleWindow: .milliseconds(5))
            defer { watcher.stop() }
            directory.makeDirectory("device-a")
            try touch(directory("device-a", "001.log"))
            try touch(directory("device-a", "notes.txt"))
            try touch(directory("top.log"))
            let recorder = QueryRecorder(ItemQuery(scope: directory.url, matching: "*.log", watcher: watcher), base: directory.url)
            defer { recorder.stop() }
            #expect(recorder.wait(for: "gathered device-a/001.log,top.log"))

            try touch(directory("device-a", "002.log"))
            try touch(directory("device-a", "ignored.tmp"))
            #expect(recorder.wait(for: "added device-a/002.log"))
            try AtomicFile.write(Array("v2".utf8), to: directory("top.log").path)
            #expect(recorder.wait(for: "changed top.log"))
            try FileManager.default.removeItem(at: directory("device-a", "001.log"))
            #expect(recorder.wait(for: "removed device-a/001.log"))
            try FileManager.default.moveItem(at: directory("device-a", "002.log"), to: directory("device-a", "002.done"))
            #expect(recorder.wait(for: "removed device-a/002.log"))
            // A directory of logs moved in from elsewhere: each of its files is added.
            let outside = TemporaryDirectory("query-outside")
            let incoming = outside.makeDirectory("device-b")
            try touch(incoming.appendingPathComponent("009.log"))
            try FileManager.default.moveItem(at: incoming, to: directory("device-b"))
            #expect(recorder.wait(for: "added device-b/009.log"))
            try watcher.barrier(for: directory.url)

            let lines = recorder.lines
            #expect(!lines.contains { $0.contains(".txt") || $0.contains(".tmp") || $0.contains(".done") })
            #expect(lines.filter { $0 == "added device-a/002.log" }.count == 1)
        }
    }
}
