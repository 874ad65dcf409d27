import ConcordSystem
import ConcordTestSupport
import Foundation
import Testing

@testable import FileCoordination

/// Presenters hear of their items' versions (the conflict copies engines make), gained, resolved
/// and lost, whoever made the change, in this process (real inotify) and in other processes
/// (real helper processes presenting).
@Suite("Presenters hear of conflict versions, in every process", .serialized)
struct ConflictPresenterTests {
    let directory = TemporaryDirectory("conflicts")

    /// Puts `text` at `url` as a sync engine does: a temporary file beside it renamed into place.
    @discardableResult
    private func engineWrites(_ text: String, at url: URL) throws -> URL {
        let staging = url.deletingLastPathComponent().appendingPathComponent(".syncthing.\(UUID().uuidString).tmp")
        try Data(text.utf8).write(to: staging)
        try FileSystem.rename(staging.path, to: url.path)
        return url
    }

    /// Runs the helper once (`version ...`, `fs ...`) and waits until it says it is done.
    private func other(_ arguments: String...) throws {
        let child = try ChildProcess(arguments)
        #expect(child.waitForLine("done"))
        #expect(child.waitForExit() == 0)
    }

    private func present(_ urls: URL...) -> [RecordingPresenter] {
        urls.map { url in
            let presenter = RecordingPresenter(url)
            FileCoordinator.addFilePresenter(presenter)
            return presenter
        }
    }

    private func dismiss(_ presenters: [RecordingPresenter]) {
        for presenter in presenters { FileCoordinator.removeFilePresenter(presenter) }
    }

    @Test("In one process: a copy made by an engine is gained, marking it resolved is heard, removing it is lost")
    func inProcess() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let folder = directory.makeDirectory("in-process")
        let item = try engineWrites("mine", at: folder.appendingPathComponent("notes.md"))
        let presenters = present(item, folder)
        defer { dismiss(presenters) }
        let (file, parent) = (presenters[0], presenters[1])

        let copyName = "notes.sync-conflict-20261124-101500-ABCDEF1.md"
        try engineWrites("theirs", at: folder.appendingPathComponent(copyName))
        #expect(file.wait(for: ["didGainVersion:\(copyName)"]))
        #expect(parent.wait(for: ["subitemDidGainVersion:notes.md/\(copyName)"]))

        let version = try #require(FileVersion.unresolvedConflictVersionsOfItem(at: item)?.first)
        try version.setResolved(true)
        #expect(file.wait(for: ["didResolveConflict:\(copyName)"]))
        #expect(parent.wait(for: ["subitemDidResolveConflict:notes.md/\(copyName)"]))

        try version.remove()
        #expect(file.wait(for: ["didLoseVersion:\(copyName)"]))
        #expect(parent.wait(for: ["subitemDidLoseVersion:notes.md/\(copyName)"]))

