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
}
