import Foundation
import Persistence

extension Checks {
    static func schemaEvolution(_ context: CheckContext) throws {
        let url = context.url()
        var records = relatedRecords()
        let legacyID = ObjectID.deterministic(entity: "Item", name: "legacy")
        records.append(Record(id: legacyID, values: ["title": "old", "legacy": "dropped in v2", "number": 5]))
        let old = try context.open(url)
        try context.commit(
            old,
            StoreChanges(inserts: records, metadataEntries: ["kept": Data([7])]),
            "version 1 records"
        )
        let identifier = try context.metadata(old).storeIdentifier
        old.close()

        let store = try context.open(url, schema: ConformanceSchema.v2)
        try context.expect(
            store.schema == ConformanceSchema.v2,
            "the migrated store's schema is not the one it was opened with",
            expected: "version 2",
            actual: "version \(store.schema.version)"
        )
        let migration = try context.step("planning the migration") {
            try SchemaMigration(from: ConformanceSchema.v1, to: ConformanceSchema.v2, url: url)
        }
        let expected = records.compactMap(migration.migrate)
        try context.expect(
            expected.filter { $0.id.entity == "Item" }.allSatisfy { $0["priority"] == 7 && $0["legacy"] == .null },
            "the conformance kit's own migration expectation is wrong"
        )
        try context.expectContents(
            store,
            expected,
            "after opening a version 1 store with version 2 (new attribute with a default: every existing record has it; removed attribute: gone)"
        )
        let defaulted = try context.fetch(store, FetchRequest(entity: "Item", predicate: Field("priority") == 7))
        try context.expect(
            defaulted.count == expected.filter { $0.id.entity == "Item" }.count,
            "a fetch on the new attribute's default does not find every migrated record",
            expected: "\(expected.filter { $0.id.entity == "Item" }.count)",
            actual: "\(defaulted.count)"
        )
        let tag = Record(id: .deterministic(entity: "Tag", name: "t"), values: ["name": "new entity"])
        var noted = expected.first { $0.id == legacyID }!
        noted["note"] = "a new optional attribute"
        try context.commit(
            store,
            StoreChanges(
                inserts: [tag],
                updates: [RecordUpdate(id: legacyID, values: ["note": "a new optional attribute"])]
            ),
            "a record of the new entity and a value of the new attribute"
        )
        var final = expected.filter { $0.id != legacyID } + [noted, tag]
        try context.expectContents(store, final, "after writing the new entity and attribute")
        let metadata = try context.metadata(store)
        try context.expect(
            metadata.schemaVersion == 2,
            "after migrating and committing, the metadata's schema version is not the new one",
            expected: "2",
            actual: "\(metadata.schemaVersion)"
        )
        try context.expect(
            metadata.storeIdentifier == identifier,
            "migrating the schema in place changed the store identifier",
            expected: "\(identifier)",
            actual: "\(metadata.storeIdentifier)"
        )
        try context.expect(
            metadata.entries == ["kept": Data([7])],
            "migrating the schema lost metadata entries",
            expected: "kept",
            actual: "\(metadata.entries)"
        )
        try context.expectError([.invalidRequest], "an insert of the removed attribute after migrating") {
            try store.commit(
                StoreChanges(inserts: [Record(id: .deterministic(entity: "Item", name: "x"), values: ["legacy": "x"])])
            )
        }
        store.close()
        let reopened = try context.open(url, schema: ConformanceSchema.v2)
        try context.expectContents(reopened, final, "after migrating and reopening with version 2")
        let newer = Record(id: .deterministic(entity: "Item", name: "newer"), values: ["title": "n", "priority": 1])
        final.append(newer)
        try context.commit(reopened, StoreChanges(inserts: [newer]), "a version 2 record")
        reopened.close()
        let again = try context.open(url, schema: ConformanceSchema.v2)
        try context.expectContents(again, final, "after reopening with version 2 twice")
        again.close()
    }

