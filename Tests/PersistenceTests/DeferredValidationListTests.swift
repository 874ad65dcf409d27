import Foundation
import Testing

@testable import Persistence

/// The list of imported records a later local save validates: one entry per record, under keys
/// that put one commit's entries together after those of earlier commits.
@Suite("Deferred-validation list")
struct DeferredValidationListTests {
    static let schema = try! Schema(
        version: 1,
        entities: [EntityDescription("Folder", attributes: [AttributeDescription("name", .string)])]
    )

    /// The list's keys in `device`'s store, in key order.
    static func keys(_ device: Device) throws -> [String] {
        try ObjectContext.deferredEntries(in: device.store).map(\.key).sorted()
    }

    /// An import-origin save of `count` new folders; returns their ids.
    @discardableResult
    static func importFolders(_ device: Device, _ count: Int) throws -> [ObjectID] {
        let importer = device.context(.import)
        let ids = try (0..<count).map { try importer.insert(entity: "Folder", values: ["name": .string("f\($0)")]).id }
        try importer.save()
        return ids
    }

    @Test("An import's entries share one stamp and sort after the entries of the imports before it")
    func oneImportsEntriesSitTogether() throws {
        let device = try Device("one", schema: Self.schema)
        let first = try Self.importFolders(device, 20)
        let firstKeys = try Self.keys(device)
        #expect(firstKeys.count == 20)
        let stamps = Set(firstKeys.map { $0.dropFirst(ObjectContext.deferredPrefix.count).split(separator: "/")[0] })
        #expect(stamps.count == 1, "one commit, one stamp: \(stamps)")
        #expect(try ObjectContext.deferredValidation(in: device.store) == Set(first))

        let second = try Self.importFolders(device, 20)
        let all = try Self.keys(device)
        #expect(all.count == 40)
        #expect(Array(all.prefix(20)) == firstKeys, "the second import's entries come after the first's")
        #expect(try ObjectContext.deferredValidation(in: device.store) == Set(first + second))
    }

    @Test("A local save takes off the entries its validation read, those of earlier versions included")
    func localSaveTakesOffWhatItValidated() throws {
        let device = try Device("one", schema: Self.schema)
        let imported = try Self.importFolders(device, 3)
        // An entry in the form of earlier versions (`concord.deferred/ENTITY/UUID`).
        let old = ObjectID.random(entity: "Folder")
        try device.store.commit(
            StoreChanges(metadataEntries: [ObjectContext.deferredPrefix + old.description: Data()])
        )
        #expect(try ObjectContext.deferredValidation(in: device.store) == Set(imported + [old]))

        let local = device.context()
        _ = try local.insert(entity: "Folder", values: ["name": "local"])
        try local.save()
        #expect(try Self.keys(device).isEmpty)

        // The next import lists what it brings, and only that.
        let later = try Self.importFolders(device, 2)
        #expect(try ObjectContext.deferredValidation(in: device.store) == Set(later))
    }

    // MARK: What an entry asks to look up

    static let folderSchema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Folder",
                attributes: [AttributeDescription("name", .string)],
                relationships: [RelationshipDescription("notes", to: "Note", inverse: "folder", isToMany: true)]
            ),
            EntityDescription(
                "Note",
                attributes: [AttributeDescription("title", .string)],
                relationships: [RelationshipDescription("folder", to: "Folder", inverse: "notes")]
            ),
        ]
    )

    /// A device whose folder holds `count` notes and a note `stale` that does not exist (written
    /// past the context, as a damaged or older store may hold it); returns the folder's id.
    static func folderWithStaleMember(_ device: Device, count: Int, stale: ObjectID) throws -> ObjectID {
        let context = device.context()
        let folder = try context.insert(entity: "Folder", values: ["name": "Inbox"])
        for index in 0..<count {
            var note = try context.insert(entity: "Note", values: ["title": .string("n\(index)")])
            note.toOne["folder"] = folder.id
            try context.update(note)
        }
        try context.save()
        var members = try device.store.records(with: [folder.id]).first!.toMany["notes"]!
        members.insert(stale)
        try device.store.commit(StoreChanges(updates: [RecordUpdate(id: folder.id, toMany: ["notes": members])]))
        return folder.id
    }

    /// An import that files a new note in `folder`; returns the note's id.
    static func importNote(_ device: Device, into folder: ObjectID) throws -> ObjectID {
        let importer = device.context(.import)
        var note = try importer.insert(entity: "Note", values: ["title": "arrived"])
        note.toOne["folder"] = folder
        try importer.update(note)
        try importer.save()
        return note.id
    }

    @Test("An import that files a note in a folder lists the folder for that note alone, the note for all it holds")
    func importListsTheReferencesItAdded() throws {
        let device = try Device("one", schema: Self.folderSchema)
        let stale = ObjectID.random(entity: "Note")
        let folder = try Self.folderWithStaleMember(device, count: 30, stale: stale)
        let note = try Self.importNote(device, into: folder)
        let entries = try ObjectContext.deferredEntries(in: device.store)
        #expect(entries.first { $0.id == folder }?.references == [note], "the folder: only the note it gained")
        #expect(entries.first { $0.id == note }.map { $0.references == nil } == true, "an inserted record: whole")
        // The folder's old member that does not exist was judged when it was saved: not looked
        // up again for the import (a folder of 100,000 notes costs one lookup, not 100,000).
        let found = try device.context().validationViolations()
        #expect(found.filter { $0.rule == .missingDestination }.isEmpty, "\(found)")
    }

    @Test("An entry of an earlier version, or one whose value is damaged, has every reference looked up")
    func unlistedEntriesAreJudgedWhole() throws {
        for value in [Data(), Data([ObjectContext.deferredMarker, 0, 4, 0x4E])] {
            let device = try Device("one", schema: Self.folderSchema)
            let stale = ObjectID.random(entity: "Note")
            let folder = try Self.folderWithStaleMember(device, count: 3, stale: stale)
            try device.store.commit(
                StoreChanges(metadataEntries: [ObjectContext.deferredPrefix + folder.description: value])
            )
            #expect(try ObjectContext.deferredEntries(in: device.store).first?.references == nil)
            let found = try device.context().validationViolations().filter { $0.rule == .missingDestination }
            #expect(found.map(\.target) == [stale], "value \(Array(value)): \(found)")
        }
    }

    @Test("A reference an import added to a target that does not exist is found at the next local save")
    func listedReferenceToNothingIsFound() throws {
        let device = try Device("one", schema: Self.folderSchema)
        let context = device.context()
        let folder = try context.insert(entity: "Folder", values: ["name": "Inbox"])
        var note = try context.insert(entity: "Note", values: ["title": "mine"])
        note.toOne["folder"] = folder.id
        try context.update(note)
        try context.save()
        #expect(try ObjectContext.deferredEntries(in: device.store).isEmpty)
        // Another device moved the note into a folder this device has not received.
        let missing = ObjectID.random(entity: "Folder")
        let importer = device.context(.import)
        try importer.setTarget(missing, forKey: "folder", of: note.id)
        try importer.save()
        let entries = try ObjectContext.deferredEntries(in: device.store)
        #expect(entries.first { $0.id == note.id }?.references == [missing], "\(entries.map(\.id))")
        #expect(entries.first { $0.id == folder.id }?.references == [], "the folder only lost a member")
        let found = try device.context().validationViolations().filter { $0.rule == .missingDestination }
        #expect(found.map(\.object) == [note.id] && found.map(\.target) == [missing], "\(found)")
    }
}
