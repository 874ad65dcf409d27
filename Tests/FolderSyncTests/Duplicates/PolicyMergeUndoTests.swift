import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// A uniqueness policy whose merge changes the winner: notes alike by title, the winner taking
/// the higher rank and the pin of either.
struct MergingNotes: UniquenessPolicy {
    var entityName: String { "Note" }
    var uniqueness: Uniqueness { .key(["title"]) }
    func merge(_ loser: Record, into winner: inout Record, in context: ObjectContext) throws {
        if case .integer(let theirs) = loser["rank"], case .integer(let ours) = winner["rank"], theirs > ours {
            winner["rank"] = .integer(theirs)
        }
        if loser["pinned"] == .boolean(true) { winner["pinned"] = .boolean(true) }
    }
}

/// A uniqueness policy whose merge sets a relationship: notes alike by title, the winner moving
/// into the loser's folder.
struct FolderTakingNotes: UniquenessPolicy {
    var entityName: String { "Note" }
    var uniqueness: Uniqueness { .key(["title"]) }
    func merge(_ loser: Record, into winner: inout Record, in context: ObjectContext) throws {
        if let folder = loser.toOne["folder"] { winner.toOne["folder"] = folder }
    }
}

@Suite("A policy's merge undone")
struct PolicyMergeUndoTests {
    static let notes = (
        winner: ObjectID(entity: "Note", uuid: DuplicateRedirectTests.winner.uuid),
        loser: ObjectID(entity: "Note", uuid: DuplicateRedirectTests.loser.uuid)
    )

    /// Devices `names` with ``MergingNotes``: alpha makes the winner titled "x" ranked 1, beta the
    /// loser titled "x" ranked 5 (pinned or not); nothing delivered yet.
    static func alikeNotes(_ names: [String], loserPinned: Bool) throws -> SyncTestBench {
        let bench = SyncTestBench()
        for name in names { try bench.addDevice(name).coordinator.policies.register(MergingNotes()) }
        try bench.edit("alpha") { context in
            _ = try context.insert(
                entity: "Note",
                id: notes.winner,
                values: ["title": .string("x"), "rank": .integer(1)]
            )
        }
        try bench.edit("beta") { context in
            _ = try context.insert(
                entity: "Note",
                id: notes.loser,
                values: ["title": .string("x"), "rank": .integer(5), "pinned": .boolean(loserPinned)]
            )
        }
        return bench
    }

