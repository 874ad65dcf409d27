import ConcordSystem
import ConcordTestSupport
import Foundation
import Testing

@testable import FileWatching

#if canImport(Glibc)
import Glibc
#endif

func touch(_ url: URL, _ text: String = "x") throws { try Data(text.utf8).write(to: url) }

@Suite("inotify watcher")
struct InotifyWatcherTests {
    let directory = TemporaryDirectory("watcher")

    private func watching<T>(
        _ recursive: Bool = true,
        settle: Duration = .milliseconds(10),
        _ body: (InotifyWatcher, EventRecorder) throws -> T
    ) throws -> T {
        try WatchLimitLock.shared {
            let watcher = try InotifyWatcher(settleWindow: settle)
            defer { watcher.stop() }
            let recorder = EventRecorder()
            let registration = try watcher.watch(directory.url, recursive: recursive, handler: recorder.handler)
            defer { registration.cancel() }
            return try body(watcher, recorder)
        }
    }

    @Test("Moves are paired inside the tree, removals out of it, appearances into it")
    func movePairing() throws {
        let outside = TemporaryDirectory("outside")
        try watching { watcher, recorder in
            let sub = directory.makeDirectory("sub")
            try touch(directory("a.txt"))
            try watcher.barrier(for: directory.url)
            recorder.reset()
            try FileManager.default.moveItem(at: directory("a.txt"), to: sub.appendingPathComponent("b.txt"))
            try FileManager.default.moveItem(at: sub.appendingPathComponent("b.txt"), to: outside("gone.txt"))
            try touch(outside("in.txt"))
            try FileManager.default.moveItem(at: outside("in.txt"), to: directory("arrived.txt"))
            try watcher.barrier(for: directory.url)
            #expect(
                recorder.lines(relativeTo: directory.url) == [
                    "moved a.txt -> sub/b.txt", "removed sub/b.txt", "appeared arrived.txt",
                ]
            )
        }
    }

    @Test("An atomic save is one change of the target")
    func atomicSave() throws {
        try watching { watcher, recorder in
            try touch(directory("doc.txt"), "old")
            try watcher.barrier(for: directory.url)
            recorder.reset()
            try AtomicFile.write(Array("new".utf8), to: directory("doc.txt").path)
            try watcher.barrier(for: directory.url)
            #expect(recorder.lines(relativeTo: directory.url) == ["changed doc.txt"])
        }
    }

    @Test("A write whose close the watcher reads in a later batch is one change, and the next write is another")
    func writeAndCloseInDifferentBatches() throws {
        try watching { watcher, recorder in
            try touch(directory("doc.txt"), "old")
            try watcher.barrier(for: directory.url)
            recorder.reset()
            // A writer descheduled between its write and its close (a busy machine).
            for round in 1...2 {
                let handle = try FileHandle(forWritingTo: directory("doc.txt"))
                try handle.seekToEnd()
                try handle.write(contentsOf: Data(" more \(round)".utf8))
                try watcher.barrier(for: directory.url)
                #expect(recorder.lines(relativeTo: directory.url).count == round, "the write is heard before the close")
                try handle.close()
                try watcher.barrier(for: directory.url)
            }
            #expect(recorder.lines(relativeTo: directory.url) == ["changed doc.txt", "changed doc.txt"])
        }
    }

    @Test("A file written before the watch began and closed after it is no change; written after, it is one")
    func closedAfterTheWatchBegan() throws {
        let file = directory("doc.txt")
        try touch(file, "old")
        // A writer whose descriptor outlives the write (a child process inherited it, say).
        let handle = try FileHandle(forWritingTo: file)
        try handle.write(contentsOf: Data(" more".utf8))
        try watching { watcher, recorder in
            try watcher.barrier(for: directory.url)
            try handle.close()
            try watcher.barrier(for: directory.url)
            #expect(recorder.lines(relativeTo: directory.url) == [])
            let later = try FileHandle(forWritingTo: file)
            try later.seekToEnd()
            try later.write(contentsOf: Data(" again".utf8))
            try later.close()
            try watcher.barrier(for: directory.url)
            #expect(recorder.lines(relativeTo: directory.url) == ["changed doc.txt"])
        }
    }

    @Test("An atomic save whose temporary file and rename come in different batches is one change of the target")
    func slowAtomicSave() throws {
        try watching { watcher, recorder in
            try touch(directory("doc.txt"), "old")
            try watcher.barrier(for: directory.url)
            recorder.reset()
            // A writer descheduled between its write and its rename (a busy machine): the
            // temporary file's events are delivered before the rename happens.
            let temporary = directory(".doc.txt.42\(InotifyWatcher.temporarySuffix)")
            try touch(temporary, "new")
            try watcher.barrier(for: directory.url)
            try FileSystem.rename(temporary.path, to: directory("doc.txt").path)
            try watcher.barrier(for: directory.url)
            #expect(recorder.lines(relativeTo: directory.url) == ["changed doc.txt"])
        }
    }

    @Test("A directory created and filled at once: nothing missed, nothing reported twice (100 trials)")
    func mkdirThenFill() throws {
        try watching { watcher, recorder in
            var missed = 0
            var doubled = 0
            for trial in 0..<100 {
                let top = directory("t\(trial)")
                try FileManager.default.createDirectory(at: top, withIntermediateDirectories: false)
                var expected: [URL] = [top]
                for index in 0..<5 {
                    try touch(top.appendingPathComponent("f\(index)"))
                    expected.append(top.appendingPathComponent("f\(index)"))
                }
                let sub = top.appendingPathComponent("sub")
                try FileManager.default.createDirectory(at: sub, withIntermediateDirectories: false)
                expected.append(sub)
                for index in 0..<5 {
                    try touch(sub.appendingPathComponent("g\(index)"))
                    expected.append(sub.appendingPathComponent("g\(index)"))
                }
                try watcher.barrier(for: directory.url)
                let appeared = recorder.lines(relativeTo: directory.url).filter { $0.hasPrefix("appeared ") }
                for url in expected {
                    let line =
                        "appeared "
                        + FileSystemEvent.appeared(url).relative(to: directory.url).dropFirst("appeared ".count)
                    let count = appeared.filter { $0 == line }.count
                    if count == 0 { missed += 1 }
                    if count > 1 { doubled += 1 }
                }
                recorder.reset()
            }
            #expect(missed == 0)
            #expect(doubled == 0)
        }
    }

    @Test("Paths stay right after nested directory renames")
    func nestedRenames() throws {
        try watching { watcher, recorder in
            let deep = directory.makeDirectory("a", "b", "c")
            try touch(deep.appendingPathComponent("file.txt"))
            try watcher.barrier(for: directory.url)
            try FileManager.default.moveItem(at: directory("a"), to: directory("x"))
            try FileManager.default.moveItem(at: directory("x", "b"), to: directory("x", "y"))
            try FileManager.default.moveItem(at: directory("x", "y", "c"), to: directory("x", "y", "z"))
            try watcher.barrier(for: directory.url)
            recorder.reset()
            try touch(directory("x", "y", "z", "file.txt"), "changed")
            try touch(directory("x", "y", "z", "new.txt"))
            try watcher.barrier(for: directory.url)
            // A file created and then written may be reported as appeared and then changed (or a
            // write as two changes) when a loaded machine splits the settle window: the paths are
            // the point.
            let lines = recorder.lines(relativeTo: directory.url)
            let merged = lines.enumerated().filter { index, line in
                !(index > 0 && line.hasPrefix("changed ")
                    && lines[index - 1].hasSuffix(" " + line.dropFirst("changed ".count)))
            }.map(\.element)
            #expect(merged == ["changed x/y/z/file.txt", "appeared x/y/z/new.txt"], "\(lines)")
        }
    }

    @Test("A directory renamed over an empty one is watched under its new name")
    func directoryReplacedByMove() throws {
        try watching { watcher, recorder in
            directory.makeDirectory("target")
            let staging = directory.makeDirectory("staging")
            try touch(staging.appendingPathComponent("inside.txt"))
            try watcher.barrier(for: directory.url)
            #expect(rename(staging.path, directory("target").path) == 0)
            try watcher.barrier(for: directory.url)
            recorder.reset()
            try touch(directory("target", "new.txt"))
            try touch(directory("target", "inside.txt"), "changed")
            try watcher.barrier(for: directory.url)
            // A loaded machine may part a write from its close (or its truncation from its bytes)
            // across settle windows, and report the same item twice in a row: the paths are the point.
            let lines = recorder.lines(relativeTo: directory.url)
            let merged = lines.enumerated().filter { index, line in
                !(index > 0
                    && (line == lines[index - 1]
                        || (line.hasPrefix("changed ")
                            && lines[index - 1].hasSuffix(" " + line.dropFirst("changed ".count)))))
            }.map(\.element)
            #expect(merged == ["appeared target/new.txt", "changed target/inside.txt"], "\(lines)")
        }
    }

    @Test(
        "A watched file whose directory moves (its own parent unwatched) is reported moved to where it went, not left at a stale path"
    )
    func ancestorMovedAway() throws {
        try WatchLimitLock.shared {
            let watcher = try InotifyWatcher()
            defer { watcher.stop() }
            let recorder = EventRecorder()
            let parent = directory.makeDirectory("outer", "inner")
            let file = parent.appendingPathComponent("doc.txt")
            try touch(file)
            let registration = try watcher.watch(file, handler: recorder.handler)
            defer { registration.cancel() }
            try FileManager.default.moveItem(at: directory("outer", "inner"), to: directory("outer", "moved"))
            #expect(
                recorder.wait {
                    $0.contains { $0.relative(to: directory.url) == "moved outer/inner/doc.txt -> outer/moved/doc.txt" }
                }
            )
            // Writes at the new place are not reported under the old path.
            try touch(directory("outer", "moved", "doc.txt"), "2")
            try touch(directory("outer", "moved", "marker"))
            #expect(!recorder.lines(relativeTo: directory.url).contains("changed outer/inner/doc.txt"))
        }
    }

    @Test("A watched file whose grandparent moves to another folder, with nothing above it watched, is reported moved")
    func grandparentMovedAway() throws {
        try WatchLimitLock.shared {
            let watcher = try InotifyWatcher()
            defer { watcher.stop() }
            let recorder = EventRecorder()
            let parent = directory.makeDirectory("one", "two", "three")
            directory.makeDirectory("elsewhere")
            let file = parent.appendingPathComponent("doc.txt")
            try touch(file)
            let registration = try watcher.watch(file, handler: recorder.handler)
            defer { registration.cancel() }
            try FileManager.default.moveItem(at: directory("one", "two"), to: directory("elsewhere", "deux"))
            #expect(
                recorder.wait {
                    $0.contains {
                        $0.relative(to: directory.url) == "moved one/two/three/doc.txt -> elsewhere/deux/three/doc.txt"
                    }
                }
            )
        }
    }

    @Test("An editor's save in one settle window (vim: mv x x~, write x, rm x~) is one change of x")
    func editorSaveCoalesces() throws {
        try WatchLimitLock.shared {
            let watcher = try InotifyWatcher(settleWindow: .milliseconds(10))
            defer { watcher.stop() }
            let recorder = EventRecorder()
            let file = directory("x.txt")
            try touch(file)
            let registration = try watcher.watch(directory.url, handler: recorder.handler)
            defer { registration.cancel() }
            try watcher.barrier(for: directory.url)
            recorder.reset()
            let release = Semaphore()
            let suspended = Semaphore()
            // Held, so the three steps are read as one burst however loaded the machine is.
            Thread.detachNewThread {
                watcher.suspendForTesting {
                    suspended.signal()
                    release.wait(timeout: .seconds(30))
                }
            }
            suspended.wait(timeout: .seconds(10))
            try FileManager.default.moveItem(at: file, to: directory("x.txt~"))
            try touch(file, "2")
            try FileManager.default.removeItem(at: directory("x.txt~"))
            release.signal()
            try watcher.barrier(for: directory.url)
            #expect(recorder.lines(relativeTo: directory.url) == ["changed x.txt"])
        }
    }

    @Test("A kernel queue overflow becomes a rescan and a rescanned event; later events still arrive")
    func overflowRescans() throws {
        try watching { watcher, recorder in
            // The directory is watched before the watcher is suspended, so its files make events.
            let burst = directory.makeDirectory("burst")
            try watcher.barrier(for: directory.url)
            let release = Semaphore()
            let suspended = Semaphore()
            Thread.detachNewThread {
                watcher.suspendForTesting {
                    suspended.signal()
                    release.wait(timeout: .seconds(60))
                }
            }
            #expect(suspended.wait(timeout: .seconds(10)))
            // More events than the kernel queues (max_queued_events, 16384 by default).
            let limit =
                Int(
                    (try? String(contentsOfFile: "/proc/sys/fs/inotify/max_queued_events", encoding: .utf8))?
                        .trimmingCharacters(in: .whitespacesAndNewlines) ?? "16384"
                ) ?? 16384
            for index in 0..<(limit / 2 + 100) { try touch(burst.appendingPathComponent("f\(index)")) }
            release.signal()
            #expect(
                recorder.wait(timeout: .seconds(60)) { events in
                    events.contains { $0.relative(to: directory.url) == "rescanned ." }
                }
            )
            try touch(directory("after.txt"))
            try watcher.barrier(for: directory.url)
            #expect(recorder.lines(relativeTo: directory.url).contains("appeared after.txt"))
        }
    }

    @Test("Reaching the watch limit is a clear error that names the limit")
    func watchLimit() throws {
        // The limit is the kernel's, per user namespace: a helper in a namespace of its own, whose
        // limit is 0, reaches it at once, and nothing else on the machine (other tests, other
        // processes of this user) sees a lower limit meanwhile.
        let script = "echo 0 > /proc/sys/user/max_inotify_watches && exec \"$0\" watch-limit \"$1\""
        let child = try Subprocess(
            "/usr/bin/unshare",
            ["--user", "--map-root-user", "sh", "-c", script, ChildProcess.helperURL.path, directory.url.path]
        )
        let line = child.readLine(timeout: .seconds(30))
        #expect(line?.hasPrefix("error watchLimitReached ") == true, "\(line ?? "no output")")
        #expect(line?.contains("max_user_watches") == true)
        _ = child.wait(timeout: .seconds(30))
    }

    @Test("A watched file that does not exist yet is reported when it appears, changes and goes")
    func fileWatch() throws {
        try WatchLimitLock.shared {
            let watcher = try InotifyWatcher()
            defer { watcher.stop() }
            let recorder = EventRecorder()
            let file = directory("later.txt")
            let registration = try watcher.watch(file, handler: recorder.handler)
            defer { registration.cancel() }
            try touch(directory("other.txt"))
            try touch(file)
            try watcher.barrier(for: file)
            try touch(file, "2")
            try watcher.barrier(for: file)
            try FileManager.default.removeItem(at: file)
            try watcher.barrier(for: file)
            // A rewrite is a truncation and a write: two modifications that the settle window
            // usually merges into one report, but not on a loaded machine. Repeats of one report
            // in a row say the same thing; the order and the kinds are the contract.
            let lines = recorder.lines(relativeTo: directory.url)
            let collapsed = lines.enumerated().filter { $0.offset == 0 || lines[$0.offset - 1] != $0.element }.map(
                \.element
            )
            #expect(collapsed == ["appeared later.txt", "changed later.txt", "removed later.txt"], "\(lines)")
        }
    }
}
