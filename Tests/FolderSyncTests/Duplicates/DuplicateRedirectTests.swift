import ConcordTestSupport
import Foundation
import Persistence
import SyncTestKit
import Testing

@testable import FolderSync

/// A reference that arrives after its target was removed as a duplicate goes to the winner, the
/// same on every device; no repair policy ever sees it.
@Suite("Redirects for removed duplicates")
struct DuplicateRedirectTests {
    static let winner = ObjectID(entity: "Folder", uuid: UUID(uuidString: "00000000-0000-0000-0000-000000000001")!)
    static let loser = ObjectID(entity: "Folder", uuid: UUID(uuidString: "00000000-0000-0000-0000-000000000002")!)

    /// Devices whose folders are unique by name, and whose notes' dangling folders are cleared.
    /// alpha and beta, each having made a folder named "Work" (`alpha`'s and `beta`'s ids).
    static func workFolders(alpha: ObjectID, beta: ObjectID) throws -> SyncTestBench {
        let bench = try Self.bench(["alpha", "beta"])
        for (device, id) in [("alpha", alpha), ("beta", beta)] {
            try bench.edit(device) { context in
                _ = try context.insert(entity: "Folder", id: id, values: ["name": .string("Work")])
            }
        }
        return bench
    }

    static func bench(_ names: [String]) throws -> SyncTestBench {
        let bench = SyncTestBench()
        for name in names {
            let device = try bench.addDevice(name)
            device.coordinator.policies.register(Deduplicate("Folder", .key(["name"])))
            device.coordinator.policies.register(ClearMissingReferences("Note"))
        }
        return bench
    }

    /// Two tags: the winner and the loser when they carry the same label.
    static let tags = (
        winner: ObjectID(entity: "Tag", uuid: winner.uuid),
        loser: ObjectID(entity: "Tag", uuid: loser.uuid)
    )

    /// Devices whose tags are unique by label.
    static func tagBench(_ names: [String]) throws -> SyncTestBench {
        let bench = SyncTestBench()
        for name in names {
            try bench.addDevice(name).coordinator.policies.register(Deduplicate("Tag", .key(["label"])))
        }
        return bench
    }

