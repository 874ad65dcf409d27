import ConcordTestSupport
import Foundation
import GRDB
import Persistence
import SQLiteStore
import Testing

/// `concord store check` judges a store the way SQLite and the plugin do: a store left by a kill
/// mid-checkpoint (its header ahead of the file, the rest in the `-wal`) is healthy; damage that
/// only `integrity_check` sees (an index that disagrees with its table) is found; references must
/// reach records the store holds. `store salvage` says which records it copied altered, and both
/// print a JSON object for every outcome.
@Suite("concord store check judges like SQLite")
struct StoreCheckTests {
    let directory = TemporaryDirectory("store-check")

    static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Folder",
                attributes: [AttributeDescription("name", .string, isIndexed: true)],
                relationships: [RelationshipDescription("notes", to: "Note", inverse: "folder", isToMany: true)]
            ),
            EntityDescription(
                "Note",
                attributes: [
                    AttributeDescription("title", .string, isIndexed: true), AttributeDescription("body", .string),
                ],
                relationships: [RelationshipDescription("folder", to: "Folder", inverse: "notes", isOptional: false)]
            ),
        ]
    )

    static let folders = ["Inbox", "Work", "Home"].map { ObjectID.deterministic(entity: "Folder", name: $0) }

    /// Notes `range`, filed round-robin into the three folders, with a body of `bodySize` bytes.
    static func notes(_ range: Range<Int>, bodySize: Int = 100) -> [Persistence.Record] {
        range.map { index in
            var note = Persistence.Record(id: .deterministic(entity: "Note", name: "note \(index)"))
            note["title"] = .string("note \(index)")
            note["body"] = .string(String(repeating: "x", count: bodySize))
            note.toOne["folder"] = folders[index % folders.count]
            return note
        }
    }

    /// The three folders, each holding its notes of `range`.
    static func folderRecords(_ range: Range<Int>) -> [Persistence.Record] {
        folders.enumerated().map { position, id in
            var folder = Persistence.Record(id: id)
            folder["name"] = .string(["Inbox", "Work", "Home"][position])
            folder.toMany["notes"] = Set(
                range.filter { $0 % folders.count == position }.map {
                    ObjectID.deterministic(entity: "Note", name: "note \($0)")
                }
            )
            return folder
        }
    }

    /// A cleanly closed store at `url` with `count` notes in three folders.
    static func makeStore(at url: URL, count: Int, metadata: [String: Data?] = [:]) throws {
        let store = try SQLiteStore(url: url, schema: schema, options: StoreOptions(presentsFiles: false))
        defer { store.close() }
        try store.commit(
            StoreChanges(inserts: folderRecords(0..<count) + notes(0..<count), metadataEntries: metadata)
        )
    }

    /// The store's files' bytes, by name.
    static func files(_ url: URL) -> [String: Data] {
        var result: [String: Data] = [:]
        for file in SQLiteStore.files(at: url) {
            result[file.lastPathComponent] = FileManager.default.contents(atPath: file.path)
        }
        return result
    }

    @Test("a store left by a kill mid-checkpoint (header ahead of the file, frames in the -wal) checks ok, exit 0")
    func interruptedCheckpointIsHealthy() throws {
        let original = directory("original.sqlite")
        let store = try SQLiteStore(url: original, schema: Self.schema, options: StoreOptions(presentsFiles: false))
        defer { store.close() }
        for start in stride(from: 0, to: 400, by: 100) {
            try store.commit(StoreChanges(inserts: Self.notes(start..<(start + 100), bodySize: 1500)))
        }
        try store.commit(StoreChanges(inserts: Self.folderRecords(0..<400)))
        // The files as a process killed now leaves them, then a checkpoint cut in its middle:
        // page 1 (the header) and the pages below the cut written into the file, the rest only
        // in the -wal.
        let crashed = directory("crashed.sqlite")
        for (source, target) in zip(SQLiteStore.files(at: original), SQLiteStore.files(at: crashed))
        where FileManager.default.fileExists(atPath: source.path) {
            try FileManager.default.copyItem(at: source, to: target)
        }
        let log = try WriteAheadLog(Data(contentsOf: URL(fileURLWithPath: crashed.path + "-wal")))
        let pages = log.pages.keys.sorted()
        try #require(log.pages[1] != nil && log.databasePages > 100, "the -wal holds the store's pages")
        try log.interruptCheckpoint(of: crashed, after: pages[pages.count / 2])
        let header = try DatabaseHeader(crashed)
        try #require(header.isAheadOfFile, "the header is ahead of the file: \(header)")
        let before = Self.files(crashed)

        let run = try ConcordRun.run(["store", "check", crashed.path, "--json"])
        #expect(run.status == 0, "healthy: \(run.output) \(run.errors)")
        let json = try run.json()
        #expect((json["records"] as? [String: Int]) == ["Folder": 3, "Note": 400])
        #expect(json["replayedLog"] as? Bool == true)
        #expect(json["integrity"] as? [String] == ["ok"])
        #expect((json["problems"] as? [Any])?.isEmpty == true, "\(run.output)")
        #expect(Self.files(crashed) == before, "the store's files are not touched")

        let text = try ConcordRun.run(["store", "check", crashed.path])
        #expect(text.status == 0 && text.lines.contains("ok") && !text.output.contains("truncated"), "\(text.output)")
    }

    @Test("16 random bytes in an index page of a cleanly closed store are found (integrity_check), exit 1")
    func damagedIndexPageIsFound() throws {
        let url = directory("damaged.sqlite")
        try Self.makeStore(at: url, count: 1000)
        #expect(!FileManager.default.fileExists(atPath: url.path + "-wal"), "closed cleanly")
        let root = try DatabaseQueue(
            path: url.path,
            configuration: {
                var c = Configuration()
                c.readonly = true
                return c
            }()
        )
        .read { db in try Int.fetchOne(db, sql: "SELECT rootpage FROM sqlite_master WHERE name = 'Note_folder_index'") }
        let leaves = SQLitePages.indexLeaves(try Data(contentsOf: url), root: try #require(root))
        let page = try #require(leaves.dropFirst(leaves.count / 2).first, "a leaf of the folder index")
        let garbage = try SQLitePages.scribble(on: page, of: url)
        let before = Self.files(url)

        let run = try ConcordRun.run(["store", "check", url.path, "--json"])
        #expect(run.status == 1, "damaged, but its records can be read: \(run.output) \(run.errors) bytes \(garbage)")
        let json = try run.json()
        let problems = try #require(json["problems"] as? [String])
        #expect(problems.contains { $0.contains("integrity_check") }, "\(problems) bytes \(garbage)")
        #expect((json["integrity"] as? [String])?.first != "ok")
        #expect(Self.files(url) == before, "the store's files are not touched")
        let text = try ConcordRun.run(["store", "check", url.path])
        #expect(text.status == 1 && text.output.contains("damaged: `concord store salvage`"), "\(text.output)")
    }

    @Test("a reference to a record the store does not hold is a problem; in a store that syncs, a note")
    func danglingReference() throws {
        for syncs in [false, true] {
            let url = directory("dangling-\(syncs).sqlite")
            try Self.makeStore(at: url, count: 30, metadata: syncs ? ["sync.device": Data("alpha".utf8)] : [:])
            let store = try SQLiteStore(url: url, schema: Self.schema, options: StoreOptions(presentsFiles: false))
            var orphan = Persistence.Record(id: .deterministic(entity: "Note", name: "orphan"))
            orphan.toOne["folder"] = .deterministic(entity: "Folder", name: "never made")
            try store.commit(StoreChanges(inserts: [orphan]))
            store.close()

            let run = try ConcordRun.run(["store", "check", url.path, "--json"])
            let json = try run.json()
            #expect(json["danglingReferences"] as? Int == 1, "\(run.output)")
            let findings = (json[syncs ? "notes" : "problems"] as? [String]) ?? []
            #expect(findings.contains { $0.contains("\(orphan.id).folder -> ") }, "\(run.output)")
            #expect(run.status == (syncs ? 0 : 1), "\(run.output)")
        }
    }

    @Test("a reference that cannot be read: check finds it, salvage copies the record without it and names it altered")
    func unreadableReference() throws {
        let url = directory("unreadable.sqlite")
        try Self.makeStore(at: url, count: 30)
        let victim = ObjectID.deterministic(entity: "Note", name: "note 7")
        let queue = try DatabaseQueue(path: url.path)
        try queue.write { db in
            try db.execute(
                sql: "UPDATE \"Note\" SET \"folder\" = X'3F3F' WHERE id = ?",
                arguments: [withUnsafeBytes(of: victim.uuid.uuid) { Data($0) }]
            )
        }
        try queue.close()

        let check = try ConcordRun.run(["store", "check", url.path, "--json"])
        #expect(check.status == 1, "\(check.output)")
        let problems = (try check.json()["problems"] as? [String]) ?? []
        #expect(problems.contains { $0.contains("cannot be read as record ids") && $0.contains("\(victim).folder") })

        let salvaged = directory("salvaged.sqlite")
        let run = try ConcordRun.run(["store", "salvage", url.path, "--to", salvaged.path, "--json"])
        #expect(run.status == 1, "a record was altered: \(run.output) \(run.errors)")
        let json = try run.json()
        #expect((json["recovered"] as? [String: Int])?["Note"] == 30)
        let altered = try #require(json["altered"] as? [[String: Any]])
        #expect(altered.count == 1 && altered.first?["id"] as? String == "\(victim)", "\(altered)")
        #expect(altered.first?["relationship"] as? String == "folder")

        let text = try ConcordRun.run(["store", "salvage", url.path, "--to", directory("again.sqlite").path])
        #expect(text.status == 1)
        #expect(text.output.contains("altered \(victim): its folder could not be read"), "\(text.output)")
        #expect(!text.output.contains("every record copied"), "\(text.output)")
    }

    @Test("--json prints one JSON object for every outcome, including when the command cannot start")
    func jsonForEveryOutcome() throws {
        let missing = directory("missing.sqlite")
        let check = try ConcordRun.run(["store", "check", missing.path, "--json"])
        #expect(check.status == 2)
        #expect((try check.json()["error"] as? String)?.contains(missing.path) == true, "\(check.output)")

        let salvage = try ConcordRun.run([
            "store", "salvage", missing.path, "--to", directory("to.sqlite").path, "--json",
        ])
        #expect(salvage.status == 2)
        #expect((try salvage.json()["error"] as? String)?.contains(missing.path) == true, "\(salvage.output)")

        let url = directory("healthy.sqlite")
        try Self.makeStore(at: url, count: 3)
        let existing = directory("existing.sqlite")
        try Self.makeStore(at: existing, count: 1)
        let refused = try ConcordRun.run(["store", "salvage", url.path, "--to", existing.path, "--json"])
        #expect(refused.status == 2)
        #expect(
            (try refused.json()["error"] as? String)?.contains("the destination exists") == true,
            "\(refused.output)"
        )

        let copied = try ConcordRun.run(["store", "salvage", url.path, "--to", directory("copy.sqlite").path, "--json"])
        #expect(copied.status == 0, "\(copied.output) \(copied.errors)")
        #expect(try copied.json()["error"] == nil)
    }
}
