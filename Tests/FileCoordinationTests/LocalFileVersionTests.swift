import ConcordSystem
import ConcordTestSupport
import Foundation
import Testing

@testable import FileCoordination

/// Versions an app keeps itself (`FileVersion.addOfItem`), stored outside the synced tree. One at
/// a time: each test points the store somewhere of its own.
@Suite("Local versions: an app keeps earlier contents outside the synced tree", .serialized)
struct LocalFileVersionTests {
    let directory = TemporaryDirectory("local-versions")

    /// Runs `body` with the store in a folder of this test's own, then puts the setting back.
    func withStore<T>(_ body: (URL) throws -> T) rethrows -> T {
        let previous = FileVersion.localVersionsDirectory
        let store = directory.makeDirectory("store-\(UUID().uuidString)")
        FileVersion.localVersionsDirectory = store
        defer { FileVersion.localVersionsDirectory = previous }
        return try body(store)
    }

    func text(_ url: URL) -> String? { (try? Data(contentsOf: url)).map { String(decoding: $0, as: UTF8.self) } }

    @Test("Kept versions are listed with the engines' copies, keep their date, revert the item and go")
    func keepRevertRemove() throws {
        try withStore { store in
            let synced = directory.makeDirectory("synced")
            let item = synced.appendingPathComponent("notes.md")
            try Data("first draft".utf8).write(to: item)
            let drafted = Date(timeIntervalSince1970: 1_790_000_000)
            try FileManager.default.setAttributes([.modificationDate: drafted], ofItemAtPath: item.path)
            let first = try FileVersion.addOfItem(at: item, withContentsOf: item)
            #expect(first.isLocal && !first.isConflict && !first.isCurrent && first.isResolved)
            #expect(first.modificationDate == drafted)
            #expect(first.localizedNameOfSavingComputer == ProcessInfo.processInfo.hostName)
            #expect(first.url.path.hasPrefix(store.path + "/"))

            try Data("second draft".utf8).write(to: item)
            try Data("theirs".utf8).write(to: synced.appendingPathComponent("notes.md..path2"))
            try Data("theirs".utf8).write(to: synced.appendingPathComponent("notes.md..path1"))
            let versions = try FileVersion.versionsOfItem(at: item)
            #expect(versions.first == first)  // the oldest
            #expect(versions.filter(\.isLocal).count == 1)
            #expect(versions.count == 3)
            #expect(FileVersion.unresolvedConflictVersionsOfItem(at: item)?.count == 2)
            // Nothing of the store is in the synced folder.
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: synced.path).sorted() == [
                    "notes.md", "notes.md..path1", "notes.md..path2",
                ]
            )

            // Revert to the first draft; the version stays.
            try first.replaceItem(at: item)
            #expect(text(item) == "first draft")
            #expect(FileVersion.otherVersionsOfItem(at: item)?.contains(first) == true)

            // A version made by moving another file's content: that file is gone.
            let scratch = directory("scratch.md")
            try Data("scratch".utf8).write(to: scratch)
            let moved = try FileVersion.addOfItem(at: item, withContentsOf: scratch, options: .byMoving)
            #expect(!FileManager.default.fileExists(atPath: scratch.path))
            #expect(text(moved.url) == "scratch")

            try first.remove()
            #expect(FileVersion.otherVersionsOfItem(at: item)?.contains(first) == false)
            try FileVersion.removeOtherVersionsOfItem(at: item)
            #expect(FileVersion.otherVersionsOfItem(at: item)?.isEmpty == true)
            #expect(text(item) == "first draft")
            #expect(try FileManager.default.contentsOfDirectory(atPath: synced.path) == ["notes.md"])
        }
    }

    @Test("Two items never share their kept versions")
    func separateItems() throws {
        try withStore { _ in
            let folder = directory.makeDirectory("two")
            let one = folder.appendingPathComponent("one.md")
            let two = folder.appendingPathComponent("two.md")
            try Data("1".utf8).write(to: one)
            try Data("2".utf8).write(to: two)
            try FileVersion.addOfItem(at: one, withContentsOf: one)
            try FileVersion.addOfItem(at: one, withContentsOf: one)
            try FileVersion.addOfItem(at: two, withContentsOf: two)
            #expect(FileVersion.otherVersionsOfItem(at: one)?.count == 2)
            #expect(FileVersion.otherVersionsOfItem(at: two)?.map { text($0.url) } == ["2"])
            #expect(FileVersion.otherVersionsOfItem(at: folder.appendingPathComponent("three.md"))?.isEmpty == true)
        }
    }
}
