import ConcordTestSupport
import Foundation
import Persistence
import SyncTestKit
import Testing

@testable import FolderSync

/// An element written before a record's deletion belongs to the incarnation the deletion ended,
/// also on a device that holds it as its removed duplicate's winner (a stand-in) when the
/// deletion arrives: a record made again after the deletion (a deterministic id) carries none of
/// it, on every device, whatever the order.
@Suite("Stand-ins of an ended incarnation")
struct StandInDeletionTests {
    static let note = ObjectID.deterministic(entity: "Note", name: "welcome")

    /// alpha makes tag "blue" (the loser) and the note, tags the note and deletes it, one log each;
    /// beta, holding its own "blue" (the winner), makes the note again after alpha's deletion,
    /// before hearing of any of it. gamma hears of everything.
    static func recreatedOverDeletedTagging() throws -> SyncTestBench {
        let bench = try DuplicateRedirectTests.tagBench(["alpha", "beta", "gamma"])
        let tags = DuplicateRedirectTests.tags
        try bench.edit("beta") { context in
            _ = try context.insert(entity: "Tag", id: tags.winner, values: ["label": .string("blue")])
        }
        try bench.edit("alpha") { context in
            _ = try context.insert(entity: "Tag", id: tags.loser, values: ["label": .string("blue")])
            _ = try context.insert(entity: "Note", id: note, values: ["title": .string("first")])
        }
        try bench.edit("alpha") { context in
            var held = try #require(try context.record(with: note))
            held.toMany["tags"] = [tags.loser]
            try context.update(held)
        }
        try bench.edit("alpha") { try $0.delete(note) }
        try bench.edit("beta") { context in
            _ = try context.insert(entity: "Note", id: note, values: ["title": .string("second")])
        }
        return bench
    }

    @Test(
        "a note made again after its deletion, on a device where the tag written before the deletion stands for its winner, ends without the tag"
    )
    func standInWrittenBeforeTheDeletionGoes() throws {
        let bench = try Self.recreatedOverDeletedTagging()
        let tags = DuplicateRedirectTests.tags
        // beta removes alpha's tag as a duplicate of its own first, then meets the tagging (held
        // as the winner), then the deletion, which its own creation outlives.
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        #expect(try bench["beta"].store.records(with: [tags.loser]).isEmpty)
        try bench.deliver("alpha", [2], to: "beta")
        try bench.importOn("beta")
        #expect(try bench["beta"].store.records(with: [Self.note]).first?.toMany["tags"] == [tags.winner])
        try bench.deliver("alpha", [3], to: "beta")
        try bench.importOn("beta")
        let held = try #require(try bench["beta"].store.records(with: [Self.note]).first)
        #expect(held["title"] == "second")
        #expect(held.toMany["tags"] == nil)

        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "gamma"] {
            let record = try #require(try bench[name].store.records(with: [Self.note]).first, "\(name)")
            #expect(record["title"] == "second", "\(name)")
            #expect(record.toMany["tags"] == nil, "\(name)")
            #expect(try bench.contents(name) == bench.contents("beta"), "\(name) differs from beta")
        }
    }

    @Test(
        "the same, when the tag's removal is undone afterwards: the tag comes back, the note stays without it"
    )
    func undoneRemovalLeavesTheEndedIncarnationAlone() throws {
        let bench = try Self.recreatedOverDeletedTagging()
        let tags = DuplicateRedirectTests.tags
        for sequence: UInt64 in 1...3 {
            try bench.deliver("alpha", [sequence], to: "beta")
            try bench.importOn("beta")
        }
        // alpha renames its tag: the two are no longer alike, and beta brings the loser back with
        // every reference that named it and is still current.
        try bench.edit("alpha") { context in
            var tag = try #require(try context.record(with: tags.loser))
            tag["label"] = .string("green")
            try context.update(tag)
        }
        try bench.deliver("alpha", [4], to: "beta")
        try bench.importOn("beta")
        #expect(try bench["beta"].store.records(with: [tags.loser]).first?["label"] == "green")
        #expect(try bench["beta"].store.records(with: [Self.note]).first?.toMany["tags"] == nil)

        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "gamma"] {
            #expect(try bench[name].store.records(with: [Self.note]).first?.toMany["tags"] == nil, "\(name)")
            #expect(try bench.contents(name) == bench.contents("beta"), "\(name) differs from beta")
        }
    }
}
