import ConcordTestSupport
import Foundation
import Testing

@testable import FileCoordination

@Suite("Presenters hear changes made by other processes", .serialized)
struct CrossProcessPresenterTests {
    let directory = TemporaryDirectory("crossprocess")

    /// Runs the helper once and waits for it to finish.
    private func other(_ arguments: String...) throws {
        let child = try ChildProcess(arguments)
        var finished = false
        while let line = child.readLine() {
            if line == "done" || line == "written" {
                finished = true
                break
            }
        }
        #expect(finished)
        #expect(child.waitForExit() == 0)
    }

    @Test("Writes, atomic replaces, creations, moves and deletions by another process reach the presenters, in order")
    func messagesFromAnotherProcess() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let folder = directory.makeDirectory("folder")
        let file = folder.appendingPathComponent("doc.txt")
        try Data("v1".utf8).write(to: file)
        let filePresenter = RecordingPresenter(file)
        let folderPresenter = RecordingPresenter(folder)
        FileCoordinator.addFilePresenter(filePresenter)
        FileCoordinator.addFilePresenter(folderPresenter)
        defer {
            FileCoordinator.removeFilePresenter(filePresenter)
            FileCoordinator.removeFilePresenter(folderPresenter)
        }

        try other("fs", "append", file.path, "more")
        #expect(filePresenter.wait(for: ["didChange"]))
        #expect(folderPresenter.wait(for: ["subitemDidChange:doc.txt"]))

        // A coordinated write in another process asks first, then tells (once).
        try other("write", file.path, "replaced atomically")
        #expect(filePresenter.wait(count: 4))
        #expect(folderPresenter.wait(count: 2))

        try other("fs", "create", folder.appendingPathComponent("new.txt").path)
        #expect(folderPresenter.wait(for: ["subitemDidAppear:new.txt"]))

        try other(
            "fs",
            "move",
            folder.appendingPathComponent("new.txt").path,
            folder.appendingPathComponent("renamed.txt").path
        )
        #expect(folderPresenter.wait(for: ["subitemDidMove:new.txt->renamed.txt"]))

        try other("fs", "move", file.path, folder.appendingPathComponent("moved.txt").path)
        #expect(filePresenter.wait(for: ["didMove:moved.txt"]))
        #expect(folderPresenter.wait(for: ["subitemDidMove:doc.txt->moved.txt"]))
        #expect(filePresenter.presentedItemURL?.lastPathComponent == "moved.txt")

        // The presenter follows its item: changes at the new place reach it.
        try PresenterWatching.shared.synchronize(folder)
        try other("fs", "append", folder.appendingPathComponent("moved.txt").path, "again")
        #expect(filePresenter.wait(count: 6))

        try other("fs", "delete", folder.appendingPathComponent("moved.txt").path)
        #expect(filePresenter.wait(for: ["accommodateDeletion"]))
        #expect(folderPresenter.wait(for: ["subitemDeletion:moved.txt"]))

        try PresenterWatching.shared.synchronize(folder)
        #expect(
            filePresenter.messages == [
                "didChange", "relinquishToWriter", "reacquire", "didChange", "didMove:moved.txt", "didChange",
                "accommodateDeletion",
            ]
        )
        #expect(
            folderPresenter.messages == [
                "subitemDidChange:doc.txt", "subitemDidChange:doc.txt", "subitemDidAppear:new.txt",
                "subitemDidMove:new.txt->renamed.txt", "subitemDidMove:doc.txt->moved.txt",
                "subitemDidChange:moved.txt", "subitemDeletion:moved.txt",
            ]
        )
    }

    @Test("A coordinated write in this process reaches its presenters once, not twice")
    func noEcho() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let file = directory("doc.txt")
        try Data("v1".utf8).write(to: file)
        let presenter = RecordingPresenter(file)
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }
        for round in 0..<5 {
            try FileCoordinator().replaceContentsOfItem(at: file, with: Data("v\(round)".utf8))
        }
        try PresenterWatching.shared.synchronize(directory.url)
        #expect(presenter.messages.filter { $0 == "didChange" }.count == 5)
    }
}
