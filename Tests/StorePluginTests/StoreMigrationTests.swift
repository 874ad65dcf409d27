import ConcordTestSupport
import Foundation
import JSONStore
import Persistence
import PlistStore
import SQLiteStore
import Testing

@Suite("Store migration")
struct StoreMigrationTests {
    static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Folder",
                attributes: [AttributeDescription("name", .string)],
                relationships: [RelationshipDescription("notes", to: "Note", inverse: "folder", isToMany: true)]
            ),
            EntityDescription(
                "Note",
                attributes: [
                    AttributeDescription("title", .string),
                    AttributeDescription("rank", .integer, isOptional: true),
                    AttributeDescription("score", .double, isOptional: true),
                    AttributeDescription("pinned", .boolean, defaultValue: false),
                    AttributeDescription("edited", .date, isOptional: true),
                    AttributeDescription("body", .data, isOptional: true),
                    AttributeDescription("ref", .uuid, isOptional: true),
                ],
                relationships: [RelationshipDescription("folder", to: "Folder", inverse: "notes")]
            ),
        ]
    )

    static func registry() -> StoreRegistry {
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        registry.register(JSONStore.self)
        registry.register(PlistStore.self)
        return registry
    }

    /// Every record of every entity, in id order.
    static func contents(of store: any PersistentStore) throws -> [Record] {
        try schema.entities.flatMap { try store.fetch(FetchRequest(entity: $0.name)) }
    }

    /// A store of `type` at `url` with folders and notes holding every kind of value.
    static func makeStore(_ type: String, at url: URL, registry: StoreRegistry) throws -> [Record] {
        let store = try registry.storeType(named: type).init(
            url: url,
            schema: schema,
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        var changes = StoreChanges(metadataEntries: ["sync.cursor": Data([1, 2, 3])])
        let folders = (0..<5).map { Record(id: .random(entity: "Folder"), values: ["name": .string("folder \($0)")]) }
        var notes: [Record] = []
        for index in 0..<300 {
            let folder = folders[index % folders.count]
            var note = Record(
                id: .random(entity: "Note"),
                values: [
                    "title": .string("note \(index) ✓"),
                    "pinned": .boolean(index % 3 == 0),
                ]
            )
            if index % 2 == 0 { note["rank"] = .integer(Int64(index) * 1_000_000_007) }
            if index % 5 != 0 { note["score"] = .double(Double(index) / 3) }
            if index % 4 == 0 {
                note["edited"] = .date(Date(timeIntervalSinceReferenceDate: 800_000_000.123456 + Double(index)))
            }
            if index % 7 == 0 { note["body"] = .data(Data((0..<index % 40).map { UInt8($0) })) }
            if index % 9 == 0 { note["ref"] = .uuid(UUID()) }
            note.toOne["folder"] = folder.id
            notes.append(note)
        }
        var linked = folders
        for index in linked.indices {
            linked[index].toMany["notes"] = Set(notes.filter { $0.toOne["folder"] == linked[index].id }.map(\.id))
        }
        changes.inserts = linked + notes
        try store.commit(changes)
        return try contents(of: store)
    }

    @Test("JSON to SQLite and back keeps every record and metadata entry, with progress")
    func jsonToSQLiteAndBack() throws {
        let directory = TemporaryDirectory("migration")
        let registry = Self.registry()
        let original = try Self.makeStore("json", at: directory("notes.json"), registry: registry)
        let migrator = StoreMigrator(registry: registry, batchSize: 64)

        var progress: [StoreMigrationProgress] = []
        try migrator.migrateStore(
            ofType: "json",
            at: directory("notes.json"),
            toType: "sqlite",
            at: directory("notes.sqlite"),
            schema: Self.schema
        ) { progress.append($0) }
        #expect(progress.count >= 305 / 64)
        #expect(progress.map(\.completedRecords) == progress.map(\.completedRecords).sorted())
        #expect(progress.last?.completedRecords == 305 && progress.last?.totalRecords == 305)

        let sqlite = try SQLiteStore(
            url: directory("notes.sqlite"),
            schema: Self.schema,
            options: StoreOptions(presentsFiles: false)
        )
        #expect(try Self.contents(of: sqlite) == original)
        #expect(try sqlite.metadata().entries["sync.cursor"] == Data([1, 2, 3]))
        sqlite.close()

        try migrator.migrateStore(
            ofType: "sqlite",
            at: directory("notes.sqlite"),
            toType: "json",
            at: directory("back.json"),
            schema: Self.schema
        )
        let back = try JSONStore(
            url: directory("back.json"),
            schema: Self.schema,
            options: StoreOptions(presentsFiles: false)
        )
        #expect(try Self.contents(of: back) == original)
        #expect(try back.metadata().entries["sync.cursor"] == Data([1, 2, 3]))
        // And to plist, for good measure.
        try migrator.migrateStore(
            ofType: "json",
            at: directory("back.json"),
            toType: "plist",
            at: directory("notes.plist"),
            schema: Self.schema
        )
        let plist = try PlistStore(
            url: directory("notes.plist"),
            schema: Self.schema,
            options: StoreOptions(presentsFiles: false)
        )
        #expect(try Self.contents(of: plist) == original)
    }

    @Test("A migration never overwrites an existing destination")
    func destinationMustNotExist() throws {
        let directory = TemporaryDirectory("migration")
        let registry = Self.registry()
        _ = try Self.makeStore("json", at: directory("a.json"), registry: registry)
        try Data("precious".utf8).write(to: directory("b.sqlite"))
        let error = try #require(throws: PersistenceError.self) {
            try StoreMigrator(registry: registry).migrateStore(
                ofType: "json",
                at: directory("a.json"),
                toType: "sqlite",
                at: directory("b.sqlite"),
                schema: Self.schema
            )
        }
        #expect(error.code == .invalidRequest && error.url?.lastPathComponent == "b.sqlite")
        #expect(try Data(contentsOf: directory("b.sqlite")) == Data("precious".utf8))
    }

    @Test("A failed migration removes what it wrote and leaves the source alone")
    func failedMigrationCleansUp() throws {
        let directory = TemporaryDirectory("migration")
        let registry = Self.registry()
        try Data("not json at all".utf8).write(to: directory("bad.json"))
        #expect(throws: PersistenceError.self) {
            try StoreMigrator(registry: registry).migrateStore(
                ofType: "json",
                at: directory("bad.json"),
                toType: "sqlite",
                at: directory("out.sqlite"),
                schema: Self.schema
            )
        }
        #expect(try Data(contentsOf: directory("bad.json")) == Data("not json at all".utf8))
        for file in SQLiteStore.files(at: directory("out.sqlite")) {
            #expect(!FileManager.default.fileExists(atPath: file.path))
        }
    }

    @Test("Moving an SQLite store before it is opened moves all its files")
    func moveBeforeOpening() throws {
        let directory = TemporaryDirectory("migration")
        let registry = Self.registry()
        let original = try Self.makeStore("sqlite", at: directory("a.sqlite"), registry: registry)
        // A store as a crashed app leaves it: the last commit only in the write-ahead log.
        let writer = try SQLiteStore(
            url: directory("a.sqlite"),
            schema: Self.schema,
            options: StoreOptions(presentsFiles: false)
        )
        try writer.commit(StoreChanges(inserts: [Record(id: .random(entity: "Folder"), values: ["name": "late"])]))
        let expected = try Self.contents(of: writer)
        #expect(expected.count == original.count + 1)
        for (from, to) in zip(
            SQLiteStore.files(at: directory("a.sqlite")),
            SQLiteStore.files(at: directory("crashed.sqlite"))
        ) {
            try FileManager.default.copyItem(at: from, to: to)
        }
        writer.close()
        #expect(FileManager.default.fileExists(atPath: directory("crashed.sqlite-wal").path))

        directory.makeDirectory("moved")
        try StoreCoordinator.moveStore(
            ofType: "sqlite",
            from: directory("crashed.sqlite"),
            to: directory("moved", "b.sqlite"),
            registry: registry
        )
        for file in SQLiteStore.files(at: directory("crashed.sqlite")) {
            #expect(!FileManager.default.fileExists(atPath: file.path), "\(file.lastPathComponent) stayed behind")
        }
        let moved = try SQLiteStore(
            url: directory("moved", "b.sqlite"),
            schema: Self.schema,
            options: StoreOptions(presentsFiles: false)
        )
        #expect(try Self.contents(of: moved) == expected)
    }

    /// Peak resident memory of a helper process migrating `count` records.
    static func migrationPeak(records count: Int) throws -> (before: Int, peak: Int) {
        let directory = TemporaryDirectory("migration-rss")
        let report = try #require(try ChildProcess.memoryReport(["migrate-rss", String(count), directory.url.path]))
        #expect(report.exitStatus == 0)
        return (report.before, report.peak)
    }

    @Test("Migrating 200,000 records keeps peak memory bounded: it does not grow with the record count")
    func migrationMemoryIsBounded() throws {
        let small = try Self.migrationPeak(records: 20_000)
        let large = try Self.migrationPeak(records: 200_000)
        let smallGrowth = small.peak - small.before
        let largeGrowth = large.peak - large.before
        print("migration RSS growth: 20,000 records \(smallGrowth) KiB, 200,000 records \(largeGrowth) KiB")
        // Ten times the records; the growth may differ by allocator noise, not by a factor.
        #expect(largeGrowth < smallGrowth * 2 + 8 * 1024, "20k: +\(smallGrowth) KiB, 200k: +\(largeGrowth) KiB")
    }
}
