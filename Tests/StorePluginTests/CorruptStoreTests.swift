import ConcordTestSupport
import Foundation
import JSONStore
import Persistence
import PlistStore
import SQLiteStore
import StoreConformance
import Testing

/// Invariant 3 for the three plugins: damaged, truncated, empty and foreign files fail to open
/// with a typed error that names the file, nothing on disk changes, and the rest keeps working.
@Suite("Corrupt store files")
struct CorruptStoreTests {
    enum Plugin: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case sqlite, plist, json

        var type: any PersistentStore.Type {
            switch self {
            case .sqlite: return SQLiteStore.self
            case .plist: return PlistStore.self
            case .json: return JSONStore.self
            }
        }

        var testDescription: String { rawValue }
    }

    static let rejected: Set<PersistenceError.Code> = [.corruptStore, .notAStore]

    static func item(_ index: Int) -> Record {
        Record(
            id: .deterministic(entity: "Item", name: "item \(index)"),
            values: [
                "title": .string("item \(index)"), "number": .integer(Int64(index)),
                "blob": .data(Data(repeating: UInt8(index % 256), count: 64)),
            ]
        )
    }

    /// A real store of `plugin` at `url` with `count` records, closed.
    @discardableResult
    static func makeStore(
        _ plugin: Plugin,
        at url: URL,
        count: Int = 200,
        schema: Schema = ConformanceSchema.v1
    ) throws -> [Record] {
        let records = (0..<count).map(item)
        let store = try plugin.type.init(url: url, schema: schema, options: StoreOptions(presentsFiles: false))
        try store.commit(StoreChanges(inserts: records))
        store.close()
        return records
    }

    /// Every regular file in `directory` with its bytes.
    static func contents(of directory: URL) throws -> [String: Data] {
        var result: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
            let url = directory.appendingPathComponent(name)
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue {
                result[name] = try Data(contentsOf: url)
            }
        }
        return result
    }

    /// Opens `url` with `plugin`, which must throw a ``PersistenceError`` with one of `codes`
    /// naming the file, leaving every file in its directory as it was; then a good store in the
    /// same directory must still open, take a commit and read it back.
    @discardableResult
    static func expectRejected(
        _ plugin: Plugin,
        _ url: URL,
        schema: Schema = ConformanceSchema.v1,
        codes: Set<PersistenceError.Code> = rejected,
        _ what: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> PersistenceError? {
        let directory = url.deletingLastPathComponent()
        let before = try contents(of: directory)
        var caught: PersistenceError?
        do {
            let store = try plugin.type.init(url: url, schema: schema, options: StoreOptions(presentsFiles: false))
            store.close()
            Issue.record("\(plugin) opened \(what) without an error", sourceLocation: sourceLocation)
        } catch let error as PersistenceError {
            caught = error
            #expect(codes.contains(error.code), "\(plugin), \(what): \(error)", sourceLocation: sourceLocation)
            #expect(
                error.url?.resolvingSymlinksInPath().path == url.resolvingSymlinksInPath().path,
                "\(plugin), \(what): the error does not name the file: \(error)",
                sourceLocation: sourceLocation
            )
            #expect(!error.message.isEmpty, sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(plugin), \(what): not a PersistenceError: \(error)", sourceLocation: sourceLocation)
        }
        let after = try contents(of: directory)
        #expect(
            after == before,
            "\(plugin), \(what): files changed: before \(before.mapValues(\.count)), after \(after.mapValues(\.count))",
            sourceLocation: sourceLocation
        )
        try expectGoodStoreWorks(plugin, in: directory, sourceLocation: sourceLocation)
        return caught
    }

    static func expectGoodStoreWorks(
        _ plugin: Plugin,
        in directory: URL,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let url = directory.appendingPathComponent("good-\(UUID().uuidString).\(plugin.rawValue)")
        let records = try makeStore(plugin, at: url, count: 3)
        let store = try plugin.type.init(
            url: url,
            schema: ConformanceSchema.v1,
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        let fetched = try store.fetch(FetchRequest(entity: "Item"))
        #expect(
            Set(fetched.map(\.id)) == Set(records.map(\.id)),
            "a good store next to the bad file does not work",
            sourceLocation: sourceLocation
        )
    }

    @Test(
        "Truncated copies of a real store are refused; the copies and their companions stay as they were",
        arguments: Plugin.allCases
    )
    func truncated(_ plugin: Plugin) throws {
        let directory = TemporaryDirectory("corrupt-truncated")
        let original = directory("original.\(plugin.rawValue)")
        try Self.makeStore(plugin, at: original, count: 300)
        let bytes = try Data(contentsOf: original)
        for length in [bytes.count / 2, bytes.count - 1, 100, 1] {
            let copy = directory("truncated-\(length).\(plugin.rawValue)")
            try bytes.prefix(length).write(to: copy)
            try Self.expectRejected(plugin, copy, "a copy truncated to \(length) of \(bytes.count) bytes")
        }
    }

    @Test(
        "A truncated store copied with its companion files (a crash copy of an open store) is refused and nothing is touched",
        arguments: Plugin.allCases
    )
    func truncatedWithCompanions(_ plugin: Plugin) throws {
        let directory = TemporaryDirectory("corrupt-companions")
        let original = directory("open.\(plugin.rawValue)")
        let store = try plugin.type.init(
            url: original,
            schema: ConformanceSchema.v1,
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        try store.commit(StoreChanges(inserts: (0..<300).map(Self.item)))
        try store.commit(StoreChanges(deletes: (0..<100).map { Self.item($0).id }))
        // SQLite: the records checkpointed into the database file and one more commit in the
        // -wal, so the half cut off holds pages the -wal does not (a cut that only loses pages
        // the -wal supersedes is no damage: SQLite recovers it, as after a crash in a checkpoint,
        // and the store opens it).
        try (store as? SQLiteStore)?.savePresentedItemChanges()
        try store.commit(StoreChanges(deletes: [Self.item(299).id]))
        let copy = directory("copy.\(plugin.rawValue)")
        let sources = plugin.type.files(at: original)
        let targets = plugin.type.files(at: copy)
        for (source, target) in zip(sources, targets) where FileManager.default.fileExists(atPath: source.path) {
            try FileManager.default.copyItem(at: source, to: target)
        }
        let main = try Data(contentsOf: targets[0])
        try main.prefix(main.count / 2).write(to: targets[0])
        try Self.expectRejected(plugin, targets[0], "a half-truncated copy of an open store, with its companions")
    }

    @Test(
        "Garbage, text, hostile nesting and empty documents are refused with a typed error",
        arguments: Plugin.allCases
    )
    func garbage(_ plugin: Plugin) throws {
        let directory = TemporaryDirectory("corrupt-garbage")
        var generator = SystemRandomNumberGenerator()
        let cases: [(String, Data)] = [
            ("random bytes", Data((0..<8192).map { _ in UInt8.random(in: 0...255, using: &generator) })),
            ("a line of text", Data("not a store\n".utf8)),
            (
                "JSON nested 100 000 deep",
                Data((String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)).utf8)
            ),
            (
                "XML plist nested 50 000 deep",
                Data(
                    ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><plist version=\"1.0\">"
                        + String(repeating: "<array>", count: 50_000) + String(repeating: "</array>", count: 50_000)
                        + "</plist>").utf8
                )
            ),
            ("an empty JSON object", Data("{}".utf8)),
            ("JSON null", Data("null".utf8)),
            (
                "an empty binary property list",
                try PropertyListSerialization.data(fromPropertyList: [String: String](), format: .binary, options: 0)
            ),
            (
                "an empty XML property list",
                try PropertyListSerialization.data(fromPropertyList: [String: String](), format: .xml, options: 0)
            ),
            ("an SQLite header and nothing else", Data("SQLite format 3\u{0}".utf8)),
            ("another app's JSON", Data(#"{"format":"other","records":[1,2,3]}"#.utf8)),
        ]
        for (index, (what, bytes)) in cases.enumerated() {
            let url = directory("garbage-\(index).\(plugin.rawValue)")
            try bytes.write(to: url)
            try Self.expectRejected(plugin, url, what)
        }
    }

    @Test(
        "A zero-length file: the SQLite store takes it as a new store; the whole-file stores refuse it untouched",
        arguments: Plugin.allCases
    )
    func zeroLength(_ plugin: Plugin) throws {
        let directory = TemporaryDirectory("corrupt-empty")
        let url = directory("empty.\(plugin.rawValue)")
        try Data().write(to: url)
        switch plugin {
        case .sqlite:
            // Documented: "creating it when there is no file or an empty one".
            let store = try plugin.type.init(
                url: url,
                schema: ConformanceSchema.v1,
                options: StoreOptions(presentsFiles: false)
            )
            try store.commit(StoreChanges(inserts: [Self.item(1)]))
            store.close()
            let reopened = try plugin.type.init(
                url: url,
                schema: ConformanceSchema.v1,
                options: StoreOptions(presentsFiles: false)
            )
            #expect(try reopened.fetch(FetchRequest(entity: "Item")).map(\.id) == [Self.item(1).id])
            reopened.close()
            // Read-only, an empty file is not a store, and stays empty.
            let readOnly = directory("empty-read-only.\(plugin.rawValue)")
            try Data().write(to: readOnly)
            #expect(throws: PersistenceError.self) {
                try plugin.type.init(
                    url: readOnly,
                    schema: ConformanceSchema.v1,
                    options: StoreOptions(isReadOnly: true, presentsFiles: false)
                ).close()
            }
            #expect(try Data(contentsOf: readOnly).isEmpty)
        case .plist, .json:
            let error = try Self.expectRejected(plugin, url, codes: [.corruptStore], "a zero-length file")
            #expect(error?.code == .corruptStore)
        }
    }

    @Test(
        "A store of another schema: same version with other entities, or a newer version, is refused untouched",
        arguments: Plugin.allCases
    )
    func otherSchema(_ plugin: Plugin) throws {
        let directory = TemporaryDirectory("corrupt-schema")
        let url = directory("v1.\(plugin.rawValue)")
        try Self.makeStore(plugin, at: url)
        try Self.expectRejected(
            plugin,
            url,
            schema: ConformanceSchema.v1Other,
            codes: [.incompatibleSchema],
            "a version 1 store with another version 1 schema"
        )
        try Self.expectRejected(
            plugin,
            url,
            schema: ConformanceSchema.v3ChangedType,
            codes: [.incompatibleSchema],
            "a version 1 store with a schema that changes a type"
        )
        let newer = directory("v2.\(plugin.rawValue)")
        try Self.makeStore(plugin, at: newer, schema: ConformanceSchema.v2)
        try Self.expectRejected(plugin, newer, codes: [.newerSchema], "a version 2 store with version 1")
    }

    @Test(
        "Another plugin's store file is refused untouched (a JSON store as plist and vice versa, an SQLite file as JSON)",
        arguments: Plugin.allCases
    )
    func foreignFormat(_ plugin: Plugin) throws {
        let directory = TemporaryDirectory("corrupt-foreign")
        for other in Plugin.allCases where other != plugin {
            let url = directory("\(other.rawValue)-store.\(plugin.rawValue)")
            try Self.makeStore(other, at: url)
            // The other plugin's companions (an SQLite -wal, say) are whatever it left; they too
            // must stay as they are.
            try Self.expectRejected(plugin, url, "a \(other.rawValue) store")
            let reopened = try other.type.init(
                url: url,
                schema: ConformanceSchema.v1,
                options: StoreOptions(presentsFiles: false)
            )
            #expect(
                try reopened.count(for: FetchRequest(entity: "Item")) == 200,
                "the \(other.rawValue) store no longer opens after \(plugin) refused it"
            )
            reopened.close()
        }
    }
}
