import Foundation
import GRDB
import JSONStore
import Persistence
import PlistStore
import SQLiteStore

/// A failure of the tool, naming the file: printed as `concord: MESSAGE` with a non-zero status.
struct ToolError: Error, CustomStringConvertible {
    var message: String
    var url: URL?
    init(_ message: String, url: URL? = nil) {
        self.message = message
        self.url = url
    }
    var description: String { url.map { "\($0.path): \(message)" } ?? message }
}

/// Finds a store's type and schema, and opens a copy of it, so that nothing the tool does can
/// change the original.
enum StoreAccess {
    /// Every store type the tool knows.
    static let registry: StoreRegistry = {
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        registry.register(JSONStore.self)
        registry.register(PlistStore.self)
        return registry
    }()

    /// The store file at `path`: the file itself, or the one store file in a data folder
    /// (`*.sqlite`, `*.json`, `*.plist`, as the Notes sample names them).
    static func storeFile(_ path: String) throws -> URL {
        let url = URL(fileURLWithPath: path).standardizedFileURL
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else {
            throw ToolError("no such file or folder", url: url)
        }
        guard isDirectory.boolValue else { return url }
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []).sorted()
        let stores = names.filter { ["sqlite", "json", "plist"].contains(URL(fileURLWithPath: $0).pathExtension) }
        guard stores.count == 1 else {
            throw ToolError(
                stores.isEmpty
                    ? "the folder holds no store file (*.sqlite, *.json, *.plist)"
                    : "the folder holds several store files (\(stores.joined(separator: ", "))): name one",
                url: url
            )
        }
        return url.appendingPathComponent(stores[0])
    }

    /// The store type of `url`, from its first bytes (`nil`: none the tool knows).
    static func detectType(_ url: URL) -> String? {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
        defer { try? handle.close() }
        let head = (try? handle.read(upToCount: 64)) ?? Data()
        if head.starts(with: Array("SQLite format 3\0".utf8)) { return SQLiteStore.storeType }
        if head.starts(with: Array("bplist00".utf8)) { return PlistStore.storeType }
        let text = String(decoding: head, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if text.hasPrefix("<?xml") || text.hasPrefix("<plist") { return PlistStore.storeType }
        if text.hasPrefix("{") { return JSONStore.storeType }
        switch url.pathExtension {
        case "sqlite", "db": return SQLiteStore.storeType
        case "json": return JSONStore.storeType
        case "plist": return PlistStore.storeType
        default: return nil
        }
    }

    /// The store type named `type`, or `url`'s.
    static func type(of url: URL, named type: String?) throws -> any PersistentStore.Type {
        guard let name = type ?? detectType(url) else {
            throw ToolError(
                "cannot tell the store's type: give --type (\(registry.registeredTypeNames.joined(separator: ", ")))",
                url: url
            )
        }
        do {
            return try registry.storeType(named: name)
        } catch {
            throw ToolError("\(error)", url: url)
        }
    }

    /// Copies the store's files (the database with its `-wal` and `-shm`, say) into a new
    /// temporary folder; returns the copy's main file. The caller removes the folder.
    static func copy(_ url: URL, type: any PersistentStore.Type) throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("concord-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for file in type.files(at: url) where FileManager.default.fileExists(atPath: file.path) {
            do {
                try FileManager.default.copyItem(at: file, to: folder.appendingPathComponent(file.lastPathComponent))
            } catch {
                try? FileManager.default.removeItem(at: folder)
                throw ToolError("cannot copy the store's file: \(error.localizedDescription)", url: file)
            }
        }
        return folder.appendingPathComponent(url.lastPathComponent)
    }

    /// The schema the store at `url` recorded (every Concord store keeps its own). With
    /// `padding`, an SQLite database cut short is first padded to its size (`url` must be a copy).
    static func schema(of url: URL, type: String, padding: Bool = false) throws -> Schema {
        switch type {
        case SQLiteStore.storeType:
            if padding { _ = SQLiteFile.padToHeaderSize(url) }
            do {
                var configuration = Configuration()
                configuration.readonly = true
                let queue = try DatabaseQueue(path: url.path, configuration: configuration)
                defer { try? queue.close() }
                let data = try queue.read { db in
                    try Data.fetchOne(db, sql: "SELECT value FROM concord_metadata WHERE key = 'store.schema'")
                }
                guard let data else { throw ToolError("the database records no schema (store.schema)", url: url) }
                return try JSONDecoder().decode(Schema.self, from: data)
            } catch let error as ToolError {
                throw error
            } catch {
                throw ToolError("cannot read the schema the store recorded: \(error)", url: url)
            }
        case JSONStore.storeType, PlistStore.storeType:
            let data: Data
            do { data = try Data(contentsOf: url) } catch {
                throw ToolError("cannot read the file: \(error.localizedDescription)", url: url)
            }
            guard let tree = ArchiveTree.parse(data, type: type), let schema = tree["schema"] else {
                throw ToolError(
                    "the file's schema cannot be read (a damaged or cut-short file): give --schema-from ANOTHER_STORE",
                    url: url
                )
            }
            do {
                return try ArchiveTree.decode(Schema.self, from: schema, type: type)
            } catch {
                throw ToolError("the file's schema cannot be decoded: \(error)", url: url)
            }
        default:
            throw ToolError(
                "the tool cannot read the schema of a \(type) store: give --schema-from ANOTHER_STORE",
                url: url
            )
        }
    }

    /// The schema for `url`: from `--schema-from` when given, else the one the store recorded.
    /// Read from a copy: even a read-only SQLite connection may make a `-shm` beside the file.
    static func schema(of url: URL, type: String, from other: String?) throws -> Schema {
        let source = try other.map(storeFile) ?? url
        let sourceType = other == nil ? type : try self.type(of: source, named: nil).storeType
        let copy = try self.copy(source, type: registry.storeType(named: sourceType))
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        do {
            return try schema(of: copy, type: sourceType, padding: true)
        } catch var error as ToolError {
            error.url = source
            throw error
        }
    }

    /// Opens the copy at `url` without presenting its files.
    static func open(
        _ url: URL,
        type: any PersistentStore.Type,
        schema: Schema,
        integrityCheck: String = "quick"
    )
        throws -> any PersistentStore
    {
        try type.init(
            url: url,
            schema: schema,
            options: StoreOptions(isReadOnly: true, presentsFiles: false, settings: ["integrityCheck": integrityCheck])
        )
    }
}

/// A whole-file store's document as a tree (JSON or property list), to read it piece by piece.
enum ArchiveTree {
    /// The document's top-level dictionary (`nil`: it does not parse).
    static func parse(_ data: Data, type: String) -> [String: Any]? {
        if type == JSONStore.storeType {
            return (try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])) as? [String: Any]
        }
        return (try? PropertyListSerialization.propertyList(from: data, options: [], format: nil)) as? [String: Any]
    }

    /// The bytes of `tree` in the document's syntax.
    static func serialize(_ tree: Any, type: String) throws -> Data {
        if type == JSONStore.storeType {
            return try JSONSerialization.data(withJSONObject: tree, options: [.sortedKeys])
        }
        return try PropertyListSerialization.data(fromPropertyList: tree, format: .binary, options: 0)
    }

    /// Decodes `T` from a subtree.
    static func decode<T: Decodable>(_: T.Type, from tree: Any, type: String) throws -> T {
        let data = try serialize(tree, type: type)
        if type == JSONStore.storeType { return try JSONDecoder().decode(T.self, from: data) }
        return try PropertyListDecoder().decode(T.self, from: data)
    }
}