    static func newerSchemaRejected(_ context: CheckContext) throws {
        let url = context.url()
        let store = try context.open(url, schema: ConformanceSchema.v2)
        try context.commit(
            store,
            StoreChanges(inserts: [Record(id: .deterministic(entity: "Tag", name: "t"), values: ["name": "v2"])]),
            "a version 2 record"
        )
        store.close()
        let error = try context.expectOpenFails(
            url,
            schema: ConformanceSchema.v1,
            codes: [.newerSchema],
            "a version 2 store with version 1"
        )
        _ = error
        let reopened = try context.open(url, schema: ConformanceSchema.v2)
        try context.expectContents(
            reopened,
            [Record(id: .deterministic(entity: "Tag", name: "t"), values: ["name": "v2"])],
            "after the refused open, with version 2"
        )
        reopened.close()
        // A store that was migrated and written by a newer schema is newer too.
        let migrated = context.url("migrated")
        let v1 = try context.open(migrated)
        try context.commit(v1, StoreChanges(inserts: relatedRecords()), "version 1 records")
        v1.close()
        let v2 = try context.open(migrated, schema: ConformanceSchema.v2)
        try context.commit(
            v2,
            StoreChanges(inserts: [Record(id: .deterministic(entity: "Tag", name: "t"))]),
            "a version 2 record after migrating"
        )
        v2.close()
        try context.expectOpenFails(
            migrated,
            schema: ConformanceSchema.v1,
            codes: [.newerSchema],
            "a store migrated to version 2 and written, with version 1"
        )
    }

    static func incompatibleSchemaRejected(_ context: CheckContext) throws {
        let url = context.url()
        let store = try context.open(url)
        try context.commit(store, StoreChanges(inserts: relatedRecords()), "version 1 records")
        store.close()
        try context.expectOpenFails(
            url,
            schema: ConformanceSchema.v1Other,
            codes: [.incompatibleSchema],
            "a version 1 store with another version 1 schema"
        )
        try context.expectOpenFails(
            url,
            schema: ConformanceSchema.v3ChangedType,
            codes: [.incompatibleSchema],
            "a version 1 store with a version 3 that changes an attribute's type"
        )
        let reopened = try context.open(url)
        try context.expectContents(reopened, relatedRecords(), "after the refused opens")
        reopened.close()
    }

    static func garbageFile(_ context: CheckContext) throws {
        var random = SeededGenerator(seed: 0xBAD)
        let cases: [(String, Data)] = [
            ("random bytes", Data((0..<4096).map { _ in UInt8.random(in: 0...255, using: &random) })),
            ("text", Data("This is not a store.\n".utf8)),
            ("a single zero byte", Data([0])),
        ]
        for (index, (what, bytes)) in cases.enumerated() {
            let url = context.url("garbage \(index)")
            try context.step("writing \(what)") { try bytes.write(to: url) }
            try context.expectOpenFails(
                url,
                schema: ConformanceSchema.v1,
                codes: [.corruptStore, .notAStore],
                "a file of \(what)"
            )
        }
        // The rest keeps working: a good store next to the bad ones.
        let good = try context.open(context.url("good"))
        try context.commit(good, StoreChanges(inserts: relatedRecords()), "records next to the bad files")
        good.close()
    }

    static func truncatedFile(_ context: CheckContext) throws {
        let url = context.url()
        var random = SeededGenerator(seed: 3)
        let store = try context.open(url)
        try context.commit(store, StoreChanges(inserts: differentialCorpus(&random, items: 300)), "records to truncate")
        store.close()
        let bytes = try context.step("reading the store") { try Data(contentsOf: url) }
        let sources = context.storeType.files(at: url)
        for (what, length) in [
            ("half", bytes.count / 2), ("all but the last byte", bytes.count - 1),
            ("the first 100 bytes", min(100, bytes.count / 2)),
        ] {
            let copy = context.url("truncated \(length)")
            for (source, target) in zip(sources, context.storeType.files(at: copy)).dropFirst()
            where FileManager.default.fileExists(atPath: source.path) {
                try context.step("copying \(source.lastPathComponent)") {
                    try FileManager.default.copyItem(at: source, to: target)
                }
            }
            try context.step("writing the truncated copy") { try bytes.prefix(length).write(to: copy) }
            try context.expectOpenFails(
                copy,
                schema: ConformanceSchema.v1,
                codes: [.corruptStore, .notAStore],
                "a copy of a real store truncated to \(what) (\(length) of \(bytes.count) bytes)"
            )
        }
        let reopened = try context.open(url)
        _ = try context.allRecords(reopened)
        reopened.close()
    }
}
