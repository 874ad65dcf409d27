import Foundation
import GRDB
import GRDBSQLite
import Persistence

// MARK: - Metadata
extension SQLiteStore {
    enum MetadataKey {
        static let identifier = "store.identifier"
        static let schemaVersion = "store.schemaVersion"
        static let schema = "store.schema"
        static let entryPrefix = "entry."
    }

    /// The store's metadata as last committed (by anyone).
    public func metadata() throws -> StoreMetadata {
        try read { db, url in try Self.readMetadata(db, url: url) }
    }

    /// The metadata entries with these keys, as last committed, read by key (the rest of the
    /// metadata is not loaded).
    public func metadataEntries(forKeys keys: [String]) throws -> [String: Data] {
        if keys.isEmpty { return [:] }
        return try read { db, url in
            // A few keys are looked up one by one in one read transaction: a seek each, where an
            // `IN` list first builds a temporary index of its values.
            if keys.count <= Self.keysReadOneByOne {
                return try Self.readingOnce(db, url: url) {
                    let statement = try RawStatement(
                        db,
                        sql: "SELECT value FROM \(StoreLayout.metadataTable) WHERE key = ?",
                        url: url
                    )
                    var found: [String: Data] = [:]
                    for key in keys where found[key] == nil {
                        let bound = bindText(MetadataKey.entryPrefix + key, statement.pointer, 1)
                        try statement.check(bound, "binding a value")
                        if try statement.step("reading metadata") { found[key] = statement.data(0) }
                        sqlite3_reset(statement.pointer)
                    }
                    statement.finish()
                    return found
                }
            }
            let unique = Array(Set(keys))
            var found: [String: Data] = [:]
            for start in stride(from: 0, to: unique.count, by: 512) {
                let chunk = unique[start..<min(start + 512, unique.count)]
                let statement = try RawStatement(
                    db,
                    sql:
                        "SELECT key, value FROM \(StoreLayout.metadataTable) WHERE key IN (\(PlaceholderList.text(for: chunk.count)))",
                    url: url
                )
                defer { statement.finish() }
                try statement.bind(PlaceholderList.padded(chunk.map { .text(MetadataKey.entryPrefix + $0) }))
                while try statement.step("reading metadata") {
                    found[String(statement.text(0).dropFirst(MetadataKey.entryPrefix.count))] = statement.data(1)
                }
            }
            return found
        }
    }

    /// How many keys ``metadataEntries(forKeys:)`` looks up one by one.
    static let keysReadOneByOne = 32

    /// Runs `body`'s statements in one read transaction (unless one is open already): one
    /// snapshot, and one WAL read lock, for all of them.
    static func readingOnce<T>(_ db: Database, url: URL, _ body: () throws -> T) throws -> T {
        guard sqlite3_get_autocommit(db.sqliteConnection) != 0 else { return try body() }
        let begin = try RawStatement(db, sql: "BEGIN DEFERRED", url: url)
        try begin.run("beginning a read")
        do {
            let result = try body()
            try RawStatement(db, sql: "COMMIT", url: url).run("ending a read")
            return result
        } catch {
            // (The connection must not stay in the transaction: the next commit begins its own.)
            if sqlite3_get_autocommit(db.sqliteConnection) == 0 {
                try? RawStatement(db, sql: "ROLLBACK", url: url).run("ending a read")
            }
            throw error
        }
    }

    /// Up to `limit` metadata entries whose keys begin with `prefix`, after `key`, in key order:
    /// a range of the metadata table's primary key.
    public func metadataEntries(
        withPrefix prefix: String,
        after key: String?,
        limit: Int
    ) throws -> [(key: String, value: Data)] {
        guard limit > 0 else { return [] }
        let stored = MetadataKey.entryPrefix + prefix
        return try read { db, url in
            // Text compares as bytes (the BINARY collation): everything with the prefix sorts
            // from it to it followed by the highest scalar.
            let lower = key.map { (">", MetadataKey.entryPrefix + $0) } ?? (">=", stored)
            let statement = try RawStatement(
                db,
                sql:
                    "SELECT key, value FROM \(StoreLayout.metadataTable) WHERE key \(lower.0) ? AND key < ? ORDER BY key LIMIT ?",
                url: url
            )
            defer { statement.finish() }
            try statement.bind([.text(lower.1), .text(stored + "\u{10FFFF}"), .integer(Int64(limit))])
            var found: [(key: String, value: Data)] = []
            while try statement.step("reading metadata") {
                found.append((String(statement.text(0).dropFirst(MetadataKey.entryPrefix.count)), statement.data(1)))
            }
            return found
        }
    }

    /// The metadata and the schema the store was written with.
    /// With `identityOnly`, only the identifier and the schema are read (the entries come back
    /// empty): the other rows, one per synced record's clocks, are not read.
    static func readStored(
        _ db: Database,
        url: URL,
        identityOnly: Bool = false
    ) throws -> (metadata: StoreMetadata, schema: Schema) {
        var identifier: UUID?
        var schema: Schema?
        var entries: [String: Data] = [:]
        let rows =
            identityOnly
            ? try Row.fetchAll(
                db,
                sql: "SELECT key, value FROM \(StoreLayout.metadataTable) WHERE key IN (?, ?)",
                arguments: [MetadataKey.identifier, MetadataKey.schema]
            )
            : try Row.fetchAll(db, sql: "SELECT key, value FROM \(StoreLayout.metadataTable)")
        for row in rows {
            guard let key = row[0] as String?,
                let value = (row[1] as Data?) ?? (row[1] as String?).map({ Data($0.utf8) })
            else { continue }
            switch key {
            case MetadataKey.identifier:
                identifier = UUID(uuidString: String(decoding: value, as: UTF8.self))
            case MetadataKey.schema:
                do {
                    schema = try JSONDecoder().decode(Schema.self, from: value)
                } catch {
                    throw PersistenceError(.corruptStore, "the stored schema cannot be read: \(error)", url: url)
                }
            default:
                if key.hasPrefix(MetadataKey.entryPrefix) {
                    entries[String(key.dropFirst(MetadataKey.entryPrefix.count))] = value
                }
            }
        }
        guard let identifier, let schema else {
            throw PersistenceError(
                .corruptStore,
                "\(StoreLayout.metadataTable) lacks the store's identifier or schema",
                url: url
            )
        }
        return (StoreMetadata(storeIdentifier: identifier, schemaVersion: schema.version, entries: entries), schema)
    }

    fileprivate static func readMetadata(_ db: Database, url: URL) throws -> StoreMetadata {
        try readStored(db, url: url).metadata
    }
}
