import ConcordSystem
import ConcordTestSupport
import FileCoordination
import Foundation
import Synchronization
import Testing

@Suite("Coordination exclusion across threads")
struct CoordinationExclusionTests {
    let directory = TemporaryDirectory("exclusion")

    @Test("Readers share an item")
    func readersShare() {
        let file = directory("shared.txt")
        let first = HeldAccess(reading: file)
        defer { first.end() }
        let coordinator = FileCoordinator()
        coordinator.timeout = .seconds(5)
        // A second reader gets in while the first is still inside its accessor.
        var ranInside = false
        #expect(throws: Never.self) {
            try coordinator.coordinate(readingItemAt: file) { _ in ranInside = true }
        }
        #expect(ranInside)
        #expect(first.error == nil)
    }

    @Test("A writer excludes readers and writers until it is done", arguments: [false, true])
    func writerExcludes(otherIsWriter: Bool) {
        let file = directory("exclusive.txt")
        let writer = HeldAccess(writing: file)
        let coordinator = FileCoordinator()
        coordinator.timeout = .milliseconds(150)
        var ran = false
        let code = coordinationCode {
            if otherIsWriter {
                try coordinator.coordinate(writingItemAt: file) { _ in ran = true }
            } else {
                try coordinator.coordinate(readingItemAt: file) { _ in ran = true }
            }
        }
        #expect(code == .timedOut)
        #expect(!ran, "the accessor must not run when the coordination fails")
        writer.end()
        coordinator.timeout = .seconds(5)
        #expect(throws: Never.self) { try coordinator.coordinate(readingItemAt: file) { _ in ran = true } }
        #expect(ran)
    }

    @Test("A reader excludes writers")
    func readerExcludesWriter() {
        let file = directory("read-held.txt")
        let reader = HeldAccess(reading: file)
        defer { reader.end() }
        let coordinator = FileCoordinator()
        coordinator.timeout = .milliseconds(150)
        #expect(coordinationCode { try coordinator.coordinate(writingItemAt: file) { _ in } } == .timedOut)
    }

    @Test("Threads doing unprotected read-modify-write inside coordinated writes lose no update")
    func countersAcrossThreads() throws {
        let file = directory("counter.txt")
        try Data("0".utf8).write(to: file)
        let threads = 8
        let increments = 200
        let done = Signal()
        for _ in 0..<threads {
            Thread.detachNewThread {
                let coordinator = FileCoordinator()
                for _ in 0..<increments {
                    try? coordinator.coordinate(writingItemAt: file) { url in
                        // Deliberately not atomic: only the coordination keeps this correct.
                        let value = Int(String(decoding: try Data(contentsOf: url), as: UTF8.self)) ?? -1_000_000
                        try Data(String(value + 1).utf8).write(to: url)
                    }
                }
                done.fire()
            }
        }
        #expect(done.wait(times: threads, timeout: .seconds(120)))
        let total = Int(String(decoding: try Data(contentsOf: file), as: UTF8.self))
        #expect(total == threads * increments)
    }

    @Test("A timeout fails with a typed error that names the file")
    func timeoutNamesTheFile() {
        let file = directory("slow.txt")
        let writer = HeldAccess(writing: file)
        defer { writer.end() }
        let coordinator = FileCoordinator()
        coordinator.timeout = .milliseconds(100)
        var caught: FileCoordinationError?
        let elapsed = milliseconds {
            do {
                try coordinator.coordinate(readingItemAt: file) { _ in }
            } catch let error as FileCoordinationError {
                caught = error
            } catch {}
        }
        #expect(caught?.code == .timedOut)
        #expect(caught?.url?.path == file.path)
        #expect(caught.map { "\($0)" }?.contains("slow.txt") == true)
        #expect(elapsed >= 90, "gave up after \(elapsed) ms, before its timeout")
    }

    @Test("cancel() ends a waiting coordination; its accessor never runs")
    func cancelEndsTheWait() {
        let file = directory("cancelled.txt")
        let writer = HeldAccess(writing: file)
        defer { writer.end() }
        let coordinator = FileCoordinator()
        let finished = Signal()
        let outcome = Mutex<FileCoordinationError.Code?>(nil)
        let ran = Atomic<Bool>(false)
        Thread.detachNewThread {
            let code = coordinationCode {
                try coordinator.coordinate(writingItemAt: file) { _ in ran.store(true, ordering: .relaxed) }
            }
            outcome.withLock { $0 = code }
            finished.fire()
        }
        // cancel() affects the coordinations active when it is called; call it until the
        // waiting one has ended (bounded).
        var attempts = 0
        while !finished.wait(timeout: .milliseconds(20)) && attempts < 500 {
            coordinator.cancel()
            attempts += 1
        }
        #expect(finished.value == 1)
        #expect(outcome.withLock { $0 } == .cancelled)
        let accessorRan = ran.load(ordering: .relaxed)
        #expect(!accessorRan)
    }

    @Test("The async form waits off the cooperative pool, and task cancellation ends the wait")
    func asyncForm() async throws {
        let file = directory("async.txt")
        let coordinator = FileCoordinator()
        let written = try await coordinator.coordinate(with: [.writingIntent(with: file)]) { urls in
            try Data("hello".utf8).write(to: urls[0])
            return urls[0].lastPathComponent
        }
        #expect(written == "async.txt")

        let writer = HeldAccess(writing: file)
        defer { writer.end() }
        let task = Task {
            try await coordinator.coordinate(with: [.readingIntent(with: file)]) { _ in "read" }
        }
        // Many concurrent waits must not starve the cooperative pool: this await still runs.
        let other = try await FileCoordinator().coordinate(with: [.readingIntent(with: directory("other.txt"))]) { _ in
            1
        }
        #expect(other == 1)
        task.cancel()
        await #expect(throws: FileCoordinationError.self) { try await task.value }
    }

    @Test("A coordinator never blocks itself in a nested coordination")
    func nestedSameCoordinator() {
        let file = directory("nested.txt")
        let coordinator = FileCoordinator()
        coordinator.timeout = .seconds(2)
        var inner = false
        #expect(throws: Never.self) {
            try coordinator.coordinate(writingItemAt: file) { url in
                try coordinator.coordinate(readingItemAt: url) { _ in
                    try coordinator.coordinate(writingItemAt: url) { _ in inner = true }
                }
            }
        }
        #expect(inner)
        // Another coordinator is still excluded while the first one holds the item.
        let other = FileCoordinator()
        other.timeout = .milliseconds(100)
        #expect(throws: Never.self) {
            try coordinator.coordinate(writingItemAt: file) { _ in
                #expect(coordinationCode { try other.coordinate(readingItemAt: file) { _ in } } == .timedOut)
            }
        }
    }

    @Test("The same item named twice, read and written, is taken once without deadlock")
    func sameItemTwice() {
        let file = directory("twice.txt")
        let coordinator = FileCoordinator()
        coordinator.timeout = .seconds(2)
        var urls: [URL] = []
        #expect(throws: Never.self) {
            try coordinator.coordinate(readingItemAt: file, writingItemAt: file) { urls = [$0, $1] }
        }
        #expect(urls == [file, file])
    }

    @Test("Lock files never appear in the coordinated tree")
    func noLockFilesInTheTree() throws {
        let sub = directory.makeDirectory("tree", "sub")
        let coordinator = FileCoordinator()
        try coordinator.replaceContentsOfItem(at: sub.appendingPathComponent("a.txt"), with: Data("a".utf8))
        try coordinator.coordinate(writingItemAt: sub, options: .forReplacing) { _ in }
        try coordinator.coordinate(readingItemAt: directory.url) { _ in }
        let everything = FileManager.default.enumerator(atPath: directory.url.path)?.allObjects as? [String]
        #expect(Set(everything ?? []) == ["tree", "tree/sub", "tree/sub/a.txt"])
    }

    @Test("A URL that is not a file URL is refused with a typed error")
    func invalidURL() {
        let coordinator = FileCoordinator()
        #expect(
            coordinationCode {
                try coordinator.coordinate(readingItemAt: URL(string: "https://example.com/x")!) { _ in }
            } == .invalidRequest
        )
    }
}
