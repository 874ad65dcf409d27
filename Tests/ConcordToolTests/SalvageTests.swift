import ConcordTestSupport
import FolderSync
import Foundation
import JSONStore
import Persistence
import PlistStore
import SQLiteStore
import SyncTestKit
import Testing

/// `concord store check` and `concord store salvage` on stores damaged as crashes and disks
/// damage them: the check says so without changing the store; salvage copies every record it can
/// read into a new store and names what it skipped.
@Suite("concord store check and salvage")
struct SalvageTests {
    let directory = TemporaryDirectory("salvage")

    static let schema = try! Schema(
        version: 3,
        entities: [
            EntityDescription(
                "Item",
                attributes: [
                    AttributeDescription("name", .string), AttributeDescription("rank", .integer, defaultValue: 0),
                    AttributeDescription("body", .string),
                ]
            )
        ]
    )

    /// A closed store of `type` at `url` with `count` items.
    static func makeStore(
        _ type: any PersistentStore.Type,
        at url: URL,
        count: Int,
        settings: [String: String] = [:]
    ) throws {
        let store = try type.init(
            url: url,
            schema: schema,
            options: StoreOptions(presentsFiles: false, settings: settings)
        )
        let records = (0..<count).map { index in
            var record = Record(id: ObjectID(entity: "Item", uuid: UUID()))
            record["name"] = .string("item \(index)")
            record["rank"] = .integer(Int64(index))
            record["body"] = .string(String(repeating: "lorem ipsum ", count: 25))
            return record
        }
        try store.commit(
            StoreChanges(
                inserts: records,
                metadataEntries: ["sync.device": Data("alpha".utf8), "sync.applied.beta": Data("{}".utf8)]
            )
        )
        store.close()
    }

    /// The number of items a healthy store at `url` holds.
    static func items(_ type: any PersistentStore.Type, at url: URL) throws -> Int {
        let store = try type.init(
            url: url,
            schema: schema,
            options: StoreOptions(isReadOnly: true, presentsFiles: false)
        )
        defer { store.close() }
        return try store.count(for: FetchRequest(entity: "Item"))
    }