        try PresenterWatching.shared.synchronize(folder)
        let versionMessages = file.messages.filter { $0.contains("Version") || $0.contains("Conflict") }
        #expect(
            versionMessages == [
                "didGainVersion:\(copyName)", "didResolveConflict:\(copyName)", "didLoseVersion:\(copyName)",
            ]
        )
    }

    @Test("Copies already there are known, not gained; their removal is lost, at any depth of a folder")
    func copiesAlreadyThere() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let folder = directory.makeDirectory("already")
        let sub = directory.makeDirectory("already", "sub")
        let item = try engineWrites("mine", at: folder.appendingPathComponent("notes.md"))
        let old = try engineWrites("old", at: folder.appendingPathComponent("notes (conflict_on_2026-11-24).md"))
        try engineWrites("deep", at: sub.appendingPathComponent("todo.txt"))
        let presenters = present(item, folder)
        defer { dismiss(presenters) }
        let (file, parent) = (presenters[0], presenters[1])

        // A copy deep inside the folder: its folder's presenter hears it, for the item beside it.
        let deep = "todo.sync-conflict-20261124-101500-ABCDEF1.txt"
        try engineWrites("theirs", at: sub.appendingPathComponent(deep))
        #expect(parent.wait(for: ["subitemDidGainVersion:todo.txt/\(deep)"]))

        try FileSystem.removeFile(at: old.path)
        try FileSystem.removeFile(at: sub.appendingPathComponent(deep).path)
        #expect(file.wait(for: ["didLoseVersion:\(old.lastPathComponent)"]))
        #expect(parent.wait(for: ["subitemDidLoseVersion:notes.md/\(old.lastPathComponent)"]))
        #expect(parent.wait(for: ["subitemDidLoseVersion:todo.txt/\(deep)"]))
        try PresenterWatching.shared.synchronize(folder)
        #expect(!file.messages.contains { $0.hasPrefix("didGainVersion") })
        #expect(!parent.messages.contains { $0.hasPrefix("subitemDidGainVersion:notes.md") })
    }

    @Test("A look-alike of an item that is not there is never gained; it is once the item arrives")
    func lookalikeIgnored() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let folder = directory.makeDirectory("lookalike")
        let item = folder.appendingPathComponent("notes.md")
        let presenters = present(item)
        defer { dismiss(presenters) }
        let copyName = "notes (Ann's conflicted copy 2026-11-24).md"
        try engineWrites("theirs", at: folder.appendingPathComponent(copyName))
        try engineWrites("x", at: folder.appendingPathComponent("notes (final).md"))
        try PresenterWatching.shared.synchronize(folder)
        #expect(!presenters[0].messages.contains { $0.contains("Version") })

        try engineWrites("mine", at: item)
        #expect(presenters[0].wait(for: ["didGainVersion:\(copyName)"]))
    }

    @Test("rclone bisync before 1.66: both sides renamed, both gained; keeping one loses both")
    func rcloneBothSides() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let folder = directory.makeDirectory("rclone")
        let item = try engineWrites("base", at: folder.appendingPathComponent("notes.md"))
        let presenters = present(item)
        defer { dismiss(presenters) }
        let presenter = presenters[0]
        try FileSystem.rename(item.path, to: item.path + "..path1")
        try engineWrites("other side", at: URL(fileURLWithPath: item.path + "..path2"))
        #expect(presenter.wait(for: ["didGainVersion:notes.md..path1", "didGainVersion:notes.md..path2"]))
        #expect(presenter.presentedItemURL == item)  // the item's own rename is not a move to follow

        let kept = try #require(FileVersion.otherVersionsOfItem(at: item)?.first { $0.url.path.hasSuffix("2") })
        try kept.replaceItem(at: item, options: .byMoving)
        try FileSystem.removeFile(at: item.path + "..path1")
        #expect(presenter.wait(for: ["didLoseVersion:notes.md..path1", "didLoseVersion:notes.md..path2"]))
        #expect(try String(contentsOf: item, encoding: .utf8) == "other side")
    }

    @Test("Across processes: the copy, its resolution and its removal reach the presenters of the other process")
    func acrossProcesses() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let folder = directory.makeDirectory("across")
        let item = try engineWrites("mine", at: folder.appendingPathComponent("notes.md"))
        let helper = try PresentingProcess([item, folder])
        let local = present(item)
        defer { dismiss(local) }

        // The engine (no coordination, no Concord) brings a conflict copy.
        let copyName = "notes (conflicted copy Ann 2026-11-24 101500).md"
        try engineWrites("theirs", at: folder.appendingPathComponent(copyName))
        #expect(helper.wait(for: "didGainVersion:\(copyName)", from: "p0"))
        #expect(helper.wait(for: "subitemDidGainVersion:notes.md/\(copyName)", from: "p1"))
        #expect(local[0].wait(for: ["didGainVersion:\(copyName)"]))

        // This process resolves it: the other process's presenters hear it.
        for version in FileVersion.unresolvedConflictVersionsOfItem(at: item) ?? [] { try version.setResolved(true) }
        #expect(helper.wait(for: "didResolveConflict:\(copyName)", from: "p0"))
        #expect(helper.wait(for: "subitemDidResolveConflict:notes.md/\(copyName)", from: "p1"))

        // Another process removes the versions: everyone hears the loss.
        try other("version", "remove-others", item.path)
        #expect(helper.wait(for: "didLoseVersion:\(copyName)", from: "p0"))
        #expect(helper.wait(for: "subitemDidLoseVersion:notes.md/\(copyName)", from: "p1"))
        #expect(local[0].wait(for: ["didLoseVersion:\(copyName)"]))
        #expect(
            local[0].messages.filter { $0.contains("Version") || $0.contains("Conflict") } == [
                "didGainVersion:\(copyName)", "didResolveConflict:\(copyName)", "didLoseVersion:\(copyName)",
            ]
        )
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["notes.md"])
    }

    @Test("Across processes: another process resolves and keeps theirs; this process's presenters hear it all")
    func resolvedElsewhere() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let folder = directory.makeDirectory("elsewhere")
        let item = try engineWrites("mine", at: folder.appendingPathComponent("notes.md"))
        let presenters = present(item, folder)
        defer { dismiss(presenters) }
        let copy = folder.appendingPathComponent("notes.sync-conflict-20261124-101500-ABCDEF1.md")
        try engineWrites("theirs", at: copy)
        #expect(presenters[0].wait(for: ["didGainVersion:\(copy.lastPathComponent)"]))

        try other("version", "resolve", item.path)
        #expect(presenters[0].wait(for: ["didResolveConflict:\(copy.lastPathComponent)"]))
        #expect(presenters[1].wait(for: ["subitemDidResolveConflict:notes.md/\(copy.lastPathComponent)"]))

        try other("version", "keep", copy.path, item.path)
        #expect(presenters[0].wait(for: ["didLoseVersion:\(copy.lastPathComponent)", "didChange"]))
        #expect(presenters[1].wait(for: ["subitemDidLoseVersion:notes.md/\(copy.lastPathComponent)"]))
        #expect(try String(contentsOf: item, encoding: .utf8) == "theirs")
        #expect(!FileManager.default.fileExists(atPath: copy.path))
    }
}