    /// Makes folder `id` named "Work" on `name` and files a new note titled `title` into it.
    static func folderWithNote(
        _ bench: SyncTestBench,
        _ name: String,
        folder id: ObjectID,
        note title: String
    ) throws -> ObjectID {
        try bench.edit(name) { context in
            _ = try context.insert(entity: "Folder", id: id, values: ["name": .string("Work")])
        }
        let note = try #require(
            try bench.edit(name) { context in
                var note = try context.insert(entity: "Note", values: ["title": .string(title)])
                note.toOne["folder"] = id
                try context.update(note)
            }.first
        )
        return note.id
    }

    @Test(
        "the same folder made on two devices: a note filed into the losing one and arriving after it was removed lands in the winner everywhere"
    )
    func lateReferenceGoesToTheWinner() throws {
        let bench = try Self.bench(["alpha", "beta"])
        let first = try Self.folderWithNote(bench, "alpha", folder: Self.winner, note: "alpha's")
        let late = try Self.folderWithNote(bench, "beta", folder: Self.loser, note: "beta's")
        // beta gets alpha's folder and note: its own folder loses, its note moves to the winner.
        try bench.deliver("alpha", [1, 2], to: "beta")
        try bench.importOn("beta")
        // alpha gets beta's folder first (it loses and is removed), then beta's note.
        try bench.deliver("beta", [1], to: "alpha")
        try bench.importOn("alpha")
        #expect(try bench["alpha"].store.records(with: [Self.loser]).isEmpty)
        try bench.deliver("beta", [2], to: "alpha")
        try bench.importOn("alpha")
        #expect(
            try bench["alpha"].store.records(with: [late]).first?.toOne["folder"] == Self.winner,
            "redirected at import"
        )
        // Local saves validate what the imports left: nothing to repair on either side.
        for name in ["alpha", "beta"] { try bench.addNote(name, "\(name) later") }
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            let notes = try bench[name].store.records(with: [first, late])
            #expect(notes.count == 2 && notes.allSatisfy { $0.toOne["folder"] == Self.winner }, "\(name): \(notes)")
        }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test("a device that sees the note before either folder applies it to the loser, then relinks it with the others")
    func noteBeforeTheDuplicate() throws {
        let bench = try Self.bench(["alpha", "beta", "gamma"])
        _ = try Self.folderWithNote(bench, "alpha", folder: Self.winner, note: "alpha's")
        let late = try Self.folderWithNote(bench, "beta", folder: Self.loser, note: "beta's")
        try bench.deliver("beta", [1, 2], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [late]).first?.toOne["folder"] == Self.loser)
        try bench.deliver("alpha", [1, 2], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [late]).first?.toOne["folder"] == Self.winner)
        try bench.addNote("gamma", "gamma later")
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] { #expect(try bench.contents(name) == bench.contents("gamma")) }
        #expect(try bench["alpha"].store.records(with: [late]).first?.toOne["folder"] == Self.winner)
    }

    @Test(
        "a local save that files a note into a folder removed as a duplicate since the context read it files it into the winner"
    )
    func localReferenceToARemovedDuplicate() throws {
        let bench = try Self.workFolders(alpha: Self.winner, beta: Self.loser)
        // Beta's app reads its folder; meanwhile an import removes it as the losing duplicate.
        let context = ObjectContext(coordinator: bench["beta"].coordinator, origin: .local, name: "app")
        #expect(try context.record(with: Self.loser) != nil)
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        #expect(try bench["beta"].store.records(with: [Self.loser]).isEmpty)
        var note = try context.insert(entity: "Note", values: ["title": .string("filed late")])
        note.toOne["folder"] = Self.loser
        try context.update(note)
        try context.save()
        #expect(try bench["beta"].store.records(with: [note.id]).first?.toOne["folder"] == Self.winner)
    }
    @Test("a device that starts from a baseline folded after a duplicate was removed redirects to the winner too")
    func baselineCarriesRedirects() throws {
        let bench = try Self.bench(["alpha", "beta", "gamma"])
        try bench.edit("alpha") { context in
            _ = try context.insert(entity: "Folder", id: Self.winner, values: ["name": .string("Work")])
        }
        try bench.edit("beta") { context in
            _ = try context.insert(entity: "Folder", id: Self.loser, values: ["name": .string("Work")])
        }
        try bench.deliver("beta", [1], to: "alpha")
        try bench.importOn("alpha")
        #expect(try bench["alpha"].sync.replacement(forMissing: Self.loser) == Self.winner)
        try bench["alpha"].sync.publishAcknowledgement()
        _ = try bench["alpha"].sync.compact()
        try BaselineCatchUpTests.deliverBaselines(bench, of: "alpha", to: "gamma")
        #expect(try bench["gamma"].sync.startFromBaseline() > 0)
        #expect(try bench["gamma"].store.records(with: [Self.loser]).isEmpty)
        #expect(
            try bench["gamma"].sync.replacement(forMissing: Self.loser) == Self.winner,
            "the baseline carries the redirect"
        )
    }

    /// Renames `id` to `name` on device `device`.
    static func rename(_ bench: SyncTestBench, _ device: String, _ id: ObjectID, to name: String) throws {
        try bench.edit(device) { context in
            var folder = try #require(try context.record(with: id))
            folder["name"] = .string(name)
            try context.update(folder)
        }
    }

    /// Both folders named "Work" with a note each (alpha's wins), and gamma holding both, so that
    /// it removed beta's and moved beta's note. Returns beta's note.
    static func gammaRemovesBetasFolder(_ bench: SyncTestBench) throws -> ObjectID {
        _ = try folderWithNote(bench, "alpha", folder: winner, note: "alpha's")
        let betas = try folderWithNote(bench, "beta", folder: loser, note: "beta's")
        try bench.deliver("alpha", [1, 2], to: "gamma")
        try bench.deliver("beta", [1, 2], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [loser]).isEmpty, "removed as a duplicate")
        #expect(try bench["gamma"].store.records(with: [betas]).first?.toOne["folder"] == winner, "note moved")
        return betas
    }

    /// Every device gets every log; each then holds both folders, beta's note in beta's folder.
    static func expectBothFoldersEverywhere(_ bench: SyncTestBench, note: ObjectID) throws {
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "beta", "gamma"] {
            #expect(try bench[name].store.records(with: [winner, loser]).count == 2, "\(name) keeps both folders")
            #expect(try bench[name].store.records(with: [note]).first?.toOne["folder"] == loser, "\(name)")
        }
        #expect(try bench.contents("alpha") == bench.contents("gamma"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }

    @Test("a folder renamed after another device removed it as a duplicate comes back there, with its notes")
    func renamedDuplicateComesBack() throws {
        let bench = try Self.bench(["alpha", "beta", "gamma"])
        let betas = try Self.gammaRemovesBetasFolder(bench)
        // Beta renamed its folder before it ever saw alpha's: in the end the two are not alike.
        try Self.rename(bench, "beta", Self.loser, to: "Home")
        try bench.deliver("beta", [3], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [Self.loser]).first?["name"] == .string("Home"))
        #expect(try bench["gamma"].store.records(with: [betas]).first?.toOne["folder"] == Self.loser)
        try Self.expectBothFoldersEverywhere(bench, note: betas)
    }

    @Test(
        "a folder deleted on one device and written later on another, removed as a duplicate on a third (its note moved), is deleted everywhere, and the note names it again everywhere"
    )
    func deletedDuplicateTakesItsNoteBack() throws {
        let bench = try Self.bench(["alpha", "beta", "gamma", "delta"])
        _ = try Self.folderWithNote(bench, "alpha", folder: Self.winner, note: "alpha's")
        let betas = try Self.folderWithNote(bench, "beta", folder: Self.loser, note: "beta's")
        // delta has beta's folder, not the note filed into it, and deletes the folder.
        try bench.deliver("beta", [1], to: "delta")
        try bench.importOn("delta")
        try bench.edit("delta") { context in try context.delete(Self.loser) }
        // beta, which has not seen that, renames the folder and back (writes newer than the
        // deletion); gamma then holds it like alpha's, removes it as a duplicate and moves the
        // note to alpha's.
        try Self.rename(bench, "beta", Self.loser, to: "Home")
        try Self.rename(bench, "beta", Self.loser, to: "Work")
        try bench.deliver("alpha", [1, 2], to: "gamma")
        try bench.deliver("beta", [1, 2, 3, 4], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [betas]).first?.toOne["folder"] == Self.winner, "note moved")
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma", "delta"] { try bench.importOn(name) }
        for name in ["alpha", "beta", "gamma", "delta"] {
            #expect(try bench[name].store.records(with: [Self.loser]).isEmpty, "\(name): the folder is deleted")
            #expect(try bench[name].store.records(with: [betas]).first?.toOne["folder"] == Self.loser, "\(name)")
        }
        for name in ["alpha", "beta", "delta"] {
            #expect(try bench.contents(name) == bench.contents("gamma"), "\(name)")
        }
    }

    @Test(
        "a chain of removals (L into W, then W into V, each merge taking the other's parent) is undone link by link when L turns out deleted: V ends without L's parent, as on a device that never merged L"
    )
    func deletedLoserUndoesAChainOfMerges() throws {
        let ids = (1...4).map {
            ObjectID(entity: "Folder", uuid: UUID(uuidString: "00000000-0000-0000-0000-00000000000\($0)")!)
        }
        let (v, w, l, parent) = (ids[0], ids[1], ids[2], ids[3])
        let bench = try Self.bench(["alpha", "beta", "carol", "gamma", "delta"])
        try bench.edit("alpha") { context in
            _ = try context.insert(entity: "Folder", id: parent, values: ["name": .string("Parent")])
            var folder = try context.insert(entity: "Folder", id: l, values: ["name": .string("Work")])
            folder.toOne["parent"] = parent
            try context.update(folder)
        }
        try bench.edit("beta") { context in
            _ = try context.insert(entity: "Folder", id: w, values: ["name": .string("Work")])
        }
        try bench.edit("carol") { context in
            _ = try context.insert(entity: "Folder", id: v, values: ["name": .string("Work")])
        }
        // gamma merges L into W (W takes L's parent), then W into V (V takes it from W).
        try bench.deliver("alpha", [1], to: "gamma")
        try bench.deliver("beta", [1], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [w]).first?.toOne["parent"] == parent)
        try bench.deliver("carol", [1], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [v]).first?.toOne["parent"] == parent)
        // delta deletes L before it ever meets a likeness.
        try bench.deliver("alpha", [1], to: "delta")
        try bench.importOn("delta")
        try bench.edit("delta") { context in try context.delete(l) }
        try bench.deliverEverything()
        let names = ["alpha", "beta", "carol", "gamma", "delta"]
        for name in names { try bench.importOn(name) }
        for name in names {
            #expect(try bench[name].store.records(with: [l, w]).isEmpty, "\(name)")
            #expect(try bench[name].store.records(with: [v]).first?.toOne["parent"] == nil, "\(name)")
        }
        for name in names.dropLast() {
            #expect(try bench.contents(name) == bench.contents("delta"), "\(name)")
        }
    }

    @Test("a winner renamed by another device lets the duplicate removed in its favour come back")
    func renamedWinnerBringsTheDuplicateBack() throws {
        let bench = try Self.bench(["alpha", "beta", "gamma"])
        let betas = try Self.gammaRemovesBetasFolder(bench)
        try Self.rename(bench, "alpha", Self.winner, to: "Old")
        try bench.deliver("alpha", [3], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [Self.loser]).first?["name"] == .string("Work"))
        try Self.expectBothFoldersEverywhere(bench, note: betas)
    }

    @Test("a winner renamed on the device that removed its duplicate lets the duplicate come back at its next import")
    func locallyRenamedWinnerBringsTheDuplicateBack() throws {
        let bench = try Self.bench(["alpha", "beta", "gamma"])
        let betas = try Self.gammaRemovesBetasFolder(bench)
        try Self.rename(bench, "gamma", Self.winner, to: "Old")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [Self.loser]).first?["name"] == .string("Work"))
        #expect(try bench["gamma"].store.records(with: [betas]).first?.toOne["folder"] == Self.loser)
        try Self.expectBothFoldersEverywhere(bench, note: betas)
    }

    @Test("a tag relabelled after another device removed it as a duplicate comes back with its notes' elements")
    func relabelledTagComesBack() throws {
        let bench = try Self.tagBench(["alpha", "beta", "gamma"])
        let tags = (first: Self.tags.winner, second: Self.tags.loser)
        var notes: [ObjectID] = []
        for (device, tag) in [("alpha", tags.first), ("beta", tags.second)] {
            let note = try #require(
                try bench.edit(device) { context in
                    _ = try context.insert(entity: "Tag", id: tag, values: ["label": .string("urgent")])
                    var note = try context.insert(entity: "Note", values: ["title": .string(device)])
                    note.toMany["tags"] = [tag]
                    try context.update(note)
                }.first { $0.id.entity == "Note" }
            )
            notes.append(note.id)
        }
        try bench.deliver("alpha", [1], to: "gamma")
        try bench.deliver("beta", [1], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [notes[1]]).first?.toMany["tags"] == [tags.first])
        try bench.edit("beta") { context in
            var tag = try #require(try context.record(with: tags.second))
            tag["label"] = .string("later")
            try context.update(tag)
        }
        try bench.deliver("beta", [2], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [notes[1]]).first?.toMany["tags"] == [tags.second])
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "beta", "gamma"] {
            #expect(try bench[name].store.records(with: [tags.first, tags.second]).count == 2, "\(name)")
        }
        #expect(try bench.contents("alpha") == bench.contents("gamma"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }

    /// Delivers and imports everything on alpha and beta; then `note` carries only `tag` on both,
    /// and the two hold the same records.
    static func expectEverywhere(_ bench: SyncTestBench, _ note: ObjectID, taggedWith tag: ObjectID) throws {
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            #expect(try bench[name].store.records(with: [note]).first?.toMany["tags"] == [tag], "\(name)")
        }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    /// alpha makes tag "blue" (the winner), beta makes another "blue" (the loser) and a note
    /// tagged with it, each in a log of its own; nothing is exchanged yet.
    static func blueTags() throws -> (SyncTestBench, note: ObjectID) {
        let bench = try Self.tagBench(["alpha", "beta"])
        let tags = Self.tags
        try bench.edit("alpha") { context in
            _ = try context.insert(entity: "Tag", id: tags.winner, values: ["label": .string("blue")])
        }
        let note = try #require(
            try bench.edit("beta") { context in
                _ = try context.insert(entity: "Tag", id: tags.loser, values: ["label": .string("blue")])
                var note = try context.insert(entity: "Note", values: ["title": .string("tagged on beta")])
                note.toMany["tags"] = [tags.loser]
                try context.update(note)
            }.first { $0.id.entity == "Note" }
        ).id
        return (bench, note)
    }

    /// ``blueTags()``, exchanged and imported: each holds the winner, the note relinked to it.
    static func blueTagsFolded() throws -> (SyncTestBench, note: ObjectID) {
        let (bench, note) = try blueTags()
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        return (bench, note)
    }

    @Test(
        "a tag removed from a note on the device that relinked the note's duplicate tag to it stays removed everywhere, also when the winner changes later"
    )
    func removingARelinkedElementRemovesWhatItStandsFor() throws {
        let (bench, note) = try Self.blueTagsFolded()
        let tags = Self.tags
        for name in ["alpha", "beta"] {
            #expect(try bench[name].store.records(with: [note]).first?.toMany["tags"] == [tags.winner], "\(name)")
        }
        // Alpha's user takes the tag off: the note shows no "blue" tag, whichever element held it.
        try bench.edit("alpha") { context in
            var held = try #require(try context.record(with: note))
            held.toMany["tags"] = nil
            try context.update(held)
        }
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            let tagsNow = try bench[name].store.records(with: [note]).first?.toMany["tags"]
            #expect(tagsNow == nil, "\(name) after the removal: \(String(describing: tagsNow))")
        }
        // A later write to the winner undoes the duplicate's removal: the note still has no tag.
        try bench.edit("beta") { context in
            var tag = try #require(try context.record(with: tags.winner))
            tag["label"] = .string("navy")
            try context.update(tag)
        }
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            let tagsNow = try bench[name].store.records(with: [note]).first?.toMany["tags"]
            #expect(tagsNow == nil, "\(name) after the winner changed: \(String(describing: tagsNow))")
            #expect(try bench[name].store.records(with: [tags.winner, tags.loser]).count == 2, "\(name)")
        }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test(
        "a winner a local save changes, then a note that arrives holding its removed duplicate: the note gets the winner"
    )
    func lateNoteAfterTheWinnerChangedLocally() throws {
        let bench = try Self.tagBench(["alpha", "beta"])
        let tags = Self.tags
        func tagged(_ device: String, _ title: String, _ tag: ObjectID, creating: Bool) throws -> ObjectID {
            try #require(
                try bench.edit(device) { context in
                    if creating { _ = try context.insert(entity: "Tag", id: tag, values: ["label": .string("red")]) }
                    var note = try context.insert(entity: "Note", values: ["title": .string(title)])
                    note.toMany["tags"] = [tag]
                    try context.update(note)
                }.first { $0.id.entity == "Note" }
            ).id
        }
        _ = try tagged("alpha", "alpha's", tags.winner, creating: true)
        _ = try tagged("beta", "beta's first", tags.loser, creating: true)
        // Beta files a second note under its own tag before it hears of alpha's.
        let late = try tagged("beta", "beta's late", tags.loser, creating: false)
        try bench.deliver("beta", [1], to: "alpha")
        try bench.importOn("alpha")
        #expect(try bench["alpha"].store.records(with: [tags.loser]).isEmpty, "removed as the duplicate")
        // Alpha's user tags another note: the winner's set of notes changes, not what makes it
        // alike (its label), so its removals stand (nothing to undo and decide again).
        _ = try tagged("alpha", "alpha's second", tags.winner, creating: false)
        #expect(
            try !bench["alpha"].store.hasSyncMetadata(SyncMetadata.reconsider(tags.winner)),
            "a derived side changes no likeness"
        )
        try bench.importOn("alpha")
        #expect(try bench["alpha"].store.records(with: [tags.loser]).isEmpty, "removed again")
        #expect(try bench["alpha"].sync.replacement(forMissing: tags.loser) == tags.winner)
        try bench.deliver("beta", [2], to: "alpha")
        try bench.importOn("alpha")
        #expect(try bench["alpha"].store.records(with: [late]).first?.toMany["tags"] == [tags.winner])
        try Self.expectEverywhere(bench, late, taggedWith: tags.winner)
    }

    @Test(
        "a tag deleted on the device that removed its duplicate stays deleted everywhere: the duplicate does not come back"
    )
    func deletingAWinnerDeletesItsRemovedDuplicates() throws {
        let (bench, note) = try Self.blueTagsFolded()
        let tags = Self.tags
        // Alpha's user deletes the tag "blue".
        try bench.edit("alpha") { context in try context.delete(tags.winner) }
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            let left = try bench[name].store.fetch(FetchRequest(entity: "Tag"))
            #expect(left.isEmpty, "\(name) still has \(left)")
            #expect(try bench[name].store.records(with: [note]).first?.toMany["tags"] == nil, "\(name)")
        }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test(
        "a tag made again, under a new label, on a device that had removed it as a duplicate takes its notes' elements back there too"
    )
    func removedDuplicateMadeAgainLocallyTakesItsElementsBack() throws {
        let bench = try Self.tagBench(["alpha", "beta"])
        let tags = Self.tags
        let note = try #require(
            try bench.edit("alpha") { context in
                _ = try context.insert(entity: "Tag", id: tags.loser, values: ["label": .string("blue")])
                var note = try context.insert(entity: "Note", values: ["title": .string("tagged on alpha")])
                note.toMany["tags"] = [tags.loser]
                try context.update(note)
            }.first { $0.id.entity == "Note" }
        ).id
        try bench.edit("beta") { context in
            _ = try context.insert(entity: "Tag", id: tags.winner, values: ["label": .string("blue")])
        }
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            #expect(try bench[name].store.records(with: [note]).first?.toMany["tags"] == [tags.winner], "\(name)")
        }
        // Beta makes the removed tag's id again (a deterministic id), labelled otherwise: no
        // longer alike, and the note's element that stood for it goes back to it.
        try bench.edit("beta") { context in
            #expect(try context.record(with: tags.loser) == nil)
            _ = try context.insert(entity: "Tag", id: tags.loser, values: ["label": .string("green")])
        }
        try bench.importOn("beta")
        #expect(try bench["beta"].store.records(with: [note]).first?.toMany["tags"] == [tags.loser])
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        #expect(try bench["alpha"].store.records(with: [note]).first?.toMany["tags"] == [tags.loser])
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test(
        "an import that redirects a note to a winner and then applies the winner's deletion gives the note back its own tag"
    )
    func relinkAndUndoInOneImport() throws {
        let bench = try Self.tagBench(["alpha", "beta", "gamma"])
        let tags = Self.tags
        try bench.edit("beta") { context in
            _ = try context.insert(entity: "Tag", id: tags.winner, values: ["label": .string("blue")])
        }
        try bench.edit("alpha") { context in
            _ = try context.insert(entity: "Tag", id: tags.loser, values: ["label": .string("blue")])
        }
        try bench.deliver("alpha", [1], to: "gamma")
        try bench.deliver("beta", [1], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench["gamma"].store.records(with: [tags.loser]).isEmpty, "removed as the duplicate")
        // Alpha tags a note with its own tag; beta, which never saw alpha's, deletes its tag. Gamma
        // gets both in one import, alpha's first: the note is redirected to the winner, whose
        // deletion then undoes the removal in the same save.
        let note = try #require(
            try bench.edit("alpha") { context in
                var note = try context.insert(entity: "Note", values: ["title": .string("tagged on alpha")])
                note.toMany["tags"] = [tags.loser]
                try context.update(note)
            }.first
        ).id
        try bench.edit("beta") { context in try context.delete(tags.winner) }
        try bench.deliverEverything()
        #expect(try bench.importOn("gamma").logs == 2)
        #expect(try bench["gamma"].store.records(with: [note]).first?.toMany["tags"] == [tags.loser])
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        #expect(try bench.contents("alpha") == bench.contents("gamma"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }

    @Test(
        "a local save that tags a note with the winner leaves the removed duplicate removed and redirected after the next import decides again"
    )
    func reconsideredWinnerKeepsItsDuplicateRedirected() throws {
        let (bench, _) = try Self.blueTagsFolded()
        let tags = Self.tags
        let redirect = SyncMetadata.redirect(tags.loser)
        for name in ["alpha", "beta"] {
            #expect(try bench[name].store.hasSyncMetadata(redirect), "\(name)")
            // A note tagged with the winner here: its removals are undone and decided again.
            try bench.edit(name) { context in
                var note = try context.insert(entity: "Note", values: ["title": .string("later on \(name)")])
                note.toMany["tags"] = [tags.winner]
                try context.update(note)
            }
            try bench.importOn(name)
            #expect(try bench[name].store.records(with: [tags.loser]).isEmpty, "\(name)")
            #expect(try bench[name].store.hasSyncMetadata(redirect), "\(name)")
        }
        // A note that still names the loser arrives: it goes to the winner on both.
        let late = try #require(
            try bench.edit("beta") { context in
                var note = try context.insert(entity: "Note", values: ["title": .string("late")])
                note.toMany["tags"] = [tags.loser]
                try context.update(note)
            }.first { $0.id.entity == "Note" }
        ).id
        try Self.expectEverywhere(bench, late, taggedWith: tags.winner)
    }

    @Test(
        "a local save that changes the winners of two entities' removed duplicates leaves both removed and redirected after the next import"
    )
    func twoReconsideredWinnersKeepTheirDuplicatesRedirected() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] {
            let device = try bench.addDevice(name)
            device.coordinator.policies.register(Deduplicate("Folder", .key(["name"])))
            device.coordinator.policies.register(Deduplicate("Tag", .key(["label"])))
        }
        let tags = Self.tags
        for (name, folder, tag) in [("alpha", Self.winner, tags.winner), ("beta", Self.loser, tags.loser)] {
            try bench.edit(name) { context in
                _ = try context.insert(entity: "Folder", id: folder, values: ["name": .string("Work")])
                _ = try context.insert(entity: "Tag", id: tag, values: ["label": .string("blue")])
                var note = try context.insert(entity: "Note", values: ["title": .string("on \(name)")])
                note.toOne["folder"] = folder
                note.toMany["tags"] = [tag]
                try context.update(note)
            }
        }
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        let keys = [SyncMetadata.redirect(Self.loser), SyncMetadata.redirect(tags.loser)]
        for name in ["alpha", "beta"] {
            #expect(try bench[name].store.syncMetadata(keys).entries.count == 2, "\(name)")
            try bench.edit(name) { context in
                var note = try context.insert(entity: "Note", values: ["title": .string("later on \(name)")])
                note.toOne["folder"] = Self.winner
                note.toMany["tags"] = [tags.winner]
                try context.update(note)
            }
            try bench.importOn(name)
            #expect(try bench[name].store.records(with: [Self.loser, tags.loser]).isEmpty, "\(name)")
            #expect(try bench[name].store.syncMetadata(keys).entries.count == 2, "\(name)")
        }
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test(
        "sync stopped while an import runs (from its own event) still records the duplicates that import removes, and takes no part in saves once it is over"
    )
    func stopDuringAnImportKeepsItsDuplicateBookkeeping() throws {
        let bench = try Self.tagBench(["alpha", "beta"])
        let tags = Self.tags
        for (name, tag) in [("alpha", tags.winner), ("beta", tags.loser)] {
            try bench.edit(name) { context in
                _ = try context.insert(entity: "Tag", id: tag, values: ["label": .string("blue")])
            }
        }
        try bench.deliver("beta", [1], to: "alpha")
        // The app stops sync from an observer of the import's first event, on the importing
        // thread, as a command-line tool that is done does while live sync imports.
        let sync = bench["alpha"].sync
        let observer = NotificationCenter.default.addObserver(
            forName: .concordSyncEvent,
            object: sync,
            queue: nil
        ) { note in
            if case .importStarted = note.userInfo?["event"] as? SyncEvent { sync.stop() }
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        let report = try bench.importOn("alpha")
        #expect(report.logs == 1)
        let redirect = SyncMetadata.redirect(tags.loser)
        #expect(try bench["alpha"].store.records(with: [tags.loser]).isEmpty)
        #expect(
            try bench["alpha"].store.hasSyncMetadata(redirect),
            "the removal is recorded"
        )
        // Once the import is over, sync takes no part in saves any more.
        #expect(
            try bench.edit("alpha", export: false) { context in
                _ = try context.insert(entity: "Note", values: ["title": .string("after the stop")])
            }.count == 1
        )
        #expect(try sync.lastLocalSequence() == 1, "a save after the stop makes no log")
    }

    @Test(
        "a store that lost a record its history holds, or holds one its history removed, is reported; one in step is not"
    )
    func historyMismatchesAreReported() throws {
        let (bench, note) = try Self.blueTagsFolded()
        let tags = Self.tags
        for name in ["alpha", "beta"] { #expect(try bench[name].sync.historyMismatches().isEmpty, "\(name)") }
        let alpha = bench["alpha"]
        // Written behind sync's back: the note leaves the store, the removed duplicate comes back.
        let loser = Record(id: tags.loser, values: ["label": .string("blue")])
        try alpha.store.commit(StoreChanges(inserts: [loser], deletes: [note]))
        let mismatch = try alpha.sync.historyMismatches()
        #expect(mismatch.missing == [note])
        #expect(mismatch.gone == [tags.loser])
        #expect(mismatch.description.contains("\(note)"))
    }

    @Test(
        "a local save that files a note into a folder removed as a duplicate between its validation and its commit files it into the winner, as every other device reads it"
    )
    func referenceToADuplicateRemovedBeforeTheCommitGoesToTheWinner() throws {
        let bench = try Self.workFolders(alpha: Self.loser, beta: Self.winner)
        try bench.deliver("beta", [1], to: "alpha")
        let alpha = bench["alpha"]
        // Another process's import runs after this save validated and before it commits.
        let (saved, imported) = try ImportBeforeCommit.racing(bench, "alpha") { context in
            var note = try context.insert(entity: "Note", values: ["title": .string("filed")])
            note.toOne["folder"] = Self.loser
            try context.update(note)
        }
        #expect(imported == 1, "the import ran inside the save")
        let note = try #require(saved.first).id
        #expect(try alpha.store.records(with: [Self.loser]).isEmpty, "removed as the duplicate")
        #expect(try alpha.store.records(with: [note]).first?.toOne["folder"] == Self.winner)
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        #expect(try bench["beta"].store.records(with: [note]).first?.toOne["folder"] == Self.winner)
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test(
        "a local save that tags a note with a tag removed as a duplicate between its validation and its commit logs the tag the user chose: when the two stop being alike, the note keeps it on every device (soak seed 6016)"
    )
    func elementToADuplicateRemovedBeforeTheCommitIsLoggedAsWritten() throws {
        let bench = try Self.tagBench(["alpha", "beta"])
        let tags = Self.tags
        // alpha holds the loser and an untagged note; beta makes the winner, with the same label.
        let note = try #require(
            try bench.edit("alpha") { context in
                _ = try context.insert(entity: "Tag", id: tags.loser, values: ["label": .string("blue")])
                _ = try context.insert(entity: "Note", values: ["title": .string("to tag")])
            }.first { $0.id.entity == "Note" }
        ).id
        try bench.edit("beta") { context in
            _ = try context.insert(entity: "Tag", id: tags.winner, values: ["label": .string("blue")])
        }
        try bench.deliver("beta", [1], to: "alpha")
        // The user tags the note with the loser; another process's import removes the loser as
        // a duplicate before the save commits.
        let (_, imported) = try ImportBeforeCommit.racing(bench, "alpha") { context in
            try context.addTargets([tags.loser], forKey: "tags", of: note)
        }
        #expect(imported == 1, "the import ran inside the save")
        #expect(try bench["alpha"].store.records(with: [note]).first?.toMany["tags"] == [tags.winner])
        // beta relabels the winner: the two are alike no more, and the loser comes back.
        try bench.deliverEverything()
        try bench.importOn("beta")
        try bench.edit("beta") { context in
            var tag = try #require(try context.record(with: tags.winner))
            tag["label"] = .string("green")
            try context.update(tag)
        }
        try Self.expectEverywhere(bench, note, taggedWith: tags.loser)
        for name in ["alpha", "beta"] {
            #expect(try bench[name].store.records(with: [tags.winner, tags.loser]).count == 2, "\(name)")
        }
    }

    @Test(
        "an element a save's validation takes to the winner of its removed duplicate (the set held both) is no removal: every device keeps the note tagged, and the user's tag when the two stop being alike (soak seed 8107)"
    )
    func elementRedirectedByValidationIsNoRemoval() throws {
        let (bench, note) = try Self.blueTags()
        let tags = Self.tags
        try bench.deliver("alpha", [1], to: "beta")
        // beta tags the note with the loser again (its store shows it tagged) while another
        // process's import folds the loser into the winner: the set holds both.
        let (_, imported) = try ImportBeforeCommit.racing(bench, "beta") { context in
            try context.addTargets([tags.loser], forKey: "tags", of: note)
        }
        #expect(imported == 1, "the import ran inside the save")
        #expect(try bench["beta"].store.records(with: [note]).first?.toMany["tags"] == [tags.winner, tags.loser])
        // The next save's validation takes the loser to its winner.
        try bench.edit("beta") { context in try context.setValue("renamed", forKey: "title", of: note) }
        #expect(try bench["beta"].store.records(with: [note]).first?.toMany["tags"] == [tags.winner])
        try Self.expectEverywhere(bench, note, taggedWith: tags.winner)
        // The winner is relabelled: the two are alike no more, and the note has the user's tag.
        try bench.edit("alpha") { context in try context.setValue("green", forKey: "label", of: tags.winner) }
        try Self.expectEverywhere(bench, note, taggedWith: tags.loser)
    }

    @Test(
        "a local save that makes a folder and files a note into it, while another process's import deletes the note, leaves the new folder without it: its notes are what its owners say, as on every other device"
    )
    func newFolderDoesNotKeepANoteDeletedBeforeTheCommit() throws {
        let bench = try Self.bench(["alpha", "beta"])
        let note = try bench.addNote("beta", "soon gone")
        try bench.deliverEverything()
        try bench.importOn("alpha")
        _ = try bench.edit("beta") { context in try context.delete(note) }
        try bench.deliverEverything()
        let folder = ObjectID.random(entity: "Folder")
        let (_, imported) = try ImportBeforeCommit.racing(bench, "alpha") { context in
            _ = try context.insert(entity: "Folder", id: folder, values: ["name": .string("Work")])
            var held = try #require(try context.record(with: note))
            held.toOne["folder"] = folder
            try context.update(held)
        }
        #expect(imported == 1, "the import ran inside the save")
        let stored = try #require(try bench["alpha"].store.records(with: [folder]).first)
        #expect(stored.toMany["notes"] == nil, "\(stored)")
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }
}

extension ImportBeforeCommit {
    /// Saves `edit` on `device` with the device's own import landing between the save's
    /// validation and its commit; returns what the save committed and how many logs the import
    /// applied.
    static func racing(
        _ bench: SyncTestBench,
        _ device: String,
        _ edit: (ObjectContext) throws -> Void
    ) throws -> (saved: [Record], imported: Int) {
        let sync = bench[device].sync
        let racer = ImportBeforeCommit { try sync.importAvailable().logs }
        let saved = try ImportBeforeCommit.during(saveOf: bench[device].coordinator, sync: sync, racer: racer) {
            try bench.edit(device, edit)
        }
        return (saved, racer.imported)
    }
}
