import Foundation
import Persistence
import Synchronization

extension Checks {
    /// Polls `body` until it returns true or `timeout` seconds pass: a store that presents its
    /// files may serve what it last read until its presenter has heard of the change.
    static func eventually(_ timeout: TimeInterval, _ body: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if try body() { return true }
            if Date() >= deadline { return false }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    /// Fails unless `store` comes to hold exactly `expected` (every entity) and the metadata
    /// `entries`, at once when it does not present its files, within the event timeout when it
    /// does.
    static func expectEventually(
        _ context: CheckContext,
        _ store: any PersistentStore,
        presents: Bool,
        _ expected: [Record],
        entries: [String: Data],
        _ when: String
    ) throws {
        let timeout = presents ? context.eventTimeout : 0
        var last: (records: [Record], entries: [String: Data]) = ([], [:])
        let matched = try eventually(timeout) {
            last = (try context.allRecords(store), try context.metadata(store).entries)
            return RecordComparison.difference(expected: expected, actual: last.records) == nil
                && last.entries == entries
        }
        if !matched {
            let difference = RecordComparison.difference(expected: expected, actual: last.records)
            throw context.failure(
                "\(when), the other store object \(presents ? "did not show it within \(context.eventTimeout) s" : "does not show it on its next fetch")"
                    + (difference.map { ":\n    \($0)" } ?? ": its metadata entries differ"),
                expected: "entries \(entries)",
                actual: "entries \(last.entries)"
            )
        }
    }

    static func sharedFileVisibility(_ context: CheckContext) throws {
        let url = context.url()
        let presents = context.options.presentsFiles
        let first = try context.open(url)
        let second = try context.open(url)
        let identifier = try context.metadata(first).storeIdentifier
        let otherIdentifier = try context.metadata(second).storeIdentifier
        try context.expect(
            identifier == otherIdentifier,
            "two objects on one file disagree on the store identifier",
            expected: "\(identifier)",
            actual: "\(otherIdentifier)"
        )
        var model: [ObjectID: Record] = [:]
        var entries: [String: Data] = [:]
        let records = relatedRecords()
        for record in records { model[record.id] = record }
        entries["first"] = Data([1])
        try context.commit(
            first,
            StoreChanges(inserts: records, metadataEntries: ["first": Data([1])]),
            "records through the first object"
        )
        try expectEventually(
            context,
            second,
            presents: presents,
            Array(model.values),
            entries: entries,
            "after the first object committed records"
        )

        let update = RecordUpdate(id: records[0].id, values: ["rank": 99])
        model[update.id] = update.applied(to: model[update.id]!)
        let deleted = records[2].id
        model[deleted] = nil
        entries["second"] = Data([2])
        entries["first"] = nil
        try context.commit(
            second,
            StoreChanges(updates: [update], deletes: [deleted], metadataEntries: ["second": Data([2]), "first": nil]),
            "an update, a delete and metadata through the second object"
        )
        try expectEventually(
            context,
            first,
            presents: presents,
            Array(model.values),
            entries: entries,
            "after the second object committed an update and a delete"
        )

        // Closing one object leaves the other working.
        second.close()
        let late = Record(id: .deterministic(entity: "Item", name: "late"), values: ["title": "late"])
        model[late.id] = late
        try context.commit(first, StoreChanges(inserts: [late]), "a record after the other object closed")
        try context.expectContents(first, Array(model.values), "after the other object on the file closed")
        first.close()
        let reopened = try context.open(url)
        try context.expectContents(reopened, Array(model.values), "after both objects closed and the store reopened")
        reopened.close()
    }

    static func sharedFileNoLostUpdates(_ context: CheckContext) throws {
        let url = context.url()
        let first = try context.open(url)
        let second = try context.open(url)
        @Sendable func item(_ name: String) -> Record {
            Record(id: .deterministic(entity: "Item", name: name), values: ["title": .string(name), "number": 1])
        }
        var model: [ObjectID: Record] = [:]
        let shared = [item("shared a"), item("shared b")]
        for record in shared { model[record.id] = record }
        try context.commit(first, StoreChanges(inserts: shared), "two records both objects update")
        // In turn, with no fetch in between: a whole-file store must re-read before it writes.
        let steps: [(any PersistentStore, StoreChanges)] = [
            (first, StoreChanges(inserts: [item("from first")], metadataEntries: ["first": Data([1])])),
            (second, StoreChanges(inserts: [item("from second")], metadataEntries: ["second": Data([2])])),
            (first, StoreChanges(updates: [RecordUpdate(id: shared[0].id, values: ["text": "first's"])])),
            (second, StoreChanges(updates: [RecordUpdate(id: shared[1].id, values: ["text": "second's"])])),
            (first, StoreChanges(updates: [RecordUpdate(id: shared[1].id, values: ["number": 2])])),
            (
                second,
                StoreChanges(
                    updates: [RecordUpdate(id: shared[0].id, values: ["number": 3])],
                    deletes: [item("from first").id]
                )
            ),
        ]
        var entries: [String: Data] = [:]
        for (index, (store, changes)) in steps.enumerated() {
            for record in changes.inserts { model[record.id] = record }
            for update in changes.updates { model[update.id] = model[update.id].map(update.applied) }
            for id in changes.deletes { model[id] = nil }
            for (key, value) in changes.metadataEntries { entries[key] = value }
            try context.commit(store, changes, "step \(index + 1) of commits taking turns between two objects")
        }
        // At once, from two threads, each through its own object.
        let errors = Mutex<[String]>([])
        let stores = [first, second]
        let perThread = 12
        DispatchQueue.concurrentPerform(iterations: 2) { which in
            for index in 0..<perThread {
                let record = item("concurrent \(which)-\(index)")
                do {
                    try stores[which].commit(
                        StoreChanges(inserts: [record], metadataEntries: ["concurrent \(which)": Data([UInt8(index)])])
                    )
                } catch {
                    errors.withLock { $0.append("object \(which + 1), commit \(index): \(error)") }
                }
            }
        }
        if let error = errors.withLock({ $0.first }) {
            throw context.failure("a concurrent commit through one of two objects threw: \(error)")
        }
        for which in 0..<2 {
            for index in 0..<perThread {
                model[item("concurrent \(which)-\(index)").id] = item("concurrent \(which)-\(index)")
            }
            entries["concurrent \(which)"] = Data([UInt8(perThread - 1)])
        }
        first.close()
        second.close()
        let reopened = try context.open(url)
        try context.expectContents(
            reopened,
            Array(model.values),
            "after two objects on one file committed disjoint changes in turn and at once (a lost update means one object wrote over the other's commit)"
        )
        let actual = try context.metadata(reopened).entries
        try context.expect(
            actual == entries,
            "metadata entries committed by two objects on one file were lost",
            expected: "\(entries)",
            actual: "\(actual)"
        )
        reopened.close()
    }

    static func sharedFileEvents(_ context: CheckContext) throws {
        guard context.options.presentsFiles else { return }
        let url = context.url()
        let first = try context.open(url)
        let second = try context.open(url)
        let firstEvents = context.recordEvents(of: first)
        let secondEvents = context.recordEvents(of: second)
        defer {
            first.events.removeListener(firstEvents.token ?? 0)
            second.events.removeListener(secondEvents.token ?? 0)
            first.close()
            second.close()
        }
        let record = Record(id: .deterministic(entity: "Item", name: "one"), values: ["title": "one"])
        try context.commit(first, StoreChanges(inserts: [record]), "a record through the first object")
        guard let event = secondEvents.wait(timeout: context.eventTimeout, for: { $0.kind == .changedExternally })
        else {
            throw context.failure(
                "the second object did not report changedExternally within \(context.eventTimeout) s of the first one's commit",
                expected: "changedExternally",
                actual: "\(secondEvents.all)"
            )
        }
        try context.expect(
            context.samePath(event.url, url),
            "the changedExternally event names another file",
            expected: url.path,
            actual: event.url.path
        )
        try context.expect(
            event.storeType == context.typeName,
            "the event names another store type",
            expected: context.typeName,
            actual: event.storeType
        )
        let identifier = try context.metadata(second).storeIdentifier
        try context.expect(
            event.storeIdentifier == identifier,
            "the event names another store identifier",
            expected: "\(identifier)",
            actual: "\(event.storeIdentifier)"
        )
        try context.expectContents(second, [record], "right after the second object reported changedExternally")

        let other = Record(id: .deterministic(entity: "Item", name: "two"), values: ["title": "two"])
        try context.commit(second, StoreChanges(inserts: [other]), "a record through the second object")
        guard firstEvents.wait(timeout: context.eventTimeout, for: { $0.kind == .changedExternally }) != nil else {
            throw context.failure(
                "the first object did not report changedExternally within \(context.eventTimeout) s of the second one's commit",
                expected: "changedExternally",
                actual: "\(firstEvents.all)"
            )
        }
        try context.expectContents(first, [record, other], "right after the first object reported changedExternally")
        for (name, log) in [("first", firstEvents), ("second", secondEvents)] {
            if let bad = log.all.first(where: {
                if case .changedExternally = $0.kind { return false } else { return true }
            }) {
                throw context.failure(
                    "the \(name) object reported an event nothing caused",
                    expected: "only changedExternally",
                    actual: "\(bad)"
                )
            }
        }
    }

    static func removalEvent(_ context: CheckContext) throws {
        guard context.options.presentsFiles else { return }
        let url = context.url()
        let store = try context.open(url)
        defer { store.close() }
        try context.commit(store, StoreChanges(inserts: relatedRecords()), "records before the files are deleted")
        let events = context.recordEvents(of: store)
        for file in context.storeType.files(at: url) where FileManager.default.fileExists(atPath: file.path) {
            try context.step("deleting \(file.lastPathComponent)") { try FileManager.default.removeItem(at: file) }
        }
        guard events.wait(timeout: context.eventTimeout, for: { $0.kind == .removed }) != nil else {
            throw context.failure(
                "the store did not report removed within \(context.eventTimeout) s of its files being deleted",
                expected: "removed",
                actual: "\(events.all)"
            )
        }
        try context.expectError([.storeRemoved], "a fetch after the store reported removed") {
            _ = try store.fetch(FetchRequest(entity: "Item"))
        }
        try context.expectError([.storeRemoved], "a commit after the store reported removed") {
            try store.commit(
                StoreChanges(inserts: [Record(id: .deterministic(entity: "Item", name: "x"), values: ["title": "x"])])
            )
        }
        try context.expect(!FileManager.default.fileExists(atPath: url.path), "the removed store wrote its file again")
    }

    static func moveEvent(_ context: CheckContext) throws {
        guard context.options.presentsFiles else { return }
        let url = context.url()
        let destination = context.url("moved")
        let store = try context.open(url)
        defer { store.close() }
        var records = relatedRecords()
        try context.commit(store, StoreChanges(inserts: records), "records before the files move")
        let events = context.recordEvents(of: store)
        let targets = context.storeType.files(at: destination)
        for (file, target) in zip(context.storeType.files(at: url), targets).reversed()
        where FileManager.default.fileExists(atPath: file.path) {
            try context.step("moving \(file.lastPathComponent)") {
                try FileManager.default.moveItem(at: file, to: target)
            }
        }
        guard
            let event = events.wait(
                timeout: context.eventTimeout,
                for: { if case .moved = $0.kind { return true } else { return false } }
            )
        else {
            throw context.failure(
                "the store did not report moved within \(context.eventTimeout) s of its files being moved",
                expected: "moved(from: \(url.path), to: \(destination.path))",
                actual: "\(events.all)"
            )
        }
        if case .moved(let from, let to) = event.kind {
            try context.expect(
                context.samePath(from, url) && context.samePath(to, destination),
                "the moved event names other places",
                expected: "\(url.path) -> \(destination.path)",
                actual: "\(from.path) -> \(to.path)"
            )
        }
        try context.expect(
            context.samePath(store.url, destination),
            "the store's url did not follow the move",
            expected: destination.path,
            actual: store.url.path
        )
        try context.expectContents(store, records, "after the store's files moved")
        let late = Record(id: .deterministic(entity: "Item", name: "after move"), values: ["title": "moved"])
        records.append(late)
        try context.commit(store, StoreChanges(inserts: [late]), "a record after the move")
        store.close()
        try context.expect(
            !FileManager.default.fileExists(atPath: url.path),
            "a commit after the move wrote the old place",
            actual: "\(url.path) exists"
        )
        let reopened = try context.open(destination)
        try context.expectContents(reopened, records, "reopened at the place the files moved to")
        reopened.close()
    }
}
