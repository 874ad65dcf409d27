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

    static let taggedSchema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Note",
                attributes: [AttributeDescription("title", .string)],
                relationships: [RelationshipDescription("tags", to: "Tag", inverse: "notes", isToMany: true)]
            ),
            EntityDescription(
                "Tag",
                attributes: [AttributeDescription("name", .string)],
                relationships: [RelationshipDescription("notes", to: "Note", inverse: "tags", isToMany: true)]
            ),
        ]
    )

    /// A note tagged `initially` (of three tags), read by a second context; a first context then
    /// changes the note's tags with `theirs` and saves. Returns the device, the second context,
    /// the note's id and the tags' ids.
    static func staleTagging(
        initially: [Int],
        theirs: (inout Set<ObjectID>, [ObjectID]) -> Void
    ) throws -> (Device, ObjectContext, ObjectID, [ObjectID]) {
        let device = try Device("one", schema: taggedSchema)
        let setup = device.context()
        let tags = try (0..<3).map { try setup.insert(entity: "Tag", values: ["name": .string("tag \($0)")]).id }
        var note = try setup.insert(entity: "Note", values: ["title": "draft"])
        note.toMany["tags"] = Set(initially.map { tags[$0] })
        try setup.update(note)
        try setup.save()
        let first = device.context()
        let second = device.context()
        var read = try #require(try second.record(with: note.id))
        read["title"] = "read before"
        try second.update(read)  // the second context holds the note from before the first's save
        var changed = try #require(try first.record(with: note.id))
        theirs(&changed.toMany["tags", default: []], tags)
        try first.update(changed)
        try first.save()
        return (device, second, note.id, tags)
    }

    @Test(
        "Mine wins on a to-many set commits my additions and removals, not my whole stale set: what another writer added or removed meanwhile stays so"
    )
    func toManySetsMergeByElement() throws {
        // Another writer added tag 0; this context, holding the note from before, adds tag 1.
        let (device, context, note, tags) = try Self.staleTagging(initially: []) { $0.insert($1[0]) }
        var mine = try #require(try context.record(with: note))
        mine.toMany["tags", default: []].insert(tags[1])
        try context.update(mine)
        let saved = try context.save()
        let stored = try #require(try device.store.records(with: [note]).first)
        #expect(stored.toMany["tags"] == [tags[0], tags[1]])
        #expect(saved.updated.first { $0.id == note }?.toMany["tags"] == [tags[0], tags[1]])
        let tagged = try device.store.records(with: [tags[0], tags[1]])
        #expect(tagged.allSatisfy { $0.toMany["notes"] == [note] })
        #expect(try context.record(with: note)?.toMany["tags"] == [tags[0], tags[1]])

        // Another writer removed tag 0; this context, which still saw it, adds tag 2.
        let (device2, context2, note2, tags2) = try Self.staleTagging(initially: [0]) { $0.remove($1[0]) }
        var mine2 = try #require(try context2.record(with: note2))
        #expect(mine2.toMany["tags"] == [tags2[0]])
        mine2.toMany["tags", default: []].insert(tags2[2])
        try context2.update(mine2)
        try context2.save()
        let stored2 = try #require(try device2.store.records(with: [note2]).first)
        #expect(stored2.toMany["tags"] == [tags2[2]])
        #expect(try device2.store.records(with: [tags2[0]]).first?.toMany["notes"] ?? [] == [])

        // Both added the same tag: nothing of the set is committed again.
        let (device3, context3, note3, tags3) = try Self.staleTagging(initially: [2]) { $0.insert($1[1]) }
        var mine3 = try #require(try context3.record(with: note3))
        mine3.toMany["tags", default: []].insert(tags3[1])
        mine3["title"] = "mine"
        try context3.update(mine3)
        let saved3 = try context3.save()
        #expect(saved3.updatedKeys[note3] == ["title"])
        #expect(try device3.store.records(with: [note3]).first?.toMany["tags"] == [tags3[1], tags3[2]])
    }

    @Test(
        "A save validates its records as the commit will make them: an element another writer deleted after this context read the set does not fail the save"
    )
    func staleElementDeletedMeanwhileIsNotAViolation() throws {
        let device = try Device("one", schema: Self.taggedSchema)
        let setup = device.context()
        let tag = try setup.insert(entity: "Tag", values: ["name": "green"])
        var gone = try setup.insert(entity: "Note", values: ["title": "gone"])
        gone.toMany["tags"] = [tag.id]
        try setup.update(gone)
        let kept = try setup.insert(entity: "Note", values: ["title": "kept"])
        try setup.save()

        // This context tags a note: the tag's set, as it reads it, still holds the other note.
        let context = device.context()
        var note = try #require(try context.record(with: kept.id))
        note.toMany["tags"] = [tag.id]
        try context.update(note)
        #expect(try context.record(with: tag.id)?.toMany["notes"] == [gone.id, kept.id])
        // Another writer deletes that note before this context saves.
        let other = device.context()
        try other.delete(gone.id)
        try other.save()

        let saved = try context.save()
        #expect(try device.store.records(with: [tag.id]).first?.toMany["notes"] == [kept.id])
        #expect(try device.store.records(with: [kept.id]).first?.toMany["tags"] == [tag.id])
        #expect(saved.updated.first { $0.id == tag.id }?.toMany["notes"] ?? [kept.id] == [kept.id])
    }
}
