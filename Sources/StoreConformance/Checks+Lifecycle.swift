import Foundation
import Persistence
import Synchronization

extension Checks {
    static func closedStore(_ context: CheckContext) throws {
        let url = context.url()
        let store = try context.open(url)
        let records = relatedRecords()
        try context.commit(store, StoreChanges(inserts: records), "records before closing")
        store.close()
        store.close()
        try context.expect(
            context.samePath(store.url, url),
            "a closed store's url changed",
            expected: url.path,
            actual: store.url.path
        )
        let calls: [(String, () throws -> Void)] = [
            ("metadata()", { _ = try store.metadata() }),
            ("fetch(_:)", { _ = try store.fetch(FetchRequest(entity: "Item")) }),
            ("count(for:)", { _ = try store.count(for: FetchRequest(entity: "Item")) }),
            ("records(with:)", { _ = try store.records(with: [records[0].id]) }),
            ("commit(_:)", { try store.commit(StoreChanges(deletes: [records[0].id])) }),
            ("an empty commit(_:)", { try store.commit(StoreChanges()) }),
        ]
        for (what, call) in calls {
            try context.expectError([.storeClosed], "\(what) on a closed store", call)
        }
        store.close()
        let reopened = try context.open(url)
        try context.expectContents(reopened, records, "after closing (three times) and reopening")
        reopened.close()
    }

    static func persistence(_ context: CheckContext) throws {
        context.distinguishesZeroSign = false
        let url = context.url()
        var random = SeededGenerator(seed: 11)
        let corpus = differentialCorpus(&random, items: 120)
        let store = try context.open(url)
        var model: [ObjectID: Record] = [:]
        for (index, record) in corpus.enumerated() where index % 3 != 0 { model[record.id] = record }
        try context.commit(
            store,
            StoreChanges(inserts: Array(model.values), metadataEntries: ["state": Data("one".utf8)]),
            "the first records"
        )
        let late = corpus.enumerated().filter { $0.offset % 3 == 0 }.map(\.element)
        for record in late { model[record.id] = record }
        try context.commit(
            store,
            StoreChanges(inserts: late, metadataEntries: ["state": Data("two".utf8)]),
            "more records"
        )
        // What a crash leaves: another object opened while this one is still open, never closed.
        let witness = try context.open(
            url,
            options: StoreOptions(presentsFiles: false, settings: context.options.settings)
        )
        try context.expectContents(
            witness,
            Array(model.values),
            "in another object opened while the committing one is still open (what survives a crash)"
        )
        let metadata = try context.metadata(witness)
        try context.expect(
            metadata.entries["state"] == Data("two".utf8),
            "the last committed metadata is not on disk before the committing object is closed",
            expected: "state = two",
            actual: "\(metadata.entries)"
        )
        witness.close()
        store.close()
        for round in 1...2 {
            let reopened = try context.open(url)
            try context.expectContents(reopened, Array(model.values), "after close and reopen #\(round)")
            reopened.close()
        }
    }

    static func concurrentCommitsOneObject(_ context: CheckContext) throws {
        let url = context.url()
        let store = try context.open(url)
        let threads = 4
        let perThread = 15
        let errors = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in 0..<perThread {
                let record = Record(
                    id: .deterministic(entity: "Item", name: "t\(thread)-\(index)"),
                    values: ["number": .integer(Int64(index)), "title": .string("t\(thread)")]
                )
                do {
                    try store.commit(
                        StoreChanges(inserts: [record], metadataEntries: ["thread \(thread)": Data([UInt8(index)])])
                    )
                    _ = try store.fetch(
                        FetchRequest(entity: "Item", predicate: Field("title") == .string("t\(thread)"))
                    )
                    _ = try store.count(for: FetchRequest(entity: "Item"))
                } catch {
                    errors.withLock { $0.append("thread \(thread), commit \(index): \(error)") }
                }
            }
        }
        if let first = errors.withLock({ $0.first }) {
            throw context.failure("a call from one of \(threads) concurrent threads threw: \(first)")
        }
        let expected = (0..<threads).flatMap { thread in
            (0..<perThread).map {
                Record(
                    id: .deterministic(entity: "Item", name: "t\(thread)-\($0)"),
                    values: ["number": .integer(Int64($0)), "title": .string("t\(thread)")]
                )
            }
        }
        try context.expectContents(
            store,
            expected,
            "after \(threads) threads each committed \(perThread) records through one object"
        )
        let entries = try context.metadata(store).entries
        let expectedEntries = Dictionary(
            uniqueKeysWithValues: (0..<threads).map { ("thread \($0)", Data([UInt8(perThread - 1)])) }
        )
        try context.expect(
            entries == expectedEntries,
            "metadata entries committed from concurrent threads were lost",
            expected: "\(expectedEntries)",
            actual: "\(entries)"
        )
        store.close()
        let reopened = try context.open(url)
        try context.expectContents(reopened, expected, "after concurrent commits and reopening")
        reopened.close()
    }

    static func readOnly(_ context: CheckContext) throws {
        var readOnly = context.options
        readOnly.isReadOnly = true
        // A missing store opened read-only: an error, or a store that creates nothing.
        let missing = context.url("missing")
        do {
            let store = try context.storeType.init(url: missing, schema: ConformanceSchema.v1, options: readOnly)
            try context.expectError([.readOnly], "a commit to a read-only store that did not exist") {
                try store.commit(StoreChanges(inserts: [Record(id: .deterministic(entity: "Item", name: "x"))]))
            }
            _ = try? store.fetch(FetchRequest(entity: "Item"))
            store.close()
        } catch let failure as ConformanceFailure {
            throw failure
        } catch {
            guard error is PersistenceError else {
                throw context.failure(
                    "opening a missing store read-only threw an error that is not a PersistenceError",
                    actual: "\(error)"
                )
            }
        }
        try context.expectDirectoryUnchanged([:], "after opening a missing store read-only")

        let url = context.url()
        let records = relatedRecords()
        let writer = try context.open(url)
        try context.commit(
            writer,
            StoreChanges(inserts: records, metadataEntries: ["m": Data([1])]),
            "records for the read-only store"
        )
        let metadata = try context.metadata(writer)
        writer.close()
        let before = context.directoryContents()
        let store = try context.open(url, options: readOnly)
        try context.expectContents(store, records, "in a read-only store")
        let readMetadata = try context.metadata(store)
        try context.expect(
            readMetadata == metadata,
            "a read-only store's metadata differs",
            expected: "\(metadata)",
            actual: "\(readMetadata)"
        )
        let changes: [(String, StoreChanges)] = [
            (
                "an insert",
                StoreChanges(inserts: [Record(id: .deterministic(entity: "Item", name: "new"), values: ["title": "x"])])
            ),
            ("an update", StoreChanges(updates: [RecordUpdate(id: records[0].id, values: ["rank": 9])])),
            ("a delete", StoreChanges(deletes: [records[0].id])),
            ("a metadata entry", StoreChanges(metadataEntries: ["m": nil])),
        ]
        for (what, change) in changes {
            try context.expectError([.readOnly], "\(what) committed to a read-only store") { try store.commit(change) }
        }
        try context.expectContents(store, records, "in a read-only store after refused commits")
        store.close()
        try context.expectDirectoryUnchanged(before, "by a read-only store")
    }
}
