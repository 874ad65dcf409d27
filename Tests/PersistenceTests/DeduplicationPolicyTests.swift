import Foundation
import Persistence
import Synchronization
import Testing

/// Keeps the larger use count of two duplicate tags: deterministic and idempotent.
struct KeepHighestCount: UniquenessPolicy {
    let entityName = "Tag"
    let uniqueness = Uniqueness.key(["label"])
    let creationStampAttribute: String? = "created"
    func merge(_ loser: Record, into winner: inout Record, in context: ObjectContext) throws {
        if case .integer(let theirs) = loser["uses"], case .integer(let mine) = winner["uses"], theirs > mine {
            winner["uses"] = .integer(theirs)
        }
    }
}

/// A count shared between threads.
final class SharedCount: Sendable {
    private let value = Mutex(0)
    func withLock<T>(_ body: (inout Int) -> T) -> T { value.withLock { body(&$0) } }
}

/// Tags by label, counting how many records it was asked about.
struct CountingTagPolicy: UniquenessPolicy {
    let entityName = "Tag"
    let asked = SharedCount()
    var uniqueness: Uniqueness {
        let asked = self.asked
        return .custom { record in
            asked.withLock { $0 += 1 }
            return [record["label"]]
        }
    }
}

@Suite("Duplicate resolution")
struct DeduplicationPolicyTests {
    static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Tag",
                attributes: [
                    AttributeDescription("label", .string),
                    AttributeDescription("uses", .integer, defaultValue: 0),
                    AttributeDescription("created", .date),
                ],
                relationships: [
                    RelationshipDescription("notes", to: "Note", inverse: "tags", isToMany: true),
                    RelationshipDescription("primaryOf", to: "Note", inverse: "primary", isToMany: true),
                ]
            ),
            EntityDescription(
                "Note",
                attributes: [AttributeDescription("title", .string)],
                relationships: [
                    RelationshipDescription("tags", to: "Tag", inverse: "notes", isToMany: true),
                    RelationshipDescription("primary", to: "Tag", inverse: "primaryOf"),
                ]
            ),
        ]
    )

    /// A device that created its own "work" tag (and others) and tagged a note with it.
    static func populate(_ device: Device, labels: [String], created: Double, uses: Int64, note: String) throws {
        let context = device.context()
        var tags: [String: Record] = [:]
        for (index, label) in labels.enumerated() {
            tags[label] = try context.insert(
                entity: "Tag",
                values: [
                    "label": .string(label), "uses": .integer(uses + Int64(index)),
                    "created": .date(Date(timeIntervalSinceReferenceDate: created + Double(index))),
                ]
            )
        }
        var record = try context.insert(entity: "Note", values: ["title": .string(note)])
        record.toMany["tags"] = Set(tags.values.map(\.id))
        record.toOne["primary"] = tags["work"]?.id
        try context.update(record)
        try context.save()
    }

    @Test(
        "Duplicates created on two devices resolve to the same winner in either order, relationships moved",
        arguments: [false, true]
    )
    func duplicatesConverge(reversed: Bool) throws {
        let one = try Device("one", schema: Self.schema, uniqueness: [KeepHighestCount()])
        let two = try Device("two", schema: Self.schema, uniqueness: [KeepHighestCount()])
        try Self.populate(one, labels: ["work", "home"], created: 1000, uses: 5, note: "from one")
        try Self.populate(two, labels: ["work", "fun"], created: 900, uses: 2, note: "from two")
        let (first, second) = reversed ? (two, one) : (one, two)
        let firstData = try first.contents()
        let secondData = try second.contents()
        try first.importRecords(secondData)
        try second.importRecords(firstData)

        let a = try one.contents()
        let b = try two.contents()
        #expect(a == b, "the two devices disagree")
        let tags = a.filter { $0.id.entity == "Tag" }
        #expect(
            tags.map(\.values["label"]).sorted { "\($0!)" < "\($1!)" }
                == ["fun", "home", "work"].map { Value.string($0) }
        )
        let work = try #require(tags.first { $0["label"] == "work" })
        // The earliest "work" (device two's, created at 900) wins and keeps the highest count.
        #expect(work["created"] == .date(Date(timeIntervalSinceReferenceDate: 900)))
        #expect(work["uses"] == .integer(5))
        let notes = a.filter { $0.id.entity == "Note" }
        #expect(notes.count == 2)
        for note in notes {
            #expect(note.toMany["tags"]?.contains(work.id) == true)
            #expect(note.toOne["primary"] == work.id)
        }
        #expect(work.toMany["notes"] == Set(notes.map(\.id)))
        #expect(work.toMany["primaryOf"] == Set(notes.map(\.id)))
    }

    @Test("A custom key function decides what counts as a duplicate")
    func customKey() throws {
        let caseInsensitive = Deduplicate(
            "Tag",
            .custom { record in
                guard case .string(let label) = record["label"] else { return nil }
                return [.string(label.lowercased())]
            }
        )
        let device = try Device("one", schema: Self.schema, uniqueness: [caseInsensitive])
        let context = device.context()
        for label in ["Work", "work", "WORK", "home"] {
            try context.insert(entity: "Tag", values: ["label": .string(label), "created": .date(Date())])
        }
        try context.save()
        let removed = try context.resolveDuplicates()
        #expect(removed.count == 2)
        try context.save()
        #expect(try device.store.count(for: FetchRequest(entity: "Tag")) == 2)
    }

    @Test(
        "An import resolves an entity's duplicates only when it changes the entity or a local save changed it since: other imports read none of its records"
    )
    func importsResolveOnlyWhatCanHaveChanged() throws {
        let policy = CountingTagPolicy()
        let device = try Device("one", schema: Self.schema, uniqueness: [policy])
        try Self.populate(device, labels: ["work", "home", "fun"], created: 1000, uses: 1, note: "first")
        func imported(_ body: (ObjectContext) throws -> Void) throws -> Int {
            policy.asked.withLock { $0 = 0 }
            let context = device.context(.import)
            try body(context)
            try context.save()
            return policy.asked.withLock { $0 }
        }
        func note(_ title: String) -> (ObjectContext) throws -> Void {
            { context in _ = try context.insert(entity: "Note", values: ["title": .string(title)]) }
        }
        // The store was never resolved under this policy, then it is: the next import of a note
        // leaves the tags be.
        #expect(try imported(note("a")) == 3)
        #expect(try imported(note("b")) == 0)
        // An import that brings a tag resolves the tags.
        #expect(
            try imported { _ = try $0.insert(entity: "Tag", values: ["label": "home", "created": .date(Date())]) } == 4
        )
        #expect(try device.contents().filter { $0.id.entity == "Tag" }.count == 3, "the second home went")
        #expect(try imported(note("c")) == 0)
        // A local save makes a duplicate: the next import, whatever it brings, resolves it.
        let local = device.context()
        _ = try local.insert(entity: "Tag", values: ["label": "work", "created": .date(Date())])
        try local.save()
        #expect(try imported(note("d")) == 4)
        #expect(try device.contents().filter { $0.id.entity == "Tag" }.count == 3, "the second work went")
        #expect(try imported(note("e")) == 0)
        // A local save of notes only changes nothing of that.
        let notes = device.context()
        _ = try notes.insert(entity: "Note", values: ["title": "local"])
        try notes.save()
        #expect(try imported(note("f")) == 0)
    }
}
