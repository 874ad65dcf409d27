import Foundation
import Persistence

extension Checks {
    static func creation(_ context: CheckContext) throws {
        let url = context.url()
        let files = context.storeType.files(at: url)
        try context.expect(
            files.first.map { context.samePath($0, url) } ?? false,
            "files(at:) does not list the main file first",
            expected: url.path,
            actual: files.map(\.path).description
        )
        try context.expect(
            Set(files.map(\.path)).count == files.count,
            "files(at:) lists a file twice",
            actual: files.map(\.path).description
        )
        try context.expect(!FileManager.default.fileExists(atPath: url.path), "files(at:) created the file")

        let store = try context.open(url)
        try context.expect(
            context.samePath(store.url, url),
            "the store's url is not where it was opened",
            expected: url.path,
            actual: store.url.path
        )
        try context.expect(store.schema == ConformanceSchema.v1, "the store's schema is not the one it was opened with")
        try context.expect(
            FileManager.default.fileExists(atPath: url.path),
            "opening a new store did not create its main file at \(url.path)"
        )
        let metadata = try context.metadata(store)
        try context.expect(
            metadata.schemaVersion == 1,
            "a new store's metadata has the wrong schema version",
            expected: "1",
            actual: "\(metadata.schemaVersion)"
        )
        try context.expect(
            metadata.entries.isEmpty,
            "a new store's metadata has entries",
            expected: "[:]",
            actual: "\(metadata.entries)"
        )
        for entity in ConformanceSchema.entityNames {
            let records = try context.fetch(store, FetchRequest(entity: entity))
            try context.expect(
                records.isEmpty,
                "a new store holds \(entity) records",
                expected: "none",
                actual: "\(records.count)"
            )
            let count = try context.step("counting \(entity)") { try store.count(for: FetchRequest(entity: entity)) }
            try context.expect(count == 0, "a new store counts \(entity) records", expected: "0", actual: "\(count)")
        }
        store.close()

        let reopened = try context.open(url)
        let again = try context.metadata(reopened)
        try context.expect(
            again.storeIdentifier == metadata.storeIdentifier,
            "the store identifier changed across close and reopen",
            expected: "\(metadata.storeIdentifier)",
            actual: "\(again.storeIdentifier)"
        )
        try context.expect(
            again.schemaVersion == 1,
            "the schema version changed across close and reopen",
            expected: "1",
            actual: "\(again.schemaVersion)"
        )
        reopened.close()

        let other = try context.open(context.url("other"))
        let otherMetadata = try context.metadata(other)
        try context.expect(
            otherMetadata.storeIdentifier != metadata.storeIdentifier,
            "two new stores share a store identifier",
            actual: "\(metadata.storeIdentifier)"
        )
        other.close()
    }

