// What only the SQLite store promises (the generic contract is the conformance suite's): its
// pragmas, its layout and indexes, migration in place, events from other connections, bad files.
import ConcordTestSupport
import FileCoordination
import Foundation
import GRDB
import Persistence
import Synchronization
import Testing

@testable import SQLiteStore

// GRDB has types of these names too.
private typealias PersistenceError = Persistence.PersistenceError
private typealias FetchRequest = Persistence.FetchRequest

// MARK: - Fixtures

private enum Fixtures {
    static func schema(
        version: Int = 1,
        extraNoteAttributes: [AttributeDescription] = [],
        extraEntities: [EntityDescription] = []
    ) throws -> Schema {
        let note = EntityDescription(
            "Note",
            attributes: [
                AttributeDescription("title", .string, isOptional: true, isIndexed: true),
                AttributeDescription("count", .integer, isOptional: true),
                AttributeDescription("score", .double, isOptional: true),
                AttributeDescription("pinned", .boolean, isOptional: true),
                AttributeDescription("created", .date, isOptional: true),
                AttributeDescription("blob", .data, isOptional: true),
                AttributeDescription("token", .uuid, isOptional: true),
            ] + extraNoteAttributes,
            relationships: [
                RelationshipDescription("folder", to: "Folder", inverse: "notes"),
                RelationshipDescription("tags", to: "Tag", inverse: "notes", isToMany: true),
            ]
        )
        let folder = EntityDescription(
            "Folder",
            attributes: [AttributeDescription("name", .string, isOptional: true)],
            relationships: [RelationshipDescription("notes", to: "Note", inverse: "folder", isToMany: true)]
        )
        let tag = EntityDescription(
            "Tag",
            attributes: [AttributeDescription("label", .string, isOptional: true)],
            relationships: [RelationshipDescription("notes", to: "Note", inverse: "tags", isToMany: true)]
        )
        return try Schema(version: version, entities: [note, folder, tag] + extraEntities)
    }

    static func note(
        _ title: String?,
        count: Int64? = nil,
        score: Double? = nil,
        pinned: Bool? = nil
    ) -> Persistence.Record {
        var record = Persistence.Record(id: .random(entity: "Note"))
        if let title { record["title"] = .string(title) }
        if let count { record["count"] = .integer(count) }
        if let score { record["score"] = .double(score) }
        if let pinned { record["pinned"] = .boolean(pinned) }
        return record
    }
}

/// Collects a store's events; a test waits for the one it expects, with a bound.
private final class EventLog: Sendable {
    private let events = Mutex<[StoreEvent]>([])
    private let signal = Signal()

    init(_ store: SQLiteStore) {
        _ = store.events.addListener { [self] event in
            events.withLock { $0.append(event) }
            signal.fire()
        }
    }

    var all: [StoreEvent] { events.withLock { $0 } }

    func count(_ predicate: (StoreEvent.Kind) -> Bool) -> Int { all.filter { predicate($0.kind) }.count }

    /// Waits until an event satisfying `predicate` arrived (10 s at most).
    @discardableResult
    func wait(for predicate: (StoreEvent.Kind) -> Bool) -> Bool {
        var seen = 0
        while true {
            if count(predicate) > 0 { return true }
            seen = max(seen, signal.value) + 1
            if !signal.wait(times: seen, timeout: .seconds(10)) { return count(predicate) > 0 }
        }
    }
}

private func isChangedExternally(_ kind: StoreEvent.Kind) -> Bool { kind == .changedExternally }

private func errorCode(_ body: () throws -> Void) -> PersistenceError.Code? {
    do {
        try body()
        return nil
    } catch let error as Persistence.PersistenceError {
        return error.code
    } catch {
        return nil
    }
}

private func fileBytes(_ url: URL) -> Data? { FileManager.default.contents(atPath: url.path) }

private func siblings(of url: URL) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: url.deletingLastPathComponent().path)) ?? []).sorted()
}

/// Values GRDB can bind, from the store's bindings (for EXPLAIN QUERY PLAN).
private func arguments(_ bindings: [SQLiteBinding]) -> StatementArguments {
    StatementArguments(
        bindings.map { binding -> (any DatabaseValueConvertible)? in
            switch binding {
            case .null: return nil
            case .integer(let value): return value
            case .double(let value): return value
            case .text(let value): return value
            case .blob(let value): return value
            case .uuid(let value): return withUnsafeBytes(of: value.uuid) { Data($0) }
            }
        }
    )
}

