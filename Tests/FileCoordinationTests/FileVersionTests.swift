import ConcordSystem
import ConcordTestSupport
import Foundation
import Testing

@testable import FileCoordination

@Suite("File versions: engines' copies found, listed, resolved and removed")
struct FileVersionTests {
    let directory = TemporaryDirectory("versions")

    /// Writes `text` into `name` in `folder` as an engine does: a temporary file renamed into place.
    @discardableResult
    func place(_ name: String, _ text: String, in folder: URL, modified: Date? = nil) throws -> URL {
        let url = folder.appendingPathComponent(name)
        let staging = folder.appendingPathComponent(".engine-\(UUID().uuidString).tmp")
        try Data(text.utf8).write(to: staging)
        if let modified {
            try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: staging.path)
        }
        try FileSystem.rename(staging.path, to: url.path)
        return url
    }

    func names(_ versions: [FileVersion]?) -> [String] { (versions ?? []).map { $0.url.lastPathComponent } }

    func text(_ url: URL) -> String? { (try? Data(contentsOf: url)).map { String(decoding: $0, as: UTF8.self) } }

    @Test(
        "Each engine's spelling is read as a copy of its item, with the date and device it carries",
        arguments: spellings
    )
    func spelling(_ spelling: Spelling) throws {
        let (naming, match) = try #require(ConflictNaming.firstMatch(spelling.copy, in: ConflictNaming.builtIn))
        #expect(naming.engine == spelling.engine)
        #expect(match.originalName == spelling.original)
        #expect(match.savingComputer == spelling.device)
        #expect(match.isConflict == spelling.isConflict)
        let date = match.dateComponents
        let fields = [date?.year, date?.month, date?.day, date?.hour, date?.minute, date?.second].compactMap { $0 }
        #expect(fields == spelling.date)
    }

    @Test("Each engine's spelling is listed as a version of its item, with the item beside it", arguments: spellings)
    func spellingListed(_ spelling: Spelling) throws {
        let folder = directory.makeDirectory(UUID().uuidString)
        try place(spelling.original, "mine", in: folder)
        try place(spelling.copy, "theirs", in: folder)
        let versions = try FileVersion.versionsOfItem(at: folder.appendingPathComponent(spelling.original))
        #expect(names(versions) == [spelling.copy])
        #expect(versions.first?.engine == spelling.engine)
        #expect(versions.first?.isConflict == spelling.isConflict)
        #expect(versions.first?.localizedNameOfSavingComputer == spelling.device)
    }

    @Test("Names that only look like copies are not read as any engine's", arguments: lookalikes)
    func lookalike(_ name: String) {
        #expect(ConflictNaming.firstMatch(name, in: ConflictNaming.builtIn) == nil)
    }

    @Test("A well-spelled copy of an item that is not there is no version; nor is a folder")
    func copyOfNothing() throws {
        let folder = directory.makeDirectory("nothing")
        try place("notes.sync-conflict-20261124-101500-ABCDEF1.md", "orphan", in: folder)
        try place("other.txt", "x", in: folder)
        #expect(try FileVersion.versionsOfItem(at: folder.appendingPathComponent("notes.md")).isEmpty)
        #expect(FileVersion.currentVersionOfItem(at: folder.appendingPathComponent("notes.md")) == nil)

        // The item appears: the copy is its version now.
        try place("notes.md", "mine", in: folder)
        #expect(names(FileVersion.otherVersionsOfItem(at: folder.appendingPathComponent("notes.md"))).count == 1)

        // A directory named like a copy is somebody's directory.
        _ = directory.makeDirectory("nothing", "notes (Ann's conflicted copy 2026-11-24).md")
        #expect(names(FileVersion.otherVersionsOfItem(at: folder.appendingPathComponent("notes.md"))).count == 1)
    }

    @Test("An item's versions: its copies only, oldest first, conflicts and backups told apart")
    func listing() throws {
        let folder = directory.makeDirectory("listing")
        let item = try place("notes.md", "current", in: folder)
        let base = Date(timeIntervalSince1970: 1_790_000_000)
        try place(
            "notes (Ann's conflicted copy 2026-11-24).md",
            "ann",
            in: folder,
            modified: base.addingTimeInterval(20)
        )
        try place("notes.sync-conflict-20261124-101500-ABCDEF1.md", "st", in: folder, modified: base)
        try place(".bak.1.notes.md", "backup", in: folder, modified: base.addingTimeInterval(10))
        try place("todo.sync-conflict-20261124-101500-ABCDEF1.md", "other item's", in: folder)
        try place("todo.md", "other item", in: folder)
        try place("notes.md.txt", "unrelated", in: folder)

        let versions = try #require(FileVersion.otherVersionsOfItem(at: item))
        #expect(
            names(versions) == [
                "notes.sync-conflict-20261124-101500-ABCDEF1.md", ".bak.1.notes.md",
                "notes (Ann's conflicted copy 2026-11-24).md",
            ]
        )
        #expect(versions.map(\.isConflict) == [true, false, true])
        #expect(versions.map(\.localizedNameOfSavingComputer) == ["ABCDEF1", nil, "Ann"])
        #expect(versions.allSatisfy { $0.itemURL == item && !$0.isCurrent })
        #expect(versions[0].modificationDate == base)
        #expect(
            names(FileVersion.unresolvedConflictVersionsOfItem(at: item)) == [
                "notes.sync-conflict-20261124-101500-ABCDEF1.md", "notes (Ann's conflicted copy 2026-11-24).md",
            ]
        )

        let current = try #require(FileVersion.currentVersionOfItem(at: item))
        #expect(current.isCurrent && !current.isConflict && current.isResolved)
        #expect(current.url == item)
    }

    @Test("rclone bisync before 1.66 renames both sides: each is a version of the item that is gone")
    func bothSidesRenamed() throws {
        let folder = directory.makeDirectory("rclone")
        try place("notes.md..path1", "one", in: folder)
        try place("notes.md..path2", "two", in: folder)
        try place("lonely.md..path1", "no other side", in: folder)
        let item = folder.appendingPathComponent("notes.md")
        #expect(names(FileVersion.otherVersionsOfItem(at: item)).sorted() == ["notes.md..path1", "notes.md..path2"])
        #expect(FileVersion.currentVersionOfItem(at: item) == nil)
        #expect(try FileVersion.versionsOfItem(at: folder.appendingPathComponent("lonely.md")).isEmpty)
    }

    @Test("An app adds its own engine's naming")
    func customNaming() throws {
        let naming = ConflictNaming(engine: "MySync") { name in
            let parts = name.components(separatedBy: "~conflict~")
            guard parts.count == 2, !parts[0].isEmpty else { return nil }
            return ConflictNaming.Match(originalName: parts[0], savingComputer: parts[1])
        }
        let folder = directory.makeDirectory("custom")
        let item = try place("notes.md", "mine", in: folder)
        try place("notes.md~conflict~laptop", "theirs", in: folder)
        #expect(try FileVersion.versionsOfItem(at: item).isEmpty)
        let versions = try FileVersion.versionsOfItem(at: item, namings: [naming] + ConflictNaming.builtIn)
        #expect(names(versions) == ["notes.md~conflict~laptop"])
        #expect(versions.first?.engine == "MySync")
        #expect(versions.first?.localizedNameOfSavingComputer == "laptop")
        // A naming that names the file itself, or a path, reads nothing.
        let selfish = ConflictNaming(engine: "Selfish") { ConflictNaming.Match(originalName: $0) }
        #expect(selfish.match("notes.md") == nil)
        let pathy = ConflictNaming(engine: "Pathy") { _ in ConflictNaming.Match(originalName: "../notes.md") }
        #expect(pathy.match("notes.md~x") == nil)
    }

    @Test("Marking a conflict resolved is seen by the next listing, and not by a new copy of the same name")
    func resolution() throws {
        let folder = directory.makeDirectory("resolution")
        let item = try place("notes.md", "current", in: folder)
        let copyName = "notes (conflicted copy 2026-11-24 101500).md"
        try place(copyName, "theirs", in: folder)
        let version = try #require(FileVersion.unresolvedConflictVersionsOfItem(at: item)?.first)
        #expect(!version.isResolved)
        version.isResolved = true
        #expect(version.isResolved)
        #expect(FileVersion.unresolvedConflictVersionsOfItem(at: item)?.isEmpty == true)
        #expect(names(FileVersion.otherVersionsOfItem(at: item)) == [copyName])
        #expect(FileVersion.otherVersionsOfItem(at: item)?.first?.isResolved == true)

        try version.setResolved(false)
        #expect(names(FileVersion.unresolvedConflictVersionsOfItem(at: item)) == [copyName])
        try version.setResolved(true)

        // The engine brings another conflict under the same name: a new, unresolved version.
        try FileManager.default.removeItem(at: folder.appendingPathComponent(copyName))
        try place(copyName, "theirs again", in: folder)
        #expect(names(FileVersion.unresolvedConflictVersionsOfItem(at: item)) == [copyName])
        // The old version refuses to act on content nobody looked at.
        #expect(throws: FileCoordinationError.self) { try version.setResolved(true) }
    }

    @Test("A resolution mark outlives its copy for a while, then marking sweeps it away")
    func staleMarksSwept() throws {
        let folder = directory.makeDirectory("sweep")
        try place("notes.md", "current", in: folder)
        let gone = try place("notes (conflict_on_2026-11-24).md", "theirs", in: folder)
        let kept = try place("notes (conflict #1_on_2026-11-24).md", "theirs too", in: folder)
        for version in FileVersion.otherVersionsOfItem(at: folder.appendingPathComponent("notes.md")) ?? [] {
            try version.setResolved(true)
        }
        let marks = try VersionResolutions.directory()
        let goneMark = marks + "/" + VersionResolutions.markName(for: VersionResolutions.canonical(gone.path))
        let keptMark = marks + "/" + VersionResolutions.markName(for: VersionResolutions.canonical(kept.path))
        try FileManager.default.removeItem(at: gone)
        VersionResolutions.sweep(marks)
        #expect(FileManager.default.fileExists(atPath: goneMark))  // still young
        VersionResolutions.sweep(marks, now: Date().addingTimeInterval(VersionResolutions.staleAfter + 5))
        #expect(!FileManager.default.fileExists(atPath: goneMark))
        #expect(FileManager.default.fileExists(atPath: keptMark))
        try FileManager.default.removeItem(atPath: keptMark)
    }

    @Test("Keeping a version replaces the item's content atomically, and by moving ends the copy")
    func replacing() throws {
        let folder = directory.makeDirectory("replacing")
        let item = try place("notes.md", "mine", in: folder)
        try place("notes.sync-conflict-20261124-101500-ABCDEF1.md", "theirs", in: folder)
        try place("notes (Ann's conflicted copy 2026-11-24).md", "ann's", in: folder)
        let versions = try FileVersion.versionsOfItem(at: item)
        let syncthing = try #require(versions.first { $0.engine == "Syncthing" })
        let dropbox = try #require(versions.first { $0.engine == "Dropbox" })

        #expect(try syncthing.replaceItem(at: item) == item)
        #expect(text(item) == "theirs")
        #expect(text(syncthing.url) == "theirs")  // kept as a version

        try dropbox.replaceItem(at: item, options: .byMoving)
        #expect(text(item) == "ann's")
        #expect(!FileManager.default.fileExists(atPath: dropbox.url.path))
        #expect(names(FileVersion.otherVersionsOfItem(at: item)) == [syncthing.url.lastPathComponent])

        // No temporary file is left for an engine to carry.
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(left.sorted() == ["notes.md", "notes.sync-conflict-20261124-101500-ABCDEF1.md"])

        // A version that changed since it was listed replaces nothing.
        try place(syncthing.url.lastPathComponent, "changed by the engine", in: folder)
        #expect(throws: FileCoordinationError.self) { try syncthing.replaceItem(at: item) }
        #expect(text(item) == "ann's")
    }

    @Test("Removing versions removes the engine's copies and nothing else")
    func removal() throws {
        let folder = directory.makeDirectory("removal")
        let item = try place("notes.md", "mine", in: folder)
        try place("notes.md..path1", "one", in: folder)
        try place("notes (conflict_on_2026-11-24).md", "unison's", in: folder)
        try place("notes_conflict-20261124-101500.md", "owncloud's", in: folder)
        try place("todo.md", "unrelated", in: folder)
        try place("todo (conflict_on_2026-11-24).md", "another item's copy", in: folder)

        let current = try #require(FileVersion.currentVersionOfItem(at: item))
        let error = try #require(throws: FileCoordinationError.self) { try current.remove() }
        #expect(error.code == .invalidRequest)

        let unison = try #require(FileVersion.otherVersionsOfItem(at: item)?.first { $0.engine == "unison" })
        try unison.remove()
        #expect(!FileManager.default.fileExists(atPath: unison.url.path))
        #expect(FileVersion.otherVersionsOfItem(at: item)?.count == 2)

        // A copy that changed since it was listed stays.
        let stale = try #require(FileVersion.otherVersionsOfItem(at: item)?.first { $0.engine == "rclone bisync" })
        try place("notes.md..path1", "rewritten", in: folder)
        #expect(throws: FileCoordinationError.self) { try stale.remove() }
        #expect(text(stale.url) == "rewritten")

        try FileVersion.removeOtherVersionsOfItem(at: item)
        #expect(FileVersion.otherVersionsOfItem(at: item)?.isEmpty == true)
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(left == ["notes.md", "todo (conflict_on_2026-11-24).md", "todo.md"])
        #expect(text(item) == "mine")
    }
}
