import Foundation
import Persistence
import Testing

@Suite("Merge policies")
struct MergePolicyTests {
    static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Note",
                attributes: [
                    AttributeDescription("title", .string),
                    AttributeDescription("body", .string, defaultValue: ""),
                    AttributeDescription("pinned", .boolean, defaultValue: false),
                ]
            )
        ]
    )

    /// A note both contexts read; the first changes title and body and saves; returns the second
    /// context with its own (conflicting) edit of title and pinned pending.
    static func conflict(_ policy: MergePolicy) throws -> (Device, ObjectContext, ObjectID) {
        let device = try Device("one", schema: schema)
        let setup = device.context()
        let note = try setup.insert(entity: "Note", values: ["title": "draft"])
        try setup.save()
        let first = device.context()
        let second = device.context()
        second.mergePolicy = policy
        var theirs = try #require(try first.record(with: note.id))
        var mine = try #require(try second.record(with: note.id))
        theirs["title"] = "theirs"
        theirs["body"] = "their body"
        try first.update(theirs)
        try first.save()
        mine["title"] = "mine"
        mine["pinned"] = true
        try second.update(mine)
        return (device, second, note.id)
    }

    @Test("Mine wins: my changed properties overwrite, theirs survive elsewhere")
    func mineWins() throws {
        let (device, context, id) = try Self.conflict(.mineWins)
        try context.save()
        let stored = try #require(try device.store.records(with: [id]).first)
        #expect(stored["title"] == "mine" && stored["pinned"] == true && stored["body"] == "their body")
    }

    @Test("Store wins: properties both changed keep the store's value")
    func storeWins() throws {
        let (device, context, id) = try Self.conflict(.storeWins)
        try context.save()
        let stored = try #require(try device.store.records(with: [id]).first)
        #expect(stored["title"] == "theirs" && stored["pinned"] == true && stored["body"] == "their body")
    }

    struct Concatenate: MergeConflictResolver {
        func resolve(_ conflict: MergeConflict) throws -> Record? {
            guard var merged = conflict.stored else { return conflict.mine }  // resurrect a deleted note
            for key in conflict.conflictingKeys {
                if case .string(let a) = conflict.mine[key], case .string(let b) = merged[key] {
                    merged[key] = .string([a, b].sorted().joined(separator: " + "))
                }
            }
            merged["pinned"] = conflict.mine["pinned"]
            return merged
        }
    }

    @Test("A custom policy sees base, mine, stored and the conflicting keys")
    func customPolicy() throws {
        let (device, context, id) = try Self.conflict(.custom(Concatenate()))
        try context.save()
        let stored = try #require(try device.store.records(with: [id]).first)
        #expect(stored["title"] == "mine + theirs" && stored["pinned"] == true && stored["body"] == "their body")
    }

    @Test("A record deleted elsewhere stays deleted unless the custom policy brings it back")
    func deletedElsewhere() throws {
        for (policy, survives) in [(MergePolicy.mineWins, false), (.storeWins, false), (.custom(Concatenate()), true)] {
            let (device, context, id) = try Self.conflict(policy)
            let deleter = device.context()
            try deleter.delete(id)
            try deleter.save()
            try context.save()
            let stored = try device.store.records(with: [id]).first
            #expect((stored != nil) == survives)
            if survives { #expect(stored?["title"] == "mine") }
        }
    }
}