    @Test("a healthy store checks ok, read from a copy: the store's files are not touched")
    func healthyCheck() throws {
        let url = directory("healthy.sqlite")
        try Self.makeStore(SQLiteStore.self, at: url, count: 50)
        let before = try FileManager.default.contentsOfDirectory(atPath: directory.url.path).sorted()
        let bytes = try Data(contentsOf: url)
        let run = try ConcordRun.run(["store", "check", url.path, "--json"])
        #expect(run.status == 0, "\(run.errors) \(run.output)")
        let json = try run.json()
        #expect((json["records"] as? [String: Int])?["Item"] == 50)
        #expect(json["syncDevice"] as? String == "alpha")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.url.path).sorted() == before,
            "no -wal or -shm made"
        )
        #expect(try Data(contentsOf: url) == bytes)
    }

    @Test(
        "a damaged SQLite page: check fails; salvage seeks past the page, keeps the rest, and names the stretch it skipped"
    )
    func damagedSQLitePage() throws {
        let url = directory("damaged.sqlite")
        let count = 3000
        try Self.makeStore(SQLiteStore.self, at: url, count: count)
        let log = (try? Data(contentsOf: URL(fileURLWithPath: url.path + "-wal"))) ?? Data()
        #expect(log.isEmpty, "the store closed cleanly: everything is in the database file")
        // A leaf page of the item table, in the middle of the file, overwritten with garbage.
        var bytes = try Data(contentsOf: url)
        let pageSize = Int(bytes[16]) << 8 | Int(bytes[17])
        let pages = bytes.count / pageSize
        let page = try #require((pages / 2..<pages).first { bytes[$0 * pageSize] == 0x0A }, "a leaf page")
        for offset in (page * pageSize + 8)..<((page + 1) * pageSize) {
            bytes[offset] = UInt8(truncatingIfNeeded: offset &* 7919)
        }
        try bytes.write(to: url)

        let check = try ConcordRun.run(["store", "check", url.path])
        #expect(check.status != 0, "a damaged page is reported: \(check.output)")
        #expect(check.output.contains("problem:"))

        let salvaged = directory("salvaged.sqlite")
        let run = try ConcordRun.run(["store", "salvage", url.path, "--to", salvaged.path, "--json"])
        #expect(run.status == 1, "some records were lost: \(run.errors) \(run.output)")
        let json = try run.json()
        let recovered = try #require((json["recovered"] as? [String: Int])?["Item"])
        #expect(recovered > count - 200 && recovered < count, "only the damaged page's records are lost: \(recovered)")
        let skipped = try #require(json["skipped"] as? [[String: Any]])
        #expect(skipped.count >= 1 && skipped.allSatisfy { $0["entity"] as? String == "Item" && $0["reason"] != nil })
        #expect(try Self.items(SQLiteStore.self, at: salvaged) == recovered)
        let store = try SQLiteStore(
            url: salvaged,
            schema: Self.schema,
            options: StoreOptions(isReadOnly: true, presentsFiles: false)
        )
        defer { store.close() }
        let entries = try store.metadata().entries
        #expect(entries["sync.device"] == Data("alpha".utf8), "metadata is kept")
        #expect(entries["sync.applied.beta"] == nil, "but not which logs were applied: the next sync reads them again")
    }

    @Test("an SQLite database cut short: salvage reads its remaining pages")
    func truncatedSQLite() throws {
        let url = directory("cut.sqlite")
        try Self.makeStore(SQLiteStore.self, at: url, count: 3000)
        let bytes = try Data(contentsOf: url)
        try bytes.prefix(bytes.count * 3 / 4).write(to: url)
        let check = try ConcordRun.run(["store", "check", url.path])
        #expect(check.status == 2 && check.output.contains("truncated"), "\(check.output)")

        let salvaged = directory("salvaged-cut.sqlite")
        let run = try ConcordRun.run(["store", "salvage", url.path, "--to", salvaged.path, "--json"])
        #expect(run.status == 1, "\(run.errors) \(run.output)")
        let json = try run.json()
        let recovered = try #require((json["recovered"] as? [String: Int])?["Item"])
        // (How many of the 3,000 sit on the remaining pages depends on the random ids' order in
        // the table's tree: about a third to two thirds; some, never all.)
        #expect(recovered > 0 && recovered < 3000, "the records on the remaining pages: \(recovered)")
        #expect((json["notes"] as? [String])?.contains { $0.contains("cut short") } == true)
        #expect(try Self.items(SQLiteStore.self, at: salvaged) == recovered)
    }

    @Test("a JSON archive with a damaged record: salvage decodes the others one by one and names the one it skipped")
    func damagedJSONRecord() throws {
        let url = directory("notes.json")
        try Self.makeStore(JSONStore.self, at: url, count: 40)
        var text = try String(contentsOf: url, encoding: .utf8)
        let target = try #require(text.range(of: "\"name\":\"item 17\""))
        text.replaceSubrange(target, with: "\"name\":[17]")
        try text.write(to: url, atomically: true, encoding: .utf8)
        let check = try ConcordRun.run(["store", "check", url.path])
        #expect(check.status == 2, "the archive does not open: \(check.output)")

        let salvaged = directory("salvaged.json")
        let run = try ConcordRun.run(["store", "salvage", url.path, "--to", salvaged.path])
        #expect(run.status == 1, "\(run.errors) \(run.output)")
        #expect(run.output.contains("Item: 39 of 40 records (1 lost)"), "\(run.output)")
        #expect(run.output.contains("skipped Item record "), "\(run.output)")
        #expect(try Self.items(JSONStore.self, at: salvaged) == 39)
    }

    @Test("a property-list archive with a damaged record: salvaged record by record into another type")
    func damagedPlistRecord() throws {
        let url = directory("notes.plist")
        try Self.makeStore(PlistStore.self, at: url, count: 20, settings: ["format": "xml"])
        var text = try String(contentsOf: url, encoding: .utf8)
        let target = try #require(text.range(of: "<string>item 7</string>"))
        text.replaceSubrange(target, with: "<date>2026-11-24T10:00:00Z</date>")
        try text.write(to: url, atomically: true, encoding: .utf8)

        let salvaged = directory("salvaged-plist.sqlite")
        let run = try ConcordRun.run([
            "store", "salvage", url.path, "--to", salvaged.path, "--type", "sqlite", "--json",
        ])
        #expect(run.status == 1, "\(run.errors) \(run.output)")
        let json = try run.json()
        #expect(json["method"] as? String == "document")
        #expect((json["recovered"] as? [String: Int])?["Item"] == 19)
        let skipped = try #require(json["skipped"] as? [[String: Any]])
        #expect(skipped.count == 1 && skipped.first?["id"] != nil)
        #expect(try Self.items(SQLiteStore.self, at: salvaged) == 19)
    }

    @Test("a JSON archive cut short: salvage reads up to its last complete record, with the schema from another store")
    func truncatedJSON() throws {
        let url = directory("cut.json")
        try Self.makeStore(JSONStore.self, at: url, count: 30)
        let bytes = try Data(contentsOf: url)
        let records = try #require(bytes.firstRange(of: Data("\"records\"".utf8))).lowerBound
        let schema = try #require(bytes.firstRange(of: Data("\"schema\"".utf8))).lowerBound
        try bytes.prefix(records + (schema - records) / 2).write(to: url)
        let other = directory("schema.sqlite")
        try Self.makeStore(SQLiteStore.self, at: other, count: 0)

        let withoutSchema = try ConcordRun.run(["store", "salvage", url.path, "--to", directory("nothing.json").path])
        #expect(withoutSchema.status == 2 && withoutSchema.errors.contains("--schema-from"), "\(withoutSchema.errors)")

        let salvaged = directory("salvaged-cut.json")
        let run = try ConcordRun.run([
            "store", "salvage", url.path, "--to", salvaged.path, "--schema-from", other.path, "--json",
        ])
        #expect(run.status == 1, "the records after the cut are lost: \(run.errors) \(run.output)")
        let recovered = try #require((try run.json()["recovered"] as? [String: Int])?["Item"])
        #expect(recovered >= 1 && recovered < 30)
        #expect(try Self.items(JSONStore.self, at: salvaged) == recovered)
    }
}

