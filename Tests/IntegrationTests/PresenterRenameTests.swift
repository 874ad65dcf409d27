import ConcordSystem
import ConcordTestSupport
import Foundation
import Testing

@testable import FileCoordination

/// Presenters follow their item when a folder above it is renamed, and editors' saves reach them
/// as what they are: a change of the file.
@Suite("Presenters follow renames and editors' saves", .serialized)
struct PresenterRenameTests {
    let directory = TemporaryDirectory("rename")

    /// Runs the helper once and waits (bounded) for it to finish.
    private func other(_ arguments: String...) throws {
        let child = try ChildProcess(arguments)
        #expect(child.waitForLine("done"))
        #expect(child.waitForExit() == 0)
    }

    /// `dir/a/b/c/settings.conf`, presented.
    private func presentedFile() throws -> (file: URL, presenter: RecordingPresenter) {
        let folder = directory.makeDirectory("a", "b", "c")
        let file = folder.appendingPathComponent("settings.conf")
        try Data("v1".utf8).write(to: file)
        let presenter = RecordingPresenter(file)
        FileCoordinator.addFilePresenter(presenter)
        return (file, presenter)
    }

    enum Mover: String, CaseIterable { case otherProcess, otherProcessCoordinated, thisProcessCoordinated }

    @Test(
        "Renaming a folder 1, 2 or 3 levels above a presented file is a move to the right URL, and later changes are heard",
        arguments: [1, 2, 3],
        Mover.allCases
    )
    func ancestorRename(depth: Int, mover: Mover) throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let (file, presenter) = try presentedFile()
        defer { FileCoordinator.removeFilePresenter(presenter) }
        // depth 1 renames c, 2 renames b, 3 renames a.
        var renamed = file
        for _ in 0..<depth { renamed.deleteLastPathComponent() }
        let target = renamed.deletingLastPathComponent().appendingPathComponent(renamed.lastPathComponent + "2")
        let suffix = String(file.path.dropFirst(renamed.path.count))
        let expected = URL(fileURLWithPath: target.path + suffix)

        switch mover {
        case .otherProcess: try other("fs", "move", renamed.path, target.path)
        case .otherProcessCoordinated: try other("move", renamed.path, target.path)
        case .thisProcessCoordinated: try FileCoordinator().moveItem(at: renamed, to: target)
        }
        #expect(presenter.wait(for: ["didMove:settings.conf"]))
        #expect(presenter.presentedItemURL?.path == expected.path)