    @Test(
        "a duplicate that stops being one takes back what the policy merged into the winner, on the devices that merged it: all end with the same winner"
    )
    func mergeUndoneWithTheRemoval() throws {
        let bench = try Self.alikeNotes(["alpha", "beta", "gamma"], loserPinned: true)
        let notes = Self.notes
        // alpha and beta see both and fold the loser into the winner; gamma sees only the loser.
        try bench.deliver("alpha", [1], to: "beta")
        try bench.deliver("beta", [1], to: "alpha")
        try bench.deliver("beta", [1], to: "gamma")
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            let winner = try #require(try bench[name].store.records(with: [notes.winner]).first)
            #expect(winner["rank"] == .integer(5) && winner["pinned"] == .boolean(true), "\(name) merged: \(winner)")
        }
        // gamma retitles the loser: the two are not alike any more.
        try bench.update("gamma", notes.loser, ["title": .string("y")])
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "beta", "gamma"] {
            let records = try bench[name].store.records(with: [notes.winner, notes.loser])
            let winner = try #require(records.first { $0.id == notes.winner }, "\(name)")
            #expect(winner["rank"] == .integer(1) && winner["pinned"] == .boolean(false), "\(name): \(winner)")
            #expect(records.first { $0.id == notes.loser }?["title"] == .string("y"), "\(name)")
        }
        #expect(try bench.contents("alpha") == bench.contents("gamma"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }

    @Test("a write to the winner after the merge stays, and the merge is made again over it")
    func laterWriteToTheWinnerStays() throws {
        let bench = try Self.alikeNotes(["alpha", "beta"], loserPinned: false)
        let notes = Self.notes
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        // alpha's user pins the (merged) winner: a write that stays; the loser is still alike.
        try bench.update("alpha", notes.winner, ["pinned": .boolean(true)])
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            let records = try bench[name].store.records(with: [notes.winner, notes.loser])
            #expect(records.map(\.id) == [notes.winner], "\(name): the loser is still folded")
            let winner = try #require(records.first)
            #expect(winner["pinned"] == .boolean(true) && winner["rank"] == .integer(5), "\(name): \(winner)")
        }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    /// alpha makes the winner note titled "x" with `winner` (its folder and tags, made with it);
    /// beta the loser titled "x" with `loser`; gamma sees only beta's log, alpha and beta fold the
    /// loser into the winner; then gamma retitles the loser, so the two are not alike any more.
    /// Returns the bench after everything is delivered and imported.
    static func mergedThenParted(
        _ policy: any UniquenessPolicy,
        winner: (folder: ObjectID?, tag: ObjectID),
        loser: (folder: ObjectID?, tag: ObjectID),
        merged check: (Record) -> Bool
    ) throws -> SyncTestBench {
        let bench = SyncTestBench()
        for name in ["alpha", "beta", "gamma"] { try bench.addDevice(name).coordinator.policies.register(policy) }
        for (device, id, made) in [("alpha", notes.winner, winner), ("beta", notes.loser, loser)] {
            _ = try bench.edit(device) { context in
                if let folder = made.folder {
                    _ = try context.insert(entity: "Folder", id: folder, values: ["name": .string(device)])
                }
                _ = try context.insert(entity: "Tag", id: made.tag, values: ["label": .string(device)])
                var note = try context.insert(entity: "Note", id: id, values: ["title": .string("x")])
                note.toOne["folder"] = made.folder
                note.toMany["tags"] = [made.tag]
                try context.update(note)
            }
        }
        try bench.deliver("alpha", [1], to: "beta")
        try bench.deliver("beta", [1], to: "alpha")
        try bench.deliver("beta", [1], to: "gamma")
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            let records = try bench[name].store.records(with: [notes.winner, notes.loser])
            #expect(records.count == 1 && records.allSatisfy(check), "\(name) merged: \(records)")
        }
        try bench.update("gamma", notes.loser, ["title": .string("y")])
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        #expect(try bench.contents("alpha") == bench.contents("gamma"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
        return bench
    }

    static let folders = (
        winner: ObjectID(entity: "Folder", uuid: DuplicateRedirectTests.winner.uuid),
        loser: ObjectID(entity: "Folder", uuid: DuplicateRedirectTests.loser.uuid)
    )
    static let tags = (
        winner: ObjectID(entity: "Tag", uuid: DuplicateRedirectTests.winner.uuid),
        loser: ObjectID(entity: "Tag", uuid: DuplicateRedirectTests.loser.uuid)
    )

    @Test(
        "a duplicate that stops being one takes back the relationships the framework moved to the winner (an empty to-one, the to-many elements): all devices end alike"
    )
    func relationshipsTakenOverGoBack() throws {
        let bench = try Self.mergedThenParted(
            MergingNotes(),
            winner: (nil, Self.tags.winner),
            loser: (Self.folders.loser, Self.tags.loser)
        ) { $0.toOne["folder"] == Self.folders.loser && $0.toMany["tags"] == [Self.tags.winner, Self.tags.loser] }
        for name in ["alpha", "beta", "gamma"] {
            let records = try bench[name].store.records(with: [Self.notes.winner, Self.notes.loser])
            let winner = try #require(records.first { $0.id == Self.notes.winner }, "\(name)")
            let loser = try #require(records.first { $0.id == Self.notes.loser }, "\(name)")
            #expect(winner.toOne["folder"] == nil && winner.toMany["tags"] == [Self.tags.winner], "\(name): \(winner)")
            #expect(loser.toOne["folder"] == Self.folders.loser && loser.toMany["tags"] == [Self.tags.loser], "\(name)")
        }
    }

    @Test("a duplicate that stops being one takes back the relationship a policy's merge set on the winner")
    func relationshipSetByTheMergeGoesBack() throws {
        let bench = try Self.mergedThenParted(
            FolderTakingNotes(),
            winner: (Self.folders.winner, Self.tags.winner),
            loser: (Self.folders.loser, Self.tags.loser)
        ) { $0.toOne["folder"] == Self.folders.loser }
        for name in ["alpha", "beta", "gamma"] {
            let records = try bench[name].store.records(with: [Self.notes.winner, Self.notes.loser])
            let winner = try #require(records.first { $0.id == Self.notes.winner }, "\(name)")
            #expect(winner.toOne["folder"] == Self.folders.winner, "\(name): \(winner)")
            let folder = try #require(try bench[name].store.records(with: [Self.folders.winner]).first, "\(name)")
            #expect(folder.toMany["notes"] == [Self.notes.winner], "\(name): \(folder)")
        }
    }

    /// Folder `n` (a fixed id: ids order the duplicates and their groups).
    static func folder(_ n: Int) -> ObjectID {
        ObjectID(entity: "Folder", uuid: UUID(uuidString: String(format: "00000000-0000-0000-0000-%012d", n))!)
    }

    /// Makes folders on `device`: id number, name and parent.
    static func makeFolders(_ bench: SyncTestBench, _ device: String, _ folders: [(Int, String, Int?)]) throws {
        _ = try bench.edit(device) { context in
            for (n, name, parent) in folders {
                var folder = try context.insert(entity: "Folder", id: folder(n), values: ["name": .string(name)])
                folder.toOne["parent"] = parent.map(Self.folder)
                try context.update(folder)
            }
        }
    }

    @Test(
        "a duplicate whose parent was moved to another group's winner in the same import gets it back when that removal is undone, and so does its own winner: all devices end alike"
    )
    func referenceMovedOffARemovedDuplicateGoesBackInItsGhost() throws {
        let bench = try DuplicateRedirectTests.bench(["alpha", "beta", "gamma"])
        // Groups resolve in the order of their winners: "p" (1, 3) before "x" (2, 4), so the
        // loser 4's parent moves from 3 to 1 before 4 itself is folded into 2.
        try Self.makeFolders(bench, "alpha", [(1, "p", nil), (2, "x", nil)])
        try Self.makeFolders(bench, "beta", [(3, "p", nil), (4, "x", 3)])
        try bench.deliver("beta", [1], to: "gamma")
        try bench.importOn("gamma")
        try bench.deliver("alpha", [1], to: "beta")
        try bench.deliver("beta", [1], to: "alpha")
        for name in ["alpha", "beta"] {
            try bench.importOn(name)
            let records = try bench[name].store.records(with: [Self.folder(2), Self.folder(4)])
            #expect(records.map(\.id) == [Self.folder(2)], "\(name)")
            #expect(records.first?.toOne["parent"] == Self.folder(1), "\(name)")
        }
        // gamma renames 3, which alpha and beta removed: it is not a duplicate any more.
        try bench.update("gamma", Self.folder(3), ["name": .string("q")])
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "beta", "gamma"] {
            let winner = try #require(try bench[name].store.records(with: [Self.folder(2)]).first, "\(name)")
            #expect(winner.toOne["parent"] == Self.folder(3), "\(name): \(winner)")
        }
        #expect(try bench.contents("alpha") == bench.contents("gamma"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }

    /// alpha holds folder 4 "x" under 1 "p"; beta makes 2 "x". alpha saves `edit` while an
    /// import of beta's folder folds 4 into 2 between the save's validation and its commit; then
    /// everything is delivered and imported.
    static func foldedDuringASave(_ edit: (ObjectContext) throws -> Void) throws -> SyncTestBench {
        let bench = try DuplicateRedirectTests.bench(["alpha", "beta"])
        try Self.makeFolders(bench, "alpha", [(1, "p", nil), (4, "x", 1)])
        try Self.makeFolders(bench, "beta", [(2, "x", nil)])
        try bench.deliver("beta", [1], to: "alpha")
        #expect(try ImportBeforeCommit.racing(bench, "alpha", edit).imported == 1, "the import ran inside the save")
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        return bench
    }

    @Test(
        "a local deletion of a record another process's import removed as a duplicate after the save read it undoes what the merge moved into the winner"
    )
    func deletionOfADuplicateRemovedBeforeTheCommitUndoesTheMerge() throws {
        // Another process's import folds 4 into 2 (2 takes its parent) after this save read 4.
        let bench = try Self.foldedDuringASave { context in try context.delete(Self.folder(4)) }
        for name in ["alpha", "beta"] {
            let records = try bench[name].store.records(with: [Self.folder(2), Self.folder(4)])
            #expect(records.map(\.id) == [Self.folder(2)], "\(name): \(records)")
            #expect(records.first?.toOne["parent"] == nil, "\(name): the deleted folder's parent is not kept")
        }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test(
        "a local rename of a record another process's import removed as a duplicate after the save read it is kept: the record comes back renamed on every device"
    )
    func updateOfADuplicateRemovedBeforeTheCommitIsKept() throws {
        // Another process's import folds 4 into 2 after this save read 4; the save renames it.
        let bench = try Self.foldedDuringASave { context in
            var folder = try #require(try context.record(with: Self.folder(4)))
            folder["name"] = .string("y")
            try context.update(folder)
        }
        for name in ["alpha", "beta"] {
            let records = try bench[name].store.records(with: [Self.folder(2), Self.folder(4)])
            #expect(records.map(\.id) == [Self.folder(2), Self.folder(4)], "\(name): \(records)")
            #expect(records.last?["name"] == .string("y") && records.last?.toOne["parent"] == Self.folder(1), "\(name)")
            #expect(records.first?.toOne["parent"] == nil, "\(name): the merge is undone")
        }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test(
        "a winner that points at its own duplicate takes the duplicate's parent, and a baseline carries it as its logs made it: a device that starts from the baseline merges alike, and undoes alike"
    )
    func winnerPointingAtItsDuplicateThroughABaseline() throws {
        let bench = try DuplicateRedirectTests.bench(["alpha", "beta"])
        try Self.makeFolders(bench, "alpha", [(1, "p", nil), (4, "x", 1)])
        try bench.deliverEverything()
        try bench.importOn("beta")
        // beta files a folder "y" under 4, then names it "x" too: 2 wins, and 4 is folded into it.
        try Self.makeFolders(bench, "beta", [(2, "y", 4)])
        try bench.update("beta", Self.folder(2), ["name": .string("x")])
        // (An import with something to apply resolves: alpha makes a folder of its own.)
        try Self.makeFolders(bench, "alpha", [(9, "q", nil)])
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        for name in ["alpha", "beta"] {
            let records = try bench[name].store.records(with: [Self.folder(2), Self.folder(4)])
            #expect(records.map(\.id) == [Self.folder(2)], "\(name): \(records)")
            #expect(records.first?.toOne["parent"] == Self.folder(1), "\(name): the loser's parent, taken over")
        }
        // Both acknowledge and compact: their logs fold into baselines; gamma joins from them.
        for (author, viewer) in [("alpha", "beta"), ("beta", "alpha")] {
            try bench[author].sync.publishAcknowledgement()
            let file = bench.logURL(author, 1, in: author).deletingLastPathComponent()
                .appendingPathComponent("applied.json")
            try bench.place(Data(contentsOf: file), name: "applied.json", author: author, in: viewer)
        }
        var compacted = 0
        for name in ["alpha", "beta"] { compacted += try bench[name].sync.compact() }
        #expect(compacted == 4, "every log folded")
        let gamma = try bench.addDevice("gamma")
        gamma.coordinator.policies.register(Deduplicate("Folder", .key(["name"])))
        gamma.coordinator.policies.register(ClearMissingReferences("Note"))
        try BaselineCatchUpTests.deliverBaselines(bench, of: "beta", to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench.contents("gamma") == bench.contents("beta"))
        // alpha renames the winner: the fold is undone everywhere, and 2 points at 4 again.
        try bench.update("alpha", Self.folder(2), ["name": .string("z")])
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "beta", "gamma"] {
            let records = try bench[name].store.records(with: [Self.folder(2), Self.folder(4)])
            #expect(records.map(\.id) == [Self.folder(2), Self.folder(4)], "\(name): \(records)")
            #expect(records.first?.toOne["parent"] == Self.folder(4), "\(name): \(records)")
        }
        #expect(try bench.contents("alpha") == bench.contents("gamma"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }
}
