import Foundation
import Testing

@testable import Persistence

@Suite("Validation repair")
struct ValidationRepairTests {
    /// Core Data's classic: A and B point at each other through required to-one relationships.
    static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "A",
                attributes: [AttributeDescription("name", .string)],
                relationships: [RelationshipDescription("b", to: "B", inverse: "a", isOptional: false)]
            ),
            EntityDescription(
                "B",
                attributes: [AttributeDescription("name", .string)],
                relationships: [RelationshipDescription("a", to: "A", inverse: "b", isOptional: false)]
            ),
        ]
    )

    /// Two devices start with A1 ↔ B1; each deletes B1 and links A1 to a new B of its own. Device
    /// 1 then imports device 2's changes. Returns device 1 and the two new Bs.
    static func twoWritersOneSlot(
        repair: [any ValidationRepairPolicy]
    ) throws -> (Device, b2: ObjectID, b3: ObjectID, a1: ObjectID) {
        let device = try Device("one", schema: schema, repair: repair)
        let setup = device.context()
        var a1 = try setup.insert(entity: "A", values: ["name": "A1"])
        let b1 = try setup.insert(entity: "B", values: ["name": "B1"])
        a1.toOne["b"] = b1.id
        try setup.update(a1)
        try setup.save()

        // Device 1's own edit: valid on its own.
        let local = device.context()
        try local.delete(b1.id)
        var b2 = try local.insert(entity: "B", values: ["name": "B2"])
        b2.toOne["a"] = a1.id
        try local.update(b2)
        try local.save()

        // Device 2's edit arrives: also valid on its own. Applied as plain values: no validation.
        let b3 = Record(id: .random(entity: "B"), values: ["name": "B3"], toOne: ["a": a1.id])
        var a1There = a1
        a1There.toOne["b"] = b3.id
        let importer = device.context(.import)
        try importer.delete(b1.id)
        try importer.insert(b3)
        try importer.update(a1There)
        try importer.save()
        return (device, b2.id, b3.id, a1.id)
    }

    @Test("Two writers filling one required to-one slot leave a record that plain validation rejects forever")
    func plainValidationFails() throws {
        let (device, b2, _, _) = try Self.twoWritersOneSlot(repair: [])
        // The import succeeded (no validation during import) and left B2 without its A.
        let stray = try #require(try device.store.records(with: [b2]).first)
        #expect(stray.toOne["a"] == nil)
        // Every later local save now fails on B2, whatever it changes.
        for attempt in 0..<2 {
            let context = device.context()
            try context.insert(entity: "A", values: ["name": .string("unrelated \(attempt)")])
            let error = try #require(throws: PersistenceError.self) { try context.save() }
            #expect(error.code == .validationFailed)
            #expect(
                error.violations.contains {
                    $0.object == b2 && $0.property == "a" && $0.rule == .missingRequiredRelationship
                }
            )
        }
    }

    @Test("A repair policy leaves a valid graph, and the repair is an ordinary local change")
    func repairPolicyFixesTheGraph() throws {
        let (device, b2, b3, a1) = try Self.twoWritersOneSlot(repair: [DeleteInvalidRecords("B")])
        let context = device.context()
        try context.insert(entity: "A", values: ["name": "A2"])
        // A2 itself needs a B: its own repair would be the app's; give it one.
        var a2 = try #require(try context.fetch(FetchRequest(entity: "A", predicate: Field("name") == "A2")).first)
        let b4 = try context.insert(entity: "B", values: ["name": "B4"])
        a2.toOne["b"] = b4.id
        try context.update(a2)
        let changes = try context.save()
        #expect(changes.deleted == [b2])
        #expect(try device.store.records(with: [b2]).isEmpty)
        let a = try #require(try device.store.records(with: [a1]).first)
        let b = try #require(try device.store.records(with: [b3]).first)
        #expect(a.toOne["b"] == b3 && b.toOne["a"] == a1)
        // Nothing is left to repair.
        #expect(try device.context().validationViolations().isEmpty)
    }

    struct Stubborn: ValidationRepairPolicy {
        let entityName = "B"
        func repair(_ record: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
            var record = record
            record["name"] = .string((record["name"] == .null ? "" : "x") + "!")
            try context.update(record)
            return true  // claims progress, never fixes the relationship
        }
    }

    @Test("Past the bound the save fails listing every remaining violation")
    func boundAndListing() throws {
        let (device, b2, _, _) = try Self.twoWritersOneSlot(repair: [Stubborn()])
        let context = device.context()
        context.maximumRepairPasses = 3
        let orphan = try context.insert(entity: "A", values: [:])  // no name, no B
        let error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.code == .validationFailed)
        #expect(error.message.contains("3 repair pass"))
        let listed = Set(error.violations.map { "\($0.object.entity) \($0.object) \($0.property) \($0.rule)" })
        #expect(
            listed == [
                "B \(b2) a missingRequiredRelationship",
                "A \(orphan.id) name missingRequiredValue",
                "A \(orphan.id) b missingRequiredRelationship",
            ]
        )
        #expect(error.description.contains(b2.description))
        #expect(try device.store.records(with: [orphan.id]).isEmpty)
    }
    /// Folders and notes: a note's folder is required.
    static let filing = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Folder",
                attributes: [AttributeDescription("name", .string)],
                relationships: [
                    RelationshipDescription("notes", to: "Note", inverse: "folder", isToMany: true, deleteRule: .deny)
                ]
            ),
            EntityDescription(
                "Note",
                attributes: [AttributeDescription("title", .string)],
                relationships: [RelationshipDescription("folder", to: "Folder", inverse: "notes", isOptional: false)]
            ),
        ]
    )

    @Test(
        "An imported deletion lists the records left pointing at it; an app's next save, even one with nothing else to commit, repairs them"
    )
    func importedDeletionIsRepairedByAnEmptySave() throws {
        let device = try Device("one", schema: Self.filing, repair: [DeleteInvalidRecords("Note")])
        let setup = device.context()
        let work = try setup.insert(entity: "Folder", values: ["name": "Work"])
        var note = try setup.insert(entity: "Note", values: ["title": "plan"])
        note.toOne["folder"] = work.id
        try setup.update(note)
        try setup.save()
        // Another device deleted the folder (its own note never made it there): the import
        // deletes it without rules, leaving the note pointing at nothing.
        let importer = device.context(.import)
        try importer.deleteWithoutRules(work.id)
        try importer.save()
        #expect(try device.store.records(with: [note.id]).first?.toOne["folder"] == work.id)
        // A save with no changes of its own validates and repairs what the import left.
        let changes = try device.context().save()
        #expect(changes.deleted.contains(note.id))
        #expect(try device.contents().isEmpty)
        // And once repaired, an empty save has nothing to do.
        #expect(try device.context().save().isEmpty)
    }
    @Test(
        "The list of imported records awaiting validation round-trips in its compact form; JSON lists are still read; damage drops only the rest"
    )
    func deferredListEncoding() throws {
        let ids: Set<ObjectID> = Set((0..<50).map { ObjectID.random(entity: $0 % 2 == 0 ? "Note" : "Ünïcode entity") })
        let data = ObjectContext.encodeDeferred(ids)
        #expect(ObjectContext.decodeDeferred(data) == ids)
        let sorted = ids.sorted()
        for cut in [1, 2, 5, data.count - 1] {
            let kept = ObjectContext.decodeDeferred(data.prefix(cut))
            #expect(kept.isSubset(of: ids))
            #expect(Set(sorted.prefix(kept.count)) == kept)
        }
        let device = try Device("one", schema: Self.filing)
        try device.store.commit(
            StoreChanges(metadataEntries: [ObjectContext.deferredValidationKey: try JSONEncoder().encode(sorted)])
        )
        #expect(try ObjectContext.deferredValidation(in: device.store) == ids)
    }
}
