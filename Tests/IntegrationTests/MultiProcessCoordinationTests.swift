import ConcordSystem
import ConcordTestSupport
import FileCoordination
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Coordination across real processes", .serialized)
struct MultiProcessCoordinationTests {
    let directory = TemporaryDirectory("multiprocess")

    @Test("Four processes doing 250 coordinated read-modify-write increments each end with the exact total")
    func countersAcrossProcesses() throws {
        let counter = directory("counter.txt")
        let processes = 4
        let increments = 250
        let children = try (0..<processes).map { _ in try ChildProcess(["increment", counter.path, String(increments)])
        }
        for child in children { #expect(child.waitForLine("started")) }
        for child in children {
            #expect(child.waitForLine("done", timeout: .seconds(240)))
            #expect(child.waitForExit() == 0)
        }
        let total = Int(String(decoding: try Data(contentsOf: counter), as: UTF8.self))
        #expect(total == processes * increments)
    }

    @Test("A lock holder killed with SIGKILL releases its lock", arguments: ["write", "read"])
    func killedHolderReleases(mode: String) throws {
        let file = directory("held.txt")
        let holder = try ChildProcess(["hold", file.path, mode])
        #expect(holder.waitForLine("held"))
        let coordinator = FileCoordinator()
        coordinator.timeout = .milliseconds(200)
        // The other process really holds it...
        #expect(coordinationCode { try coordinator.coordinate(writingItemAt: file) { _ in } } == .timedOut)
        holder.kill(SIGKILL)
        #expect(holder.waitForExit() != nil)
        // ...and the kernel let go of it when the process died.
        coordinator.timeout = .seconds(10)
        #expect(throws: Never.self) { try coordinator.coordinate(writingItemAt: file) { _ in } }
    }

    @Test("A directory deletion waits for another process's access inside it")
    func hierarchyAcrossProcesses() throws {
        let folder = directory.makeDirectory("folder", "inner")
        let file = folder.appendingPathComponent("file.txt")
        let holder = try ChildProcess(["hold", file.path, "read"])
        #expect(holder.waitForLine("held"))
        let coordinator = FileCoordinator()
        coordinator.timeout = .milliseconds(200)
        #expect(coordinationCode { try coordinator.removeItem(at: directory("folder")) } == .timedOut)
        #expect(FileManager.default.fileExists(atPath: folder.path))
        holder.kill(SIGKILL)
        #expect(holder.waitForExit() != nil)
        coordinator.timeout = .seconds(10)
        #expect(throws: Never.self) { try coordinator.removeItem(at: directory("folder")) }
        #expect(!FileManager.default.fileExists(atPath: directory("folder").path))
    }

    @Test("Writers are not starved by a stream of overlapping readers in other processes")
    func writersAreNotStarved() throws {
        let file = directory("popular.txt")
        try Data("0".utf8).write(to: file)
        // Two processes, four threads each, every reader holding its lock for 2 ms: without
        // fairness the file is never free of readers.
        let readers = try (0..<2).map { _ in try ChildProcess(["readers", file.path, "4", "2000"]) }
        defer { for reader in readers { reader.kill(SIGKILL) } }
        for reader in readers { #expect(reader.waitForLine("started")) }
        // With the gate a write waits for the readers already in (a few ms); plain flock lets new
        // readers jump the queue, and writes waited up to 1.8 s here (measured with the gate off).
        let coordinator = FileCoordinator()
        coordinator.timeout = .seconds(1)
        var waits: [Double] = []
        for round in 0..<20 {
            var failure: (any Error)?
            let elapsed = milliseconds {
                do {
                    try coordinator.replaceContentsOfItem(at: file, with: Data(String(round).utf8))
                } catch {
                    failure = error
                }
            }
            #expect(failure == nil, "write \(round) starved: \(failure.map { "\($0)" } ?? "")")
            waits.append(elapsed)
        }
        #expect(String(decoding: try Data(contentsOf: file), as: UTF8.self) == "19")
        print("writer waits behind 8 readers: median \(waits.sorted()[waits.count / 2]) ms, max \(waits.max() ?? 0) ms")
    }

    @Test("A nested write inside a read upgrades without deadlocking against a writer queued in another process")
    func upgradeAgainstQueuedWriter() throws {
        let file = directory("upgrade.txt")
        try Data("start".utf8).write(to: file)
        let coordinator = FileCoordinator()
        coordinator.timeout = .seconds(10)
        var writer: ChildProcess?
        #expect(throws: Never.self) {
            try coordinator.coordinate(readingItemAt: file) { url in
                // Another process asks to write while we read: it queues behind our shared lock.
                writer = try ChildProcess(["write", file.path, "theirs"])
                #expect(writer?.waitForLine("asking") == true)
                // Now we write the same item from inside our read.
                try coordinator.coordinate(writingItemAt: url) { url in try Data("ours".utf8).write(to: url) }
            }
        }
        #expect(writer?.waitForLine("written") == true)
        #expect(writer?.waitForExit() == 0)
        // A flock conversion lets a queued writer in first, so either may have written last.
        #expect(["ours", "theirs"].contains(String(decoding: try Data(contentsOf: file), as: UTF8.self)))
    }

    @Test("A writer killed at random moments never leaves a torn file")
    func noTornFiles() throws {
        let file = directory("atomic.bin")
        let size = 256 * 1024
        try Data(repeating: UInt8(ascii: "a"), count: size).write(to: file)
        for _ in 0..<10 {
            let writer = try ChildProcess(["write-loop", file.path, String(size)])
            #expect(writer.waitForLine("writing"))
            usleep(UInt32.random(in: 0...20_000))  // a random moment to kill it, not a wait for an event
            writer.kill(SIGKILL)
            #expect(writer.waitForExit() != nil)
            let content = try Data(contentsOf: file)
            #expect(content.count == size)
            #expect(
                content.allSatisfy { $0 == content.first }
                    && (content.first == UInt8(ascii: "a") || content.first == UInt8(ascii: "b"))
            )
        }
        // Temporary files of killed writers may remain, but never under the file's own name.
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.url.path).filter {
            $0 != "atomic.bin"
        }
        #expect(leftovers.allSatisfy { $0.hasSuffix(".concord-tmp") })
    }
}
