import ConcordSystem
import ConcordTestSupport
import Foundation
import Testing

@testable import FileCoordination

/// The path of the engine `name` on `PATH`, if it is installed.
private func engine(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    for directory in path.split(separator: ":") {
        let candidate = "\(directory)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}

/// Whether the engine tests run: with `CONCORD_ENGINE_TESTS=1` (`make test-engine`, which installs
/// the engines, and where a missing engine fails the test), or whenever the engine is installed.
private func engineTestsRun(_ name: String) -> Bool {
    ProcessInfo.processInfo.environment["CONCORD_ENGINE_TESTS"] == "1" || engine(name) != nil
}

/// Real engines make real conflict copies: rclone bisync (Debian's 1.60, which renames both sides)
/// and unison (`-copyonconflict`) between two local folders, and two Syncthing daemons on
/// loopback (with `CONCORD_ENGINE_TESTS=1`, as `make test-engine` runs them); one folder presented
/// in this process and the other in a helper process. Both presenters hear the copies come; one
/// side resolves; the engine carries the resolution, and the other side's presenter hears the
/// copies go.
@Suite("Real engines' conflict copies reach presenters on both sides", .serialized)
struct ConflictEngineTests {
    let directory = TemporaryDirectory("engines")

    /// Runs `engine` with `arguments` to its end (bounded) and expects it to succeed.
    private func run(_ name: String, _ arguments: [String], environment: [String: String]) throws {
        let executable = try #require(engine(name), "\(name) is not installed (make deps-engine installs it)")
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { $1 }
        let child = try Subprocess(executable, arguments, environment: merged, captureStandardError: true)
        let errors = child.readStandardError()
        let ended = child.wait(timeout: .seconds(120))
        #expect(ended == .exited(0), "\(name) \(arguments.joined(separator: " ")): \(errors)")
    }

    /// Writes `text` into `url` without coordination, modified `seconds` from now (engines compare
    /// modification times).
    private func edit(_ url: URL, _ text: String, modifiedIn seconds: TimeInterval) throws {
        try Data(text.utf8).write(to: url)
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(seconds)],
            ofItemAtPath: url.path
        )
    }

    private func files(_ folder: URL) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test(
        "rclone bisync 1.60: both sides renamed to ..path1 and ..path2, gained on both sides, resolved on one",
        .enabled(if: engineTestsRun("rclone"))
    )
    func rcloneBisync() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let (one, two) = (directory.makeDirectory("path1"), directory.makeDirectory("path2"))
        let work = directory.makeDirectory("work")
        let environment = ["RCLONE_CONFIG": directory("rclone.conf").path]
        try Data().write(to: directory("rclone.conf"))
        let bisync = ["bisync", one.path, two.path, "--workdir", work.path]
        for folder in [one, two] {
            try edit(folder.appendingPathComponent("notes.md"), "base", modifiedIn: -60)
            try edit(folder.appendingPathComponent("keep.txt"), "unrelated", modifiedIn: -60)
        }
        try run("rclone", bisync + ["--resync"], environment: environment)

        let mine = one.appendingPathComponent("notes.md")
        let theirs = two.appendingPathComponent("notes.md")
        let local = RecordingPresenter(mine)
        FileCoordinator.addFilePresenter(local)
        defer { FileCoordinator.removeFilePresenter(local) }
        let helper = try PresentingProcess([theirs])

        try edit(mine, "mine", modifiedIn: 10)
        try edit(theirs, "theirs, longer", modifiedIn: 20)
        try run("rclone", bisync, environment: environment)
        #expect(try files(one) == ["keep.txt", "notes.md..path1", "notes.md..path2"])
        #expect(local.wait(for: ["didGainVersion:notes.md..path1", "didGainVersion:notes.md..path2"]))
        #expect(helper.wait(for: "didGainVersion:notes.md..path1"))
        #expect(helper.wait(for: "didGainVersion:notes.md..path2"))

        // Path1's user keeps their own side.
        let versions = try FileVersion.versionsOfItem(at: mine)
        #expect(versions.compactMap(\.localizedNameOfSavingComputer).sorted() == ["path1", "path2"])
        let kept = try #require(versions.first { $0.localizedNameOfSavingComputer == "path1" })
        try kept.replaceItem(at: mine, options: .byMoving)
        try FileVersion.removeOtherVersionsOfItem(at: mine)
        #expect(local.wait(for: ["didLoseVersion:notes.md..path1", "didLoseVersion:notes.md..path2"]))

        // Deleting both copies is more than half of path1's listing: bisync wants --force for it.
        try run("rclone", bisync + ["--force"], environment: environment)
        #expect(helper.wait(for: "didLoseVersion:notes.md..path1"))
        #expect(helper.wait(for: "didLoseVersion:notes.md..path2"))
        #expect(try files(two) == ["keep.txt", "notes.md"])
        #expect(try String(contentsOf: theirs, encoding: .utf8) == "mine")
        #expect(FileVersion.otherVersionsOfItem(at: theirs)?.isEmpty == true)
    }

    @Test(
        "Syncthing: both sides changed while paused; the copy is gained on both, kept on one, lost on the other",
        .enabled(if: ProcessInfo.processInfo.environment["CONCORD_ENGINE_TESTS"] == "1")
    )
    func syncthing() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        #expect(SyncthingPair.isInstalled, "syncthing is not installed (make deps-engine installs it)")
        let pair = try SyncthingPair(root: directory.makeDirectory("syncthing"))
        defer { pair.stop() }
        let (one, two) = (pair.nodes[0], pair.nodes[1])
        let mine = one.folder.appendingPathComponent("notes.md")
        let theirs = two.folder.appendingPathComponent("notes.md")
        try edit(mine, "base", modifiedIn: -60)
        try pair.start()
        try pair.waitUntilConnected()
        try pair.waitUntil("notes.md reaches the other device", timeout: .seconds(60)) {
            (try? String(contentsOf: theirs, encoding: .utf8)) == "base"
        }

        let local = RecordingPresenter(mine)
        FileCoordinator.addFilePresenter(local)
        defer { FileCoordinator.removeFilePresenter(local) }
        let helper = try PresentingProcess([theirs])

        // Both devices change the file while they cannot hear each other; the older change loses.
        try pair.setPaused(true)
        try pair.waitUntilConnected(false)
        try edit(mine, "mine", modifiedIn: 5)
        try edit(theirs, "theirs, newer", modifiedIn: 10)
        for node in pair.nodes { try pair.scan(node) }
        try pair.setPaused(false)
        try pair.waitUntilConnected()
        func copy(in folder: URL) -> String? {
            (try? FileManager.default.contentsOfDirectory(atPath: folder.path))?.first {
                $0.hasPrefix("notes.sync-conflict-") && $0.hasSuffix(".md")
            }
        }
        try pair.waitUntil("the conflict copy is on both devices", timeout: .seconds(90)) {
            copy(in: one.folder) != nil && copy(in: two.folder) != nil
        }
        let name = try #require(copy(in: one.folder))
        #expect(local.wait(for: ["didGainVersion:\(name)"]))
        #expect(helper.wait(for: "didGainVersion:\(name)"))

        // Device one keeps its own change; Syncthing carries the content and the removal over.
        let version = try #require(FileVersion.unresolvedConflictVersionsOfItem(at: mine)?.first)
        #expect(version.engine == "Syncthing" && version.url.lastPathComponent == name)
        try version.replaceItem(at: mine, options: .byMoving)
        #expect(local.wait(for: ["didLoseVersion:\(name)"]))
        try pair.scan(one)
        #expect(helper.wait(for: "didLoseVersion:\(name)", timeout: .seconds(90)))
        try pair.waitUntil("the kept content reaches the other device", timeout: .seconds(60)) {
            (try? String(contentsOf: theirs, encoding: .utf8)) == "mine"
        }
        #expect(try files(two.folder) == ["notes.md"])
    }

    @Test(
        "unison -copyonconflict: the overwritten side's copy is gained on both sides, kept on one, lost on the other",
        .enabled(if: engineTestsRun("unison"))
    )
    func unisonCopyOnConflict() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let (one, two) = (directory.makeDirectory("one"), directory.makeDirectory("two"))
        let environment = ["UNISON": directory.makeDirectory("unison").path]
        let sync = [
            one.path, two.path, "-batch", "-auto", "-times", "-ui", "text", "-copyonconflict", "-prefer", "newer",
        ]
        for folder in [one, two] { try edit(folder.appendingPathComponent("notes.md"), "base", modifiedIn: -60) }
        try run("unison", sync, environment: environment)

        let mine = one.appendingPathComponent("notes.md")
        let theirs = two.appendingPathComponent("notes.md")
        let local = RecordingPresenter(mine)
        FileCoordinator.addFilePresenter(local)
        defer { FileCoordinator.removeFilePresenter(local) }
        let helper = try PresentingProcess([theirs])

        try edit(mine, "mine", modifiedIn: 10)
        try edit(theirs, "theirs, newer", modifiedIn: 20)
        try run("unison", sync, environment: environment)
        // The newer side wins; the overwritten content stays beside it as a copy.
        let copy = try #require(try files(one).first { $0.hasPrefix("notes (conflict_on_") })
        #expect(local.wait(for: ["didGainVersion:\(copy)"]))
        #expect(try String(contentsOf: mine, encoding: .utf8) == "theirs, newer")

        // The copy is a new file to unison: the next run carries it to the other side.
        try run("unison", sync, environment: environment)
        #expect(helper.wait(for: "didGainVersion:\(copy)"))

        // One side keeps the overwritten content; the engine carries it and the removal over.
        let version = try #require(FileVersion.unresolvedConflictVersionsOfItem(at: mine)?.first)
        #expect(version.engine == "unison")
        try version.replaceItem(at: mine, options: .byMoving)
        #expect(local.wait(for: ["didLoseVersion:\(copy)"]))
        try run("unison", sync, environment: environment)
        #expect(helper.wait(for: "didLoseVersion:\(copy)"))
        #expect(try files(two) == ["notes.md"])
        #expect(try String(contentsOf: theirs, encoding: .utf8) == "mine")
    }
}