// MARK: - Tests

@Suite("SQLite store")
struct SQLiteStoreTests {
    @Test("WAL mode, synchronous=FULL and the busy timeout are set; a busy writer is waited for")
    func pragmas() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("notes.sqlite")
        let store = try SQLiteStore(url: url, schema: Fixtures.schema(), options: StoreOptions(presentsFiles: false))
        defer { store.close() }
        #expect(try store.pragma("journal_mode") == "wal")
        #expect(try store.pragma("synchronous") == "2")
        #expect(try store.pragma("busy_timeout") == "5000")
        #expect(
            SQLiteStore.files(at: url).map(\.lastPathComponent) == [
                "notes.sqlite", "notes.sqlite-wal", "notes.sqlite-shm",
            ]
        )

        let short = try SQLiteStore(
            url: url,
            schema: Fixtures.schema(),
            options: StoreOptions(presentsFiles: false, settings: ["busyTimeout": "0.3"])
        )
        defer { short.close() }
        #expect(try short.pragma("busy_timeout") == "300")

        // Another connection holds the write lock: the short store gives up after its timeout.
        var configuration = Configuration()
        configuration.allowsUnsafeTransactions = true
        let other = try DatabaseQueue(path: url.path, configuration: configuration)
        try other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
        let start = ContinuousClock.now
        #expect(errorCode { try short.commit(StoreChanges(inserts: [Fixtures.note("x")])) } == .ioFailed)
        #expect(ContinuousClock.now - start >= .milliseconds(250))
        // ... and the default store waits until the lock is released (on another thread, later).
        let released = Signal()
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: 0.2)
            try? other.writeWithoutTransaction { db in try db.execute(sql: "COMMIT") }
            released.fire()
        }
        try store.commit(StoreChanges(inserts: [Fixtures.note("waited")]))
        #expect(released.wait(timeout: .seconds(10)))
        #expect(try store.count(for: FetchRequest(entity: "Note")) == 1)
        try other.close()
    }

    @Test("The metadata table is one B-tree (WITHOUT ROWID); a store made with a rowid table reads and writes alike")
    func metadataTableLayouts() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("notes.sqlite")
        func definition() throws -> String {
            try DatabaseQueue(path: url.path).read { db in
                try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'concord_metadata'") ?? ""
            }
        }
        do {
            let store = try SQLiteStore(
                url: url,
                schema: Fixtures.schema(),
                options: StoreOptions(presentsFiles: false)
            )
            try store.commit(StoreChanges(metadataEntries: ["a": Data("1".utf8), "b": Data("2".utf8)]))
            store.close()
        }
        #expect(try definition().hasSuffix("WITHOUT ROWID"))

        // The table as 0.1.0 made it: a rowid table and an index for the key.
        try DatabaseQueue(path: url.path).write { db in
            try db.execute(
                sql: """
                    CREATE TABLE old_metadata (key TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL);
                    INSERT INTO old_metadata SELECT key, value FROM concord_metadata;
                    DROP TABLE concord_metadata;
                    ALTER TABLE old_metadata RENAME TO concord_metadata;
                    """
            )
        }
        #expect(try !definition().contains("WITHOUT ROWID"))
        let store = try SQLiteStore(url: url, schema: Fixtures.schema(), options: StoreOptions(presentsFiles: false))
        defer { store.close() }
        #expect(try store.metadataEntries(forKeys: ["a", "b", "c"]) == ["a": Data("1".utf8), "b": Data("2".utf8)])
        try store.commit(
            StoreChanges(
                inserts: [Fixtures.note("kept")],
                metadataEntries: ["a": Data?.none, "b": Data("3".utf8), "c": Data("4".utf8)]
            )
        )
        #expect(try store.metadataEntries(forKeys: ["a", "b", "c"]) == ["b": Data("3".utf8), "c": Data("4".utf8)])
        #expect(try store.metadata().entries["c"] == Data("4".utf8))
        #expect(try store.count(for: FetchRequest(entity: "Note")) == 1)
        #expect(try !definition().contains("WITHOUT ROWID"), "the table is left as it was")
    }

    @Test("Every attribute type and both kinds of relationship round-trip exactly")
    func roundTrip() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("notes.sqlite")
        let schema = try Fixtures.schema()
        let folder = Persistence.Record(id: .random(entity: "Folder"), values: ["name": "Inbox"])
        let tags = (0..<5).map { Persistence.Record(id: .random(entity: "Tag"), values: ["label": .string("t\($0)")]) }
        let note = Persistence.Record(
            id: .random(entity: "Note"),
            values: [
                "title": "Grüße, 🌍", "count": .integer(.min), "score": .double(-0.1), "pinned": true,
                "created": .date(Date(timeIntervalSince1970: 1_234_567_890.123_456_7)),
                "blob": .data(Data([0, 1, 2, 255])),
                "token": .uuid(UUID()),
            ],
            toOne: ["folder": folder.id],
            toMany: ["tags": Set(tags.map(\.id))]
        )
        let empty = Persistence.Record(
            id: .random(entity: "Note"),
            values: ["title": "", "blob": .data(Data()), "score": .double(-0.0)]
        )
        let odd = Persistence.Record(
            id: .random(entity: "Note"),
            values: ["score": .double(.infinity), "created": .date(Date(timeIntervalSinceReferenceDate: -0.5))]
        )
        do {
            let store = try SQLiteStore(url: url, schema: schema, options: StoreOptions(presentsFiles: false))
            try store.commit(
                StoreChanges(inserts: [folder, note, empty, odd] + tags, metadataEntries: ["concord.clock": Data([7])])
            )
            store.close()
        }
        let store = try SQLiteStore(url: url, schema: schema, options: StoreOptions(presentsFiles: false))
        defer { store.close() }
        #expect(try store.records(with: [note.id]) == [note])
        #expect(try store.records(with: [empty.id]) == [empty])
        #expect(try store.records(with: [empty.id]).first?["score"] == .double(-0.0))
        #expect(try store.records(with: [empty.id]).first.map { $0["score"].description } == "-0.0")
        #expect(try store.records(with: [odd.id]) == [odd])
        #expect(try store.count(for: FetchRequest(entity: "Note", predicate: Field("score") == 0.0)) == 1)
        #expect(try store.fetch(FetchRequest(entity: "Folder")) == [folder])
        #expect(try store.metadata().entries == ["concord.clock": Data([7])])
        #expect(try store.metadata().schemaVersion == 1)

        // Updates set only what they name; a deletion wins over an update of the same record.
        try store.commit(
            StoreChanges(updates: [
                RecordUpdate(id: note.id, values: ["title": .null], toOne: ["folder": nil], toMany: ["tags": []])
            ])
        )
        var expected = note
        expected["title"] = .null
        expected.toOne["folder"] = nil
        expected.toMany["tags"] = nil
        #expect(try store.records(with: [note.id]) == [expected])
        try store.commit(
            StoreChanges(
                updates: [RecordUpdate(id: empty.id, values: ["count": 1])],
                deletes: [empty.id],
                metadataEntries: ["concord.clock": nil]
            )
        )
        #expect(try store.records(with: [empty.id]) == [])
        #expect(try store.metadata().entries == [:])
    }

    @Test("Fetches match the in-memory reference for every kind of predicate, order and page")
    func predicatesMatchReference() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let store = try SQLiteStore(
            url: directory("notes.sqlite"),
            schema: Fixtures.schema(),
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        let titles: [String?] = [
            nil, "", "a", "A", "ab", "Ab", "abc", "b", "é", "É", "Éa", "éa", "x🌍y", "🌍", "Zeta", "zeta", "ßeta",
            "a\u{0}b",
        ]
        let folders = (0..<3).map {
            Persistence.Record(id: .random(entity: "Folder"), values: ["name": .string("f\($0)")])
        }
        let tags = (0..<4).map { Persistence.Record(id: .random(entity: "Tag"), values: ["label": .string("t\($0)")]) }
        var notes: [Persistence.Record] = []
        for (index, title) in titles.enumerated() {
            for variant in 0..<3 {
                var note = Fixtures.note(
                    title,
                    count: variant == 2 ? nil : Int64(index % 5) - 2,
                    score: variant == 1 ? nil : Double(index) / 4 - 1.5,
                    pinned: variant == 0 ? nil : index % 2 == 0
                )
                if variant != 1 {
                    note["created"] = .date(Date(timeIntervalSinceReferenceDate: Double(index * 1000 + variant)))
                }
                if index % 3 != 0 { note.toOne["folder"] = folders[index % 3].id }
                let tagged = Set(tags.prefix((index + variant) % 4).map(\.id))
                if !tagged.isEmpty { note.toMany["tags"] = tagged }
                notes.append(note)
            }
        }
        try store.commit(StoreChanges(inserts: notes + folders + tags))

        let some = notes[7].id
        var predicates: [RecordPredicate] = [
            .constant(true), .constant(false),
            Field("title") == .null, Field("title") != .null, Field("title") == "ab", Field("title") != "ab",
            Field("title") < "b", Field("title") >= "é", Field("title") > .null, Field("title") <= "",
            Field("count") == 0, Field("count") != 0, Field("count") < 1, Field("count") >= -1,
            Field("score") > 0, Field("score") <= 0.5, Field("score") == .integer(1), Field("score") < .integer(-1),
            Field("pinned") == true, Field("pinned") != true, Field("pinned") == .null,
            Field("created") < .date(Date(timeIntervalSinceReferenceDate: 5000)),
            Field("title").isIn(["a", "É", .null]), Field("title").isIn([]), Field("title").isIn([.null]),
            Field("count").isIn([0, 2]),
            Field("folder").refers(to: folders[1].id), Field("folder").refers(to: nil),
            Field("tags").refers(to: tags[0].id), Field("tags").refers(to: tags[2].id), Field("tags").refers(to: nil),
            .ids([notes[0].id, notes[5].id, folders[0].id]), .ids([]), .idAfter(some), .idAfter(folders[0].id),
            .idAfter(ObjectID(entity: "Z", uuid: UUID())),
            !(Field("title") == "ab"), !(Field("count") < 1), !(Field("title").contains("a")),
            Field("count") < 1 || Field("title") == .null, Field("count") < 1 && !(Field("pinned") == true),
            .and([]), .or([]), !(Field("title").isIn(["a", .null])),
        ]
        for match in [RecordPredicate.TextMatch.beginsWith, .endsWith, .contains] {
            for text in ["", "a", "A", "é", "É", "b", "ab", "🌍", "eta", "ETA", "\u{0}", "éa"] {
                for caseInsensitive in [false, true] {
                    predicates.append(.text(key: "title", match, text, caseInsensitive: caseInsensitive))
                    predicates.append(.not(.text(key: "title", match, text, caseInsensitive: caseInsensitive)))
                }
            }
        }
        let sorts: [[RecordSort]] = [
            [], [.ascending("title")], [.descending("score"), .ascending("count")],
            [.descending("pinned"), .descending("created")],
        ]
        for predicate in predicates {
            for sort in sorts {
                for (limit, offset) in [(nil, 0), (5, 0), (4, 3), (nil, 10)] as [(Int?, Int)] {
                    let request = FetchRequest(
                        entity: "Note",
                        predicate: predicate,
                        sortedBy: sort,
                        limit: limit,
                        offset: offset
                    )
                    let expected = request.evaluate(over: notes)
                    let actual = try store.fetch(request)
                    #expect(
                        actual.map(\.id) == expected.map(\.id),
                        "\(predicate) sorted by \(sort) limit \(String(describing: limit)) offset \(offset)"
                    )
                    if limit == nil && offset == 0 {
                        #expect(try store.count(for: request) == expected.count, "count of \(predicate)")
                    }
                }
            }
        }
        #expect(try store.fetch(FetchRequest(entity: "Note")) == notes.sorted { $0.id < $1.id })
        #expect(
            errorCode { _ = try store.fetch(FetchRequest(entity: "Note", predicate: Field("nope") == 1)) }
                == .invalidRequest
        )
        #expect(
            errorCode { _ = try store.fetch(FetchRequest(entity: "Note", predicate: Field("count") == "x")) }
                == .invalidRequest
        )
    }

    @Test("A fetch by an indexed attribute (isIndexed or the indexes setting) or a to-one relationship uses its index")
    func indexedFetchUsesIndex() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("notes.sqlite")
        let schema = try Fixtures.schema()
        let store = try SQLiteStore(
            url: url,
            schema: schema,
            options: StoreOptions(presentsFiles: false, settings: ["indexes": "Note.count"])
        )
        defer { store.close() }
        try store.commit(StoreChanges(inserts: (0..<200).map { Fixtures.note("n\($0)") }))
        let layout = try StoreLayout(schema: schema, indexSetting: "Note.count", url: url)
        let reader = try DatabaseQueue(
            path: url.path,
            configuration: {
                var c = Configuration()
                c.readonly = true
                return c
            }()
        )
        defer { try? reader.close() }
        func plan(_ request: FetchRequest) throws -> String {
            let query = SQLTranslation.select(request, layout.entities["Note"]!)
            return try reader.read { db in
                try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + query.sql, arguments: arguments(query.bindings))
                    .map { $0["detail"] as String? ?? "" }.joined(separator: "; ")
            }
        }
        let byTitle = try plan(FetchRequest(entity: "Note", predicate: Field("title") == "n7"))
        #expect(
            byTitle.contains("USING INDEX \"Note_title_index\"") || byTitle.contains("USING INDEX Note_title_index"),
            "\(byTitle)"
        )
        let byFolder = try plan(
            FetchRequest(entity: "Note", predicate: Field("folder").refers(to: .random(entity: "Folder")))
        )
        #expect(byFolder.contains("Note_folder_index"), "\(byFolder)")
        let byRange = try plan(
            FetchRequest(entity: "Note", predicate: Field("title") >= "n5", sortedBy: [.ascending("title")])
        )
        #expect(byRange.contains("Note_title_index"), "\(byRange)")
        let byCount = try plan(FetchRequest(entity: "Note", predicate: Field("count") == 3))
        #expect(byCount.contains("Note_count_index"), "\(byCount)")
        #expect(try store.fetch(FetchRequest(entity: "Note", predicate: Field("title") == "n7")).count == 1)
    }

    @Test("A v1 store opened with a v2 schema gains the new attribute (old rows get its default) and the new entity")
    func migration() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("notes.sqlite")
        let v1 = try Fixtures.schema(version: 1)
        let old = (0..<10).map { Fixtures.note("old \($0)", count: Int64($0)) }
        let identifier: UUID
        do {
            let store = try SQLiteStore(url: url, schema: v1, options: StoreOptions(presentsFiles: false))
            try store.commit(StoreChanges(inserts: old))
            identifier = try store.metadata().storeIdentifier
            store.close()
        }
        let v2 = try Fixtures.schema(
            version: 2,
            extraNoteAttributes: [AttributeDescription("priority", .integer, defaultValue: 3)],
            extraEntities: [EntityDescription("Archive", attributes: [AttributeDescription("label", .string)])]
        )
        let store = try SQLiteStore(url: url, schema: v2, options: StoreOptions(presentsFiles: false))
        defer { store.close() }
        #expect(try store.metadata().schemaVersion == 2)
        #expect(try store.metadata().storeIdentifier == identifier)
        let migrated = try store.fetch(FetchRequest(entity: "Note", sortedBy: [.ascending("count")]))
        #expect(migrated.map { $0["priority"] } == Array(repeating: .integer(3), count: 10))
        #expect(migrated.map { $0["title"] } == old.map { $0["title"] })
        #expect(try store.count(for: FetchRequest(entity: "Note", predicate: Field("priority") == 3)) == 10)
        let archive = Persistence.Record(id: .random(entity: "Archive"), values: ["label": "2024"])
        var fresh = Fixtures.note("new")
        fresh["priority"] = 9
        try store.commit(StoreChanges(inserts: [archive, fresh]))
        #expect(try store.fetch(FetchRequest(entity: "Archive")) == [archive])
        #expect(try store.records(with: [fresh.id]) == [fresh])

        // The v1 app meets the migrated store: newer schema, and the file is left alone.
        store.close()
        let bytes = fileBytes(url)
        #expect(
            errorCode { _ = try SQLiteStore(url: url, schema: v1, options: StoreOptions(presentsFiles: false)) }
                == .newerSchema
        )
        #expect(fileBytes(url) == bytes)
    }

    @Test("Another store object's commit is reported as changedExternally; the store's own commits are not")
    func externalChanges() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("notes.sqlite")
        let schema = try Fixtures.schema()
        let store = try SQLiteStore(url: url, schema: schema)
        defer { store.close() }
        let log = EventLog(store)
        let other = try SQLiteStore(url: url, schema: schema, options: StoreOptions(presentsFiles: false))
        defer { other.close() }

        // Own commits: a coordinated write by the store itself, then (bounded) a change from the
        // other object; only that one is reported.
        for index in 0..<5 { try store.commit(StoreChanges(inserts: [Fixtures.note("own \(index)")])) }
        let theirs = Fixtures.note("theirs")
        try other.commit(StoreChanges(inserts: [theirs]))
        #expect(log.wait(for: isChangedExternally))
        #expect(try store.records(with: [theirs.id]).count == 1)
        // Let every notice of the own commits and the other's commit arrive (a reader's
        // coordination is queued behind them), then check that only one event was sent.
        try FileCoordinator().coordinate(readingItemAt: url, options: .withoutChanges) { _ in }
        try store.commit(StoreChanges(inserts: [Fixtures.note("own again")]))
        let second = Fixtures.note("theirs again")
        try other.commit(StoreChanges(inserts: [second]))
        #expect(log.wait { _ in log.count(isChangedExternally) >= 2 })
        #expect(log.count(isChangedExternally) == 2)
        #expect(log.all.allSatisfy { $0.url == url && $0.storeType == "sqlite" })
    }

    @Test("Deleting the store's files tears it down: one removed event, then storeRemoved")
    func deletion() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("notes.sqlite")
        let store = try SQLiteStore(url: url, schema: Fixtures.schema())
        let log = EventLog(store)
        try store.commit(StoreChanges(inserts: [Fixtures.note("doomed")]))
        // As another process would: plain unlinks, no coordination.
        for file in SQLiteStore.files(at: url) { try? FileManager.default.removeItem(at: file) }
        #expect(log.wait { $0 == .removed })
        #expect(errorCode { _ = try store.fetch(FetchRequest(entity: "Note")) } == .storeRemoved)
        #expect(errorCode { try store.commit(StoreChanges(inserts: [Fixtures.note("late")])) } == .storeRemoved)
        #expect(errorCode { _ = try store.metadata() } == .storeRemoved)
        store.close()
        #expect(log.count { $0 == .removed } == 1)
        #expect(store.presentedItemURL == nil)
    }

    @Test("A coordinated deletion in this process closes the store first")
    func coordinatedDeletion() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("notes.sqlite")
        let store = try SQLiteStore(url: url, schema: Fixtures.schema())
        let log = EventLog(store)
        try store.commit(StoreChanges(inserts: [Fixtures.note("doomed")]))
        try FileCoordinator().removeItem(at: url)
        #expect(log.wait { $0 == .removed })
        #expect(errorCode { _ = try store.count(for: FetchRequest(entity: "Note")) } == .storeRemoved)
    }

    @Test("A coordinated move of the database with its companions: the store follows and reports it")
    func move() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("notes.sqlite")
        let moved = directory.makeDirectory("elsewhere").appendingPathComponent("renamed.sqlite")
        let store = try SQLiteStore(url: url, schema: Fixtures.schema())
        defer { store.close() }
        let log = EventLog(store)
        let note = Fixtures.note("travels")
        try store.commit(StoreChanges(inserts: [note]))
        try FileCoordinator().moveItem(at: url, to: moved, companionSuffixes: ["-wal", "-shm"])
        #expect(log.wait { $0 == .moved(from: url, to: moved) })
        #expect(store.url == moved)
        #expect(try store.records(with: [note.id]) == [note])
        let later = Fixtures.note("after the move")
        try store.commit(StoreChanges(inserts: [later]))
        store.close()
        let reopened = try SQLiteStore(
            url: moved,
            schema: Fixtures.schema(),
            options: StoreOptions(presentsFiles: false)
        )
        defer { reopened.close() }
        #expect(try reopened.count(for: FetchRequest(entity: "Note")) == 2)
        #expect(!FileManager.default.fileExists(atPath: url.path))
    }

    @Test("close() is idempotent and later calls throw storeClosed")
    func closing() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let store = try SQLiteStore(url: directory("notes.sqlite"), schema: Fixtures.schema())
        store.close()
        store.close()
        #expect(errorCode { _ = try store.fetch(FetchRequest(entity: "Note")) } == .storeClosed)
        #expect(errorCode { try store.commit(StoreChanges(inserts: [Fixtures.note("x")])) } == .storeClosed)
    }

    @Test("A foreign SQLite database is notAStore and is left byte for byte as it was")
    func foreignDatabase() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let url = directory("other.db")
        do {
            let other = try DatabaseQueue(path: url.path)
            try other.write { db in
                try db.execute(sql: "CREATE TABLE songs (title TEXT)")
                try db.execute(sql: "INSERT INTO songs VALUES ('x')")
            }
            try other.close()
        }
        let bytes = fileBytes(url)
        let before = siblings(of: url)
        for readOnly in [false, true] {
            #expect(
                errorCode {
                    _ = try SQLiteStore(
                        url: url,
                        schema: Fixtures.schema(),
                        options: StoreOptions(isReadOnly: readOnly)
                    )
                } == .notAStore
            )
        }
        #expect(fileBytes(url) == bytes)
        #expect(siblings(of: url) == before)
    }

    @Test("Garbage and truncated files are corruptStore, name the file, and are left as they were")
    func corruptFiles() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let garbage = directory("garbage.sqlite")
        try Data((0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7919) }).write(to: garbage)
        let short = directory("short.sqlite")
        try Data("SQLite format 3".utf8).write(to: short)
        for url in [garbage, short] {
            let bytes = fileBytes(url)
            do {
                _ = try SQLiteStore(url: url, schema: Fixtures.schema())
                Issue.record("opened \(url.lastPathComponent)")
            } catch let error as Persistence.PersistenceError {
                #expect(error.code == .corruptStore)
                #expect(error.url == url)
                #expect(
                    error.description.contains("not a database") || error.description.contains("not a readable"),
                    "\(error)"
                )
            }
            #expect(fileBytes(url) == bytes)
        }

        // A real store cut in half.
        let truncated = directory("truncated.sqlite")
        do {
            let store = try SQLiteStore(
                url: truncated,
                schema: Fixtures.schema(),
                options: StoreOptions(presentsFiles: false)
            )
            try store.commit(
                StoreChanges(inserts: (0..<2000).map { Fixtures.note(String(repeating: "x", count: 100) + "\($0)") })
            )
            store.close()
        }
        let full = try #require(fileBytes(truncated))
        try full.prefix(full.count / 2).write(to: truncated)
        let half = fileBytes(truncated)
        let before = siblings(of: truncated)
        #expect(errorCode { _ = try SQLiteStore(url: truncated, schema: Fixtures.schema()) } == .corruptStore)
        #expect(fileBytes(truncated) == half)
        #expect(siblings(of: truncated) == before)
    }

    @Test("A zero-length file becomes a new store; read-only never creates or writes anything")
    func emptyAndReadOnly() throws {
        let directory = TemporaryDirectory("sqlite-store")
        let empty = directory("empty.sqlite")
        #expect(FileManager.default.createFile(atPath: empty.path, contents: Data()))
        let store = try SQLiteStore(url: empty, schema: Fixtures.schema(), options: StoreOptions(presentsFiles: false))
        let note = Fixtures.note("kept")
        try store.commit(StoreChanges(inserts: [note]))
        store.close()

        let missing = directory("missing.sqlite")
        #expect(
            errorCode {
                _ = try SQLiteStore(url: missing, schema: Fixtures.schema(), options: StoreOptions(isReadOnly: true))
            } == .ioFailed
        )
        #expect(!FileManager.default.fileExists(atPath: missing.path))

        let bytes = fileBytes(empty)
        let readOnly = try SQLiteStore(url: empty, schema: Fixtures.schema(), options: StoreOptions(isReadOnly: true))
        defer { readOnly.close() }
        #expect(try readOnly.records(with: [note.id]) == [note])
        #expect(errorCode { try readOnly.commit(StoreChanges(inserts: [Fixtures.note("no")])) } == .readOnly)
        #expect(fileBytes(empty) == bytes)
    }
}