/// A store salvaged (or made anew) under the same device id rejoins with nothing lost.
@Suite("bringing a device back")
struct RestoredDeviceTests {
    @Test(
        "a salvaged store rejoins as a restoring device: what the damage lost comes back from the container, what the others wrote arrives"
    )
    func salvagedStoreRejoins() throws {
        let bench = DoctorBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta", type: "json")
        let lost = try bench.addNote("alpha", "lost in the damage")
        for title in ["kept one", "kept two"] { try bench.addNote("alpha", title) }
        try bench.importOn("beta")
        try bench.addNote("beta", "beta's")

        // alpha's store is salvaged; one of its notes was on a damaged page.
        let alpha = bench["alpha"]
        alpha.sync.stop()
        alpha.store.close()
        let salvaged = bench.directory("data", "alpha", "salvaged.sqlite")
        let run = try ConcordRun.run(["store", "salvage", alpha.url.path, "--to", salvaged.path, "--json"])
        #expect(run.status == 0, "\(run.errors) \(run.output)")
        let damaged = try SQLiteStore(
            url: salvaged,
            schema: SyncSimulator.schema,
            options: StoreOptions(presentsFiles: false)
        )
        try damaged.commit(StoreChanges(deletes: [lost]))
        damaged.close()

        let coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: bench.registry)
        let store = try coordinator.addStore(
            ofType: "sqlite",
            at: salvaged,
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: bench.container,
            storeName: DoctorBench.storeName
        )
        defer { sync.stop() }
        #expect(sync.deviceID == "alpha", "the device id is kept")
        let enabling = try sync.enable(live: false)
        guard case .restoringDevice? = enabling.join?.situation else {
            Issue.record("joined as \(String(describing: enabling.join?.situation)), not as a restoring device")
            return
        }
        let titles = try store.fetch(FetchRequest(entity: "Note")).compactMap { record -> String? in
            if case .string(let title) = record["title"] { return title }
            return nil
        }
        #expect(titles.sorted() == ["beta's", "kept one", "kept two", "lost in the damage"])

        // Numbering goes on after what alpha had written: beta applies alpha's next log.
        let context = ObjectContext(coordinator: coordinator, origin: .local, name: "alpha again")
        _ = try context.insert(entity: "Note", values: ["title": .string("after the salvage")])
        try context.save()
        try sync.exportPending()
        try bench.importOn("beta")
        #expect(try bench["beta"].store.count(for: FetchRequest(entity: "Note")) == 5)
        #expect(try bench.diagnose().findings.filter { $0.severity == .problem }.isEmpty)
    }
}