    /// Item records that together hold every edge value of every attribute type.
    static func edgeValueItems() -> [Record] {
        let texts: [Value] = [
            "", "plain", "é", "e\u{301}", "É", "日本語🙂", "a\u{0}b", "line\nbreak\ttab\r", "'\";-- DROP", "%_\\*?[",
            .string(String(repeating: "long ", count: 2_000)),
        ]
        let numbers: [Value] = [.integer(.min), .integer(.max), 0, -1, 1, .integer(1 << 53 + 1)]
        let amounts: [Value] = [
            .double(-0.0), .double(0.0), .double(.greatestFiniteMagnitude), .double(-.greatestFiniteMagnitude),
            .double(.leastNonzeroMagnitude), .double(-.leastNormalMagnitude), .double(0.1), .double(1.0 / 3.0),
            .double(.pi),
            .double(9_007_199_254_740_992), .double(-1e-300),
        ]
        let dates: [Value] = [
            .date(Date(timeIntervalSinceReferenceDate: 123456.789012)), .date(Date(timeIntervalSince1970: 0)),
            .date(Date(timeIntervalSinceReferenceDate: -0.5)), .date(Date(timeIntervalSince1970: 1_700_000_000.123456)),
            .date(Date(timeIntervalSince1970: -1_000_000_000.25)), .date(Date(timeIntervalSinceReferenceDate: 0)),
        ]
        let blobs: [Value] = [
            .data(Data()), .data(Data([0])), .data(Data(0...255)),
            .data(Data((0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7919) })),
        ]
        let keys: [Value] = [
            .uuid(UUID(uuidString: "00000000-0000-0000-0000-000000000000")!),
            .uuid(UUID(uuidString: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")!),
            .uuid(UUID(uuidString: "6C0A7E1B-9D34-4F52-8B1E-3C5F0D2A9E47")!),
        ]
        let flags: [Value] = [true, false]
        let titles: [Value] = ["", "untitled", "Ünïcödé"]
        let rows = [texts.count, numbers.count, amounts.count, dates.count, blobs.count, keys.count].max()!
        var records: [Record] = []
        for row in 0..<rows {
            var record = Record(id: ObjectID.deterministic(entity: "Item", name: "edge \(row)"))
            record["text"] = texts[row % texts.count]
            record["number"] = numbers[row % numbers.count]
            record["amount"] = amounts[row % amounts.count]
            record["flag"] = flags[row % flags.count]
            record["when"] = dates[row % dates.count]
            record["blob"] = blobs[row % blobs.count]
            record["key"] = keys[row % keys.count]
            record["title"] = titles[row % titles.count]
            records.append(record)
        }
        // Every attribute null next to one with only empty values.
        records.append(Record(id: ObjectID.deterministic(entity: "Item", name: "all null"), values: ["title": "t"]))
        records.append(
            Record(
                id: ObjectID.deterministic(entity: "Item", name: "empty"),
                values: ["text": "", "blob": .data(Data()), "title": ""]
            )
        )
        return records
    }

    /// Commits `records`, then checks they read back from the same object, from a fresh one
    /// after closing, and by id.
    static func expectRoundTrip(_ context: CheckContext, _ records: [Record], _ what: String) throws {
        let url = context.url()
        let store = try context.open(url)
        try context.commit(store, StoreChanges(inserts: records), what)
        try context.expectContents(store, records, "(\(what), same object)")
        let byID = try context.step("records(with:)") { try store.records(with: records.map(\.id)) }
        if let difference = RecordComparison.difference(expected: records, actual: byID) {
            throw context.failure("records(with:) differs from what was committed (\(what)):\n    \(difference)")
        }
        store.close()
        let reopened = try context.open(url)
        try context.expectContents(reopened, records, "(\(what), after close and reopen)")
        reopened.close()
    }

    static func roundTripAttributes(_ context: CheckContext) throws {
        try expectRoundTrip(context, edgeValueItems(), "edge values of every attribute type")
    }

    static func roundTripNonFiniteDoubles(_ context: CheckContext) throws {
        let records = [Double.infinity, -.infinity, .nan].enumerated().map { index, number in
            Record(
                id: ObjectID.deterministic(entity: "Item", name: "non-finite \(index)"),
                values: ["amount": .double(number), "title": "x"]
            )
        }
        try expectRoundTrip(context, records, "infinite and NaN doubles")
    }

    /// Owners, items and labels whose relationships point at each other consistently.
    static func relatedRecords() -> [Record] {
        func id(_ entity: String, _ name: String) -> ObjectID { .deterministic(entity: entity, name: name) }
        let (o1, o2) = (id("Owner", "o1"), id("Owner", "o2"))
        let (l1, l2, l3) = (id("Label", "l1"), id("Label", "l2"), id("Label", "l3"))
        let (i1, i2, i3) = (id("Item", "i1"), id("Item", "i2"), id("Item", "i3"))
        let many = (0..<60).map { id("Item", "many \($0)") }
        var records = [
            Record(id: o1, values: ["name": "one", "rank": 1], toMany: ["items": Set([i1, i2] + many)]),
            Record(id: o2, values: ["name": "two", "rank": 2]),
            Record(id: i1, values: ["title": "i1"], toOne: ["owner": o1], toMany: ["labels": [l1, l2]]),
            Record(id: i2, values: ["title": "i2"], toOne: ["owner": o1], toMany: ["labels": [l1]]),
            Record(id: i3, values: ["title": "i3"]),
            Record(id: l1, values: ["name": "l1"], toMany: ["items": [i1, i2]]),
            Record(id: l2, values: ["name": "l2"], toMany: ["items": [i1]]),
            Record(id: l3, values: ["name": "l3"]),
        ]
        records += many.map { Record(id: $0, values: ["title": "many"], toOne: ["owner": o1]) }
        return records
    }

    static func roundTripRelationships(_ context: CheckContext) throws {
        try expectRoundTrip(context, relatedRecords(), "to-one, to-many and many-to-many relationships")
    }

    static func insertReplaces(_ context: CheckContext) throws {
        let url = context.url()
        let store = try context.open(url)
        var records = relatedRecords()
        try context.commit(store, StoreChanges(inserts: records), "the first version of the records")
        let index = records.firstIndex { $0.id == .deterministic(entity: "Item", name: "i1") }!
        // The same id again, with fewer values and other relationships: replaces, does not merge.
        let replacement = Record(
            id: records[index].id,
            values: ["text": "replaced", "title": "new"],
            toMany: ["labels": [.deterministic(entity: "Label", name: "l1")]]
        )
        records[index] = replacement
        try context.commit(store, StoreChanges(inserts: [replacement]), "an insert of an existing id")
        try context.expectContents(store, records, "after inserting an existing id (it must replace the record whole)")
        store.close()
        let reopened = try context.open(url)
        try context.expectContents(reopened, records, "after inserting an existing id, then reopening")
        reopened.close()
    }

    static func propertyUpdates(_ context: CheckContext) throws {
        func id(_ entity: String, _ name: String) -> ObjectID { .deterministic(entity: entity, name: name) }
        let (o1, o2) = (id("Owner", "o1"), id("Owner", "o2"))
        let (l1, l2, l3) = (id("Label", "l1"), id("Label", "l2"), id("Label", "l3"))
        let item = id("Item", "item")
        var full = edgeValueItems()[0]
        full.id = item
        full.toOne["owner"] = o1
        full.toMany["labels"] = [l1, l2]
        var model: [ObjectID: Record] = [:]
        for record in [
            full,
            Record(id: o1, values: ["name": "o1"], toMany: ["items": [item]]), Record(id: o2, values: ["name": "o2"]),
            Record(id: l1, values: ["name": "l1"], toMany: ["items": [item]]),
            Record(id: l2, values: ["name": "l2"], toMany: ["items": [item]]),
            Record(id: l3, values: ["name": "l3"]),
        ] { model[record.id] = record }
        let url = context.url()
        let store = try context.open(url)
        try context.commit(store, StoreChanges(inserts: Array(model.values)), "the records to update")
        let steps: [(String, [RecordUpdate])] = [
            (
                "set one value, clear another with null, move the to-one, replace the to-many",
                [
                    RecordUpdate(
                        id: item,
                        values: ["text": "updated", "number": .null],
                        toOne: ["owner": o2],
                        toMany: ["labels": [l3]]
                    ),
                    RecordUpdate(id: o1, toMany: ["items": []]), RecordUpdate(id: o2, toMany: ["items": [item]]),
                    RecordUpdate(id: l1, toMany: ["items": []]), RecordUpdate(id: l2, toMany: ["items": []]),
                    RecordUpdate(id: l3, toMany: ["items": [item]]),
                ]
            ),
            (
                "set the to-one to nil and empty the to-many",
                [
                    RecordUpdate(id: item, toOne: ["owner": ObjectID?.none], toMany: ["labels": []]),
                    RecordUpdate(id: o2, toMany: ["items": []]), RecordUpdate(id: l3, toMany: ["items": []]),
                ]
            ),
            (
                "set a double attribute, a required value to null, and values of every type",
                [
                    RecordUpdate(
                        id: item,
                        values: [
                            "amount": .double(3), "title": .null, "flag": false,
                            "when": .date(Date(timeIntervalSinceReferenceDate: -987.654321)),
                            "blob": .data(Data()),
                            "key": .uuid(UUID(uuidString: "00000000-0000-0000-0000-000000000001")!), "text": "",
                        ]
                    ),
                    RecordUpdate(id: o1, values: ["rank": .integer(.min)]),
                ]
            ),
            (
                "an empty update and one that sets a value to what it already is",
                [
                    RecordUpdate(id: l1), RecordUpdate(id: l2, values: ["name": "l2"]),
                ]
            ),
        ]
        for (what, updates) in steps {
            for update in updates { model[update.id] = update.applied(to: model[update.id]!) }
            try context.commit(store, StoreChanges(updates: updates), "updates: \(what)")
            try context.expectContents(store, Array(model.values), "after updates that \(what)")
        }
        store.close()
        let reopened = try context.open(url)
        try context.expectContents(reopened, Array(model.values), "after the updates and reopening")
        reopened.close()
    }

    static func commitOrder(_ context: CheckContext) throws {
        func item(_ name: String, _ text: Value = "x") -> Record {
            Record(id: .deterministic(entity: "Item", name: name), values: ["title": .string(name), "text": text])
        }
        let (a, b, c, d) = (item("a"), item("b"), item("c"), item("d"))
        let missing = ObjectID.deterministic(entity: "Item", name: "missing")
        let store = try context.open(context.url())
        try context.commit(store, StoreChanges(inserts: [a, b]), "two records")
        try context.commit(
            store,
            StoreChanges(
                inserts: [c],
                updates: [
                    RecordUpdate(id: c.id, values: ["text": "updated"]),
                    RecordUpdate(id: missing, values: ["text": "ghost"]),
                ],
                deletes: [b.id, missing, .deterministic(entity: "Owner", name: "missing")]
            ),
            "an insert updated in the same commit, an update of a missing record, deletes of an existing and missing ids"
        )
        var updatedC = c
        updatedC["text"] = "updated"
        try context.expectContents(
            store,
            [a, updatedC],
            "after a commit that inserts and updates c, updates a missing record (dropped: it must not be created), deletes b and two missing ids"
        )
        try context.commit(
            store,
            StoreChanges(inserts: [d], updates: [RecordUpdate(id: d.id, values: ["text": "late"])], deletes: [d.id]),
            "an insert, update and delete of one id"
        )
        try context.commit(
            store,
            StoreChanges(updates: [RecordUpdate(id: a.id, values: ["text": "late"])], deletes: [a.id]),
            "an update and a delete of one id"
        )
        try context.expectContents(
            store,
            [updatedC],
            "after commits that insert-update-delete d and update-delete a (deletes come last)"
        )
        try context.commit(store, StoreChanges(), "an empty commit")
        try context.commit(store, StoreChanges(deletes: [missing]), "a delete of a missing id only")
        try context.commit(
            store,
            StoreChanges(updates: [RecordUpdate(id: missing, values: ["text": "ghost"])]),
            "an update of a missing id only"
        )
        try context.expectContents(store, [updatedC], "after an empty commit, a delete and an update of a missing id")
        store.close()
    }

    static func incompleteRecordsAccepted(_ context: CheckContext) throws {
        let records = [
            Record(id: .deterministic(entity: "Owner", name: "nameless")),
            Record(id: .deterministic(entity: "Label", name: "nameless"), values: ["name": .null]),
            Record(id: .deterministic(entity: "Item", name: "untitled"), values: ["number": 5]),
        ]
        try expectRoundTrip(context, records, "records missing required values (no defaults filled in)")
    }

    static func metadataEntries(_ context: CheckContext) throws {
        let url = context.url()
        let store = try context.open(url)
        let original = try context.metadata(store)
        let record = Record(id: .deterministic(entity: "Item", name: "m"), values: ["title": "m"])
        var expected: [String: Data] = ["concord.clock": Data("1".utf8), "empty": Data()]
        try context.commit(
            store,
            StoreChanges(inserts: [record], metadataEntries: expected.mapValues { $0 }),
            "a record with two metadata entries"
        )
        func expectEntries(_ store: any PersistentStore, _ when: String) throws {
            let metadata = try context.metadata(store)
            try context.expect(
                metadata.entries == expected,
                "metadata entries differ \(when)",
                expected: "\(expected)",
                actual: "\(metadata.entries)"
            )
            try context.expect(
                metadata.storeIdentifier == original.storeIdentifier,
                "the store identifier changed \(when)",
                expected: "\(original.storeIdentifier)",
                actual: "\(metadata.storeIdentifier)"
            )
            try context.expect(
                metadata.schemaVersion == original.schemaVersion,
                "the schema version changed \(when)",
                expected: "\(original.schemaVersion)",
                actual: "\(metadata.schemaVersion)"
            )
        }
        try expectEntries(store, "after a commit that sets two (one of them empty data)")
        let big = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try context.commit(
            store,
            StoreChanges(metadataEntries: ["concord.clock": nil, "big": big, "absent": nil]),
            "a metadata-only commit"
        )
        expected["concord.clock"] = nil
        expected["big"] = big
        try expectEntries(store, "after a metadata-only commit that removes one, sets one and removes a missing one")
        try context.commit(
            store,
            StoreChanges(deletes: [record.id], metadataEntries: ["empty": Data([1])]),
            "a delete with a metadata entry"
        )
        expected["empty"] = Data([1])
        try expectEntries(store, "after a delete that sets an entry")
        store.close()
        let reopened = try context.open(url)
        try expectEntries(reopened, "after reopening")
        try context.expectContents(reopened, [], "after deleting the only record and reopening")
        reopened.close()
    }

    static func metadataPrefixes(_ context: CheckContext) throws {
        let url = context.url()
        let store = try context.open(url)
        // Keys with and around the prefix: the prefix itself, a longer name, multi-byte scalars
        // (ordered by their UTF-8 bytes), and neighbours on both sides.
        let inside =
            ["p/", "p/a", "p/b", "p/b/c", "p/z", "p/\u{E9}", "p/\u{1F600}"]
            + (0..<25).map { "p/n\($0 < 10 ? "0" : "")\($0)" }
        let outside = ["p", "o/z", "p.", "q/", "pp/", "P/a"]
        var entries: [String: Data?] = [:]
        for (index, key) in (inside + outside).enumerated() { entries[key] = .some(Data([UInt8(index)])) }
        try context.commit(store, StoreChanges(metadataEntries: entries), "metadata entries with and without a prefix")
        let expected = inside.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        func walk(_ store: any PersistentStore, batch: Int) throws -> [String] {
            var keys: [String] = []
            var last: String?
            while true {
                let page = try context.step("reading metadata by prefix") {
                    try store.metadataEntries(withPrefix: "p/", after: last, limit: batch)
                }
                try context.expect(
                    page.count <= batch,
                    "a page of metadata entries is longer than its limit",
                    expected: "\(batch)",
                    actual: "\(page.count)"
                )
                for (key, value) in page {
                    try context.expect(
                        entries[key] == .some(value),
                        "a metadata entry read by prefix has the wrong value",
                        expected: "\(String(describing: entries[key]))",
                        actual: "\(key): \(value)"
                    )
                }
                keys += page.map(\.key)
                guard page.count == batch, let next = page.last?.key else { return keys }
                last = next
            }
        }
        for batch in [1, 7, 1000] {
            let keys = try walk(store, batch: batch)
            try context.expect(
                keys == expected,
                "metadata entries by prefix (pages of \(batch)) differ",
                expected: "\(expected)",
                actual: "\(keys)"
            )
        }
        try context.commit(store, StoreChanges(metadataEntries: ["p/b": nil]), "removing one entry")
        store.close()
        let reopened = try context.open(url)
        let after = try walk(reopened, batch: 5)
        let remaining = expected.filter { $0 != "p/b" }
        try context.expect(
            after == remaining,
            "metadata entries by prefix after a removal and reopening differ",
            expected: "\(remaining)",
            actual: "\(after)"
        )
        let none = try context.step("reading metadata by an absent prefix") {
            try reopened.metadataEntries(withPrefix: "absent/", after: nil, limit: 10)
        }
        try context.expect(
            none.isEmpty,
            "an absent prefix has metadata entries",
            expected: "[]",
            actual: "\(none.map(\.key))"
        )
        reopened.close()
    }

    static func invalidCommitsChangeNothing(_ context: CheckContext) throws {
        let url = context.url()
        let store = try context.open(url)
        let seed = relatedRecords()
        try context.commit(
            store,
            StoreChanges(inserts: seed, metadataEntries: ["m": Data("1".utf8)]),
            "the seed records"
        )
        let before = try context.metadata(store)
        let i1 = ObjectID.deterministic(entity: "Item", name: "i1")
        let label = ObjectID.deterministic(entity: "Label", name: "l1")
        let newItem = Record(id: .deterministic(entity: "Item", name: "new"), values: ["title": "new"])
        let valid = StoreChanges(
            inserts: [newItem],
            updates: [RecordUpdate(id: i1, values: ["text": "changed"])],
            deletes: [.deterministic(entity: "Item", name: "i2")],
            metadataEntries: ["m": Data("2".utf8), "n": Data("3".utf8)]
        )
        let cases: [(String, (inout StoreChanges) -> Void)] = [
            (
                "an update of an attribute the entity lacks",
                { $0.updates.append(RecordUpdate(id: i1, values: ["nope": "x"])) }
            ),
            (
                "an update with a string for an integer",
                { $0.updates.append(RecordUpdate(id: i1, values: ["number": "x"])) }
            ),
            (
                "an update with a double for an integer",
                { $0.updates.append(RecordUpdate(id: i1, values: ["number": 1.5])) }
            ),
            (
                "an update with an integer for a double",
                { $0.updates.append(RecordUpdate(id: i1, values: ["amount": .integer(2)])) }
            ),
            (
                "an update with a boolean for a date",
                { $0.updates.append(RecordUpdate(id: i1, values: ["when": true])) }
            ),
            (
                "an update setting a to-one on a to-many relationship",
                { $0.updates.append(RecordUpdate(id: i1, toOne: ["labels": ObjectID?.none])) }
            ),
            (
                "an update setting a to-many on a to-one relationship",
                { $0.updates.append(RecordUpdate(id: i1, toMany: ["owner": []])) }
            ),
            (
                "an update of a relationship the entity lacks",
                { $0.updates.append(RecordUpdate(id: i1, toOne: ["nope": label])) }
            ),
            (
                "an update of a record of an unknown entity",
                {
                    $0.updates.append(
                        RecordUpdate(id: .deterministic(entity: "Nope", name: "x"), values: ["text": "x"])
                    )
                }
            ),
            (
                "an insert of an unknown entity",
                { $0.inserts.append(Record(id: .deterministic(entity: "Nope", name: "x"))) }
            ),
            (
                "an insert with a value of the wrong type",
                {
                    $0.inserts.append(
                        Record(id: .deterministic(entity: "Item", name: "bad"), values: ["title": "t", "flag": 1])
                    )
                }
            ),
            (
                "an insert with an attribute the entity lacks",
                {
                    $0.inserts.append(
                        Record(id: .deterministic(entity: "Item", name: "bad"), values: ["title": "t", "nope": 1])
                    )
                }
            ),
            (
                "an insert whose to-one points at the wrong entity",
                {
                    $0.inserts.append(
                        Record(
                            id: .deterministic(entity: "Item", name: "bad"),
                            values: ["title": "t"],
                            toOne: ["owner": label]
                        )
                    )
                }
            ),
            ("a delete of an unknown entity", { $0.deletes.append(.deterministic(entity: "Nope", name: "x")) }),
        ]
        for (what, spoil) in cases {
            var changes = valid
            spoil(&changes)
            try context.expectError(
                [.invalidRequest],
                "a commit with \(what) (after valid inserts, updates, deletes and metadata)"
            ) {
                try store.commit(changes)
            }
            try context.expectContents(
                store,
                seed,
                "after a failed commit with \(what): a failed commit must change nothing"
            )
            let after = try context.metadata(store)
            try context.expect(
                after == before,
                "metadata changed after a failed commit with \(what)",
                expected: "\(before)",
                actual: "\(after)"
            )
        }
        store.close()
        let reopened = try context.open(url)
        try context.expectContents(reopened, seed, "after the failed commits and reopening")
        let after = try context.metadata(reopened)
        try context.expect(
            after == before,
            "metadata changed after the failed commits and reopening",
            expected: "\(before)",
            actual: "\(after)"
        )
        reopened.close()
    }
}