        // The presenter now listens at the new place.
        try PresenterWatching.shared.synchronize(expected.deletingLastPathComponent())
        try other("fs", "append", expected.path, "more")
        #expect(presenter.wait(for: ["didChange"]))
        try PresenterWatching.shared.synchronize(expected.deletingLastPathComponent())
        // A coordinated move, in this process or another, asks the presenter to relinquish first.
        let asked = mover == .otherProcess ? [] : ["relinquishToWriter", "reacquire"]
        // (An uncoordinated append is one change, even on a loaded machine that parts its write
        // from its close.)
        #expect(presenter.messages == asked + ["didMove:settings.conf", "didChange"])
    }

    @Test("Two renames in a row, at different depths, are both followed")
    func renamesInARow() throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let (file, presenter) = try presentedFile()
        defer { FileCoordinator.removeFilePresenter(presenter) }
        let b = directory("a", "b")
        try other("fs", "move", b.path, directory("a", "B").path)
        #expect(presenter.wait(for: ["didMove:settings.conf"]))
        try PresenterWatching.shared.synchronize(directory("a", "B", "c"))
        try other("fs", "move", directory("a").path, directory("A").path)
        #expect(presenter.wait(count: 2))
        #expect(presenter.presentedItemURL?.path == directory("A", "B", "c", file.lastPathComponent).path)
        try PresenterWatching.shared.synchronize(directory("A", "B", "c"))
        try other("fs", "append", directory("A", "B", "c", file.lastPathComponent).path, "more")
        #expect(presenter.wait(count: 3))
        #expect(presenter.messages == ["didMove:settings.conf", "didMove:settings.conf", "didChange"])
    }

    enum Editor: String, CaseIterable { case vim, emacs, sed }

    @Test("An editor's save in one burst is one change of the file, with no move", arguments: Editor.allCases)
    func editorSaveInOneBurst(editor: Editor) throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let folder = directory.makeDirectory("project")
        let file = folder.appendingPathComponent("x.txt")
        try Data("v1".utf8).write(to: file)
        let presenter = RecordingPresenter(file)
        let folderPresenter = RecordingPresenter(folder)
        FileCoordinator.addFilePresenter(presenter)
        FileCoordinator.addFilePresenter(folderPresenter)
        defer {
            FileCoordinator.removeFilePresenter(presenter)
            FileCoordinator.removeFilePresenter(folderPresenter)
        }
        try PresenterWatching.shared.synchronize(folder)

        // The watcher reads nothing while the editor runs, so the save arrives as one burst
        // however loaded the machine is.
        try PresenterWatching.shared.withEventsHeld {
            if editor == .sed {
                let sed = Process()
                sed.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                sed.arguments = ["sed", "-i", "s/v1/v2/", file.path]
                try sed.run()
                sed.waitUntilExit()
                #expect(sed.terminationStatus == 0)
            } else {
                try other("editor", editor.rawValue, file.path, "v2")
            }
        }
        #expect(presenter.wait(for: ["didChange"]))
        try PresenterWatching.shared.synchronize(folder)
        #expect(presenter.messages == ["didChange"])
        #expect(presenter.presentedItemURL?.path == file.path)
        #expect(try String(contentsOf: file, encoding: .utf8).hasPrefix("v2"))
        switch editor {
        case .vim, .sed: #expect(folderPresenter.messages == ["subitemDidChange:x.txt"])
        case .emacs: #expect(folderPresenter.messages == ["subitemDidAppear:x.txt~", "subitemDidChange:x.txt"])
        }

        // And the presenter keeps hearing the file.
        try other("fs", "append", file.path, "more")
        #expect(presenter.wait(count: 2))
        #expect(presenter.messages.allSatisfy { $0 == "didChange" })
    }

    @Test(
        "The same saves spread out are reported step by step, and never leave the presenter on a path that is gone untold",
        arguments: Editor.allCases
    )
    func editorSaveSpreadOut(editor: Editor) throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let folder = directory.makeDirectory("project")
        let file = folder.appendingPathComponent("x.txt")
        let backup = folder.appendingPathComponent("x.txt~")
        try Data("v1".utf8).write(to: file)
        let presenter = RecordingPresenter(file)
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }
        try PresenterWatching.shared.synchronize(folder)

        // Each step is delivered (a barrier) before the next one starts.
        func step(_ body: () throws -> Void) throws {
            try body()
            try PresenterWatching.shared.synchronize(folder)
        }
        switch editor {
        case .vim, .emacs:
            try step { try FileManager.default.moveItem(at: file, to: backup) }
            #expect(presenter.messages == ["didMove:x.txt~"])
            try step { try Data("v2".utf8).write(to: file) }
            if editor == .vim {
                try step { try FileManager.default.removeItem(at: backup) }
                #expect(presenter.wait(for: ["accommodateDeletion"]))
                #expect(presenter.messages == ["didMove:x.txt~", "accommodateDeletion"])
            } else {
                #expect(presenter.messages == ["didMove:x.txt~"])
                #expect(FileManager.default.fileExists(atPath: presenter.presentedItemURL!.path))
            }
        case .sed:
            let temporary = folder.appendingPathComponent("sedAbc123")
            try step { try Data("v2".utf8).write(to: temporary) }
            try step { try FileSystem.rename(temporary.path, to: file.path) }
            #expect(presenter.wait(for: ["didChange"]))
            #expect(presenter.messages == ["didChange"])
        }
    }
}
