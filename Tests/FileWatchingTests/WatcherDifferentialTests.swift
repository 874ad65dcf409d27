import ConcordSystem
import ConcordTestSupport
import FileWatching
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `inotifywait -m -r` from Debian's inotify-tools, run as an independent witness.
/// Spawned with a clean signal mask, and killed and reaped when the value goes away (see
/// ``Subprocess``): a `SIGTERM` from a test thread's inherited mask would never arrive.
final class InotifyWait: @unchecked Sendable {
    let process: Subprocess
    private var buffer = [UInt8]()

    init?(_ directory: URL) throws {
        guard
            let executable = ["/usr/bin/inotifywait", "/bin/inotifywait"].first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            })
        else {
            return nil
        }
        process = try Subprocess(
            executable,
            ["-m", "-r", "--format", "%w%f|%e", directory.path],
            captureStandardError: true
        )
    }

    /// Waits for the "Watches established." line on standard error.
    func waitUntilReady(timeout: Duration = .seconds(10)) -> Bool {
        readLine(from: process.standardError!, timeout: timeout) { $0.contains("Watches established") } != nil
    }

    /// Reads output lines until one satisfies `stop`; returns every line read.
    func lines(until stop: (String) -> Bool, timeout: Duration = .seconds(20)) -> [String]? {
        var seen: [String] = []
        let found = readLine(from: process.standardOutput, timeout: timeout) { line in
            seen.append(line)
            return stop(line)
        }
        return found == nil ? nil : seen
    }

    private func readLine(from fd: Int32, timeout: Duration, _ accept: (String) -> Bool) -> String? {
        let deadline = Deadline.after(timeout)!
        var pending = [UInt8]()
        while !deadline.hasPassed {
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                if accept(line) { return line }
            }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&descriptor, 1, 200) <= 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = read(fd, &chunk, chunk.count)
            if count <= 0 { return nil }
            pending.append(contentsOf: chunk[..<count])
        }
        return nil
    }
}

@Suite("Watcher against inotifywait")
struct WatcherDifferentialTests {
    let directory = TemporaryDirectory("differential")

    @Test("Every path inotifywait saw change, Concord reported too")
    func sameWorkload() throws {
        try WatchLimitLock.shared {
            guard let witness = try InotifyWait(directory.url) else {
                Issue.record("inotifywait is not installed (Debian's inotify-tools; `make test` installs it)")
                return
            }
            #expect(witness.waitUntilReady())
            let watcher = try InotifyWatcher(settleWindow: .zero)
            defer { watcher.stop() }
            let recorder = EventRecorder()
            let registration = try watcher.watch(directory.url, handler: recorder.handler)
            defer { registration.cancel() }

            // The scripted workload: writes, appends, atomic saves, nested directories made and
            // filled at once, renames of files and directories, deletions.
            var random = SystemRandomNumberGenerator()
            for round in 0..<5 {
                let top = directory.makeDirectory("r\(round)", "nested")
                for index in 0..<10 { try touch(top.appendingPathComponent("f\(index).txt"), "v\(index)") }
                try AtomicFile.write(Array("saved".utf8), to: top.appendingPathComponent("f0.txt").path)
                try FileManager.default.moveItem(
                    at: top.appendingPathComponent("f1.txt"),
                    to: top.appendingPathComponent("renamed.txt")
                )
                try FileManager.default.removeItem(at: top.appendingPathComponent("f2.txt"))
                let handle = try FileHandle(forWritingTo: top.appendingPathComponent("f3.txt"))
                handle.seekToEndOfFile()
                handle.write(Data("more".utf8))
                try handle.close()
                if Bool.random(using: &random) {
                    try FileManager.default.moveItem(at: directory("r\(round)"), to: directory("moved\(round)"))
                    try touch(directory("moved\(round)", "nested", "after-move.txt"))
                }
            }
            try touch(directory("zz-end"))
            try watcher.barrier(for: directory.url)
            guard let witnessed = witness.lines(until: { $0.hasPrefix(directory("zz-end").path + "|") }) else {
                Issue.record("inotifywait did not report the end marker")
                return
            }
            // What inotifywait saw change (its "directory" events have a trailing slash).
            let changing = ["CREATE", "MODIFY", "CLOSE_WRITE", "MOVED_FROM", "MOVED_TO", "DELETE", "ATTRIB"]
            var witnessedPaths = Set<String>()
            for line in witnessed {
                let parts = line.split(separator: "|", maxSplits: 1).map(String.init)
                guard parts.count == 2,
                    parts[1].split(separator: ",").contains(where: { changing.contains(String($0)) })
                else { continue }
                var path = parts[0]
                while path.hasSuffix("/") { path.removeLast() }
                if path.contains(InotifyWatcher.barrierPrefix) || path.hasSuffix(".concord-tmp") { continue }
                witnessedPaths.insert(path)
            }
            var reported = Set<String>()
            for event in recorder.events {
                switch event {
                case .moved(let from, let to):
                    reported.insert(from.standardizedFileURL.path)
                    reported.insert(to.standardizedFileURL.path)
                default:
                    reported.insert(event.url.standardizedFileURL.path)
                }
            }
            // inotifywait names paths as they were when it saw them; a directory renamed later
            // leaves its old names behind. Compare against where each path lives now, too.
            func normalized(_ path: String) -> String {
                var result = path
                for round in 0..<5
                where result.hasPrefix(directory("r\(round)").path + "/")
                    && !FileManager.default.fileExists(atPath: directory("r\(round)").path)
                {
                    result = directory("moved\(round)").path + result.dropFirst(directory("r\(round)").path.count)
                }
                return result
            }
            let missing = witnessedPaths.filter { !reported.contains($0) && !reported.contains(normalized($0)) }
            #expect(missing.isEmpty, "Concord missed: \(missing.sorted().prefix(10))")
            #expect(witnessedPaths.count > 50)
        }
    }
}
