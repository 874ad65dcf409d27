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
}
