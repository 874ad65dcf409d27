import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// Deleting a record that won over duplicates deletes the whole group on every device, whichever
/// device removed which duplicate and in whatever order the logs arrive: the user deleted what
/// they all stood for. (Before, the deletion, a write to the winner, undid the removal of its
/// losers, and a deleted "blue" tag came back as the other device's "blue".)
@Suite("Deleted duplicate groups")
struct DuplicateDeletionTests {
    typealias Fixture = DuplicateRedirectTests

    /// alpha makes tag 1 "blue"; beta makes tag 2 "blue" and a note tagged with it. Returns the note.
    func blueTags(_ bench: SyncTestBench) throws -> ObjectID {
        try bench.edit("alpha") { context in
            _ = try context.insert(entity: "Tag", id: Fixture.tags.winner, values: ["label": "blue"])
        }
        let note = try bench.edit("beta") { context in
            _ = try context.insert(entity: "Tag", id: Fixture.tags.loser, values: ["label": "blue"])
            var note = try context.insert(entity: "Note", values: ["title": "tagged"])
            note.toMany["tags"] = [Fixture.tags.loser]
            try context.update(note)
        }.first { $0.id.entity == "Note" }
        return try #require(note).id
    }

    func exchange(_ bench: SyncTestBench, _ order: [String]) throws {
        try bench.deliverEverything()
        for name in order { try bench.importOn(name) }
    }

    func tags(_ bench: SyncTestBench, _ name: String) throws -> [Record] {
        try bench.contents(name).filter { $0.id.entity == "Tag" }
    }

    @Test(
        "the winner's deletion deletes the group: no device keeps a blue tag, and the note is untagged",
        arguments: [["alpha", "beta"], ["beta", "alpha"]]
    )
    func deletingTheWinnerDeletesTheGroup(order: [String]) throws {
        let bench = try Fixture.tagBench(["alpha", "beta"])
        let note = try blueTags(bench)
        try exchange(bench, order)
        for name in ["alpha", "beta"] {
            #expect(try tags(bench, name).map(\.id) == [Fixture.tags.winner], "\(name) keeps one blue tag")
        }
        try bench.edit("alpha") { try $0.delete(Fixture.tags.winner) }
        try exchange(bench, order)
        // A later local save on each validates what the imports left.
        for name in ["alpha", "beta"] { try bench.addNote(name, "\(name) later") }
        try exchange(bench, order)
        for name in ["alpha", "beta"] {
            let left = try tags(bench, name)
            #expect(left.isEmpty, "\(name) brought a deleted tag back: \(left)")
            let tagged = try #require(try bench.contents(name).first { $0.id == note })
            #expect(tagged.toMany["tags"] == nil, "\(name): \(tagged)")
        }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test(
        "the deletion made on the device that did not remove the loser yet deletes the group when the duplicate arrives later"
    )
    func deletionBeforeTheDuplicateArrives() throws {
        let bench = try Fixture.tagBench(["alpha", "beta", "gamma"])
        _ = try blueTags(bench)
        // gamma gets alpha's tag only and deletes it; beta's blue tag arrives afterwards.
        try bench.deliver("alpha", [1], to: "gamma")
        try bench.importOn("gamma")
        try bench.edit("gamma") { try $0.delete(Fixture.tags.winner) }
        try exchange(bench, ["alpha", "beta", "gamma"])
        for name in ["alpha", "beta", "gamma"] { try bench.addNote(name, "\(name) later") }
        try exchange(bench, ["gamma", "beta", "alpha"])
        // gamma never saw a group: beta's tag is a record of its own that nobody deleted.
        let kept = try tags(bench, "alpha").map(\.id)
        for name in ["beta", "gamma"] { #expect(try tags(bench, name).map(\.id) == kept, "\(name)") }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }

    @Test("deleting the loser's device's copy of the group from the folder side: a deleted folder group stays deleted")
    func deletedFolderGroupStaysDeleted() throws {
        let bench = try Fixture.workFolders(alpha: Fixture.winner, beta: Fixture.loser)
        try bench.addNote("alpha", "alpha's")
        try exchange(bench, ["alpha", "beta"])
        // beta sees one Work folder (the winner) and deletes it with what it holds.
        try bench.edit("beta") { try $0.delete(Fixture.winner) }
        try exchange(bench, ["alpha", "beta"])
        for name in ["alpha", "beta"] { try bench.addNote(name, "\(name) later") }
        try exchange(bench, ["beta", "alpha"])
        for name in ["alpha", "beta"] {
            let folders = try bench.contents(name).filter { $0.id.entity == "Folder" }
            #expect(folders.isEmpty, "\(name) brought a deleted folder back: \(folders)")
        }
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }

    @Test(
        "a folder made on both devices, deleted on one while the other files a new note into it: the folder stays deleted",
        arguments: [true, false]
    )
    func deletedWhileTheOtherFilesIntoIt(laptopWins: Bool) throws {
        let (laptop, desktop) = laptopWins ? (Fixture.winner, Fixture.loser) : (Fixture.loser, Fixture.winner)
        let bench = try Fixture.bench(["laptop", "desktop"])
        for (device, id) in [("laptop", laptop), ("desktop", desktop)] {
            try bench.edit(device) { context in
                _ = try context.insert(entity: "Folder", id: id, values: ["name": "Dup2"])
            }
        }
        try exchange(bench, ["laptop", "desktop"])
        // The laptop files a note into the Dup2 it shows (the winner); the desktop, which has not
        // seen that, deletes its (empty) Dup2.
        try bench.edit("laptop") { context in
            var note = try context.insert(entity: "Note", values: ["title": "laptop's"])
            note.toOne["folder"] = Fixture.winner
            try context.update(note)
        }
        try bench.edit("desktop") { try $0.delete(Fixture.winner) }
        try exchange(bench, ["laptop", "desktop"])
        for name in ["laptop", "desktop"] { try bench.addNote(name, "\(name) later") }
        try exchange(bench, ["desktop", "laptop"])
        for name in ["laptop", "desktop"] {
            let folders = try bench.contents(name).filter { $0.id.entity == "Folder" }
            #expect(folders.isEmpty, "\(name) brought a deleted folder back: \(folders)")
        }
        #expect(try bench.contents("laptop") == bench.contents("desktop"))
    }
}

extension DuplicateDeletionTests {
    @Test(
        "a save that deletes the winner and makes its removed duplicate again (its id is deterministic) keeps the new record on every device: the group's deletion does not take the record made anew (soak seed 16)"
    )
    func loserMadeAgainWithTheWinnersDeletion() throws {
        let bench = try Fixture.tagBench(["alpha", "beta"])
        _ = try blueTags(bench)
        try exchange(bench, ["alpha", "beta"])
        // beta removed its "blue" as alpha's duplicate; one save deletes alpha's and makes beta's again.
        #expect(try tags(bench, "beta").map(\.id) == [Fixture.tags.winner])
        try bench.edit("beta") { context in
            try context.delete(Fixture.tags.winner)
            _ = try context.insert(entity: "Tag", id: Fixture.tags.loser, values: ["label": "green"])
        }
        try exchange(bench, ["alpha", "beta"])
        for name in ["alpha", "beta"] {
            let left = try tags(bench, name)
            #expect(left.map(\.id) == [Fixture.tags.loser], "\(name): \(left)")
            #expect(left.first?["label"] == "green", "\(name): \(left)")
            #expect(try bench[name].sync.historyMismatches().isEmpty, "\(name)")
        }
    }
}
