import Foundation
import GRDB
import Persistence

/// The SQLite file format and the SQLite plugin's layout, as far as the tool needs them. Every
/// function that changes a file is only ever called on a copy.
enum SQLiteFile {
    /// How many pages the header counts beyond the end of the file (`nil`: none, or no valid
    /// header): a database cut short.
    static func missingPages(_ url: URL) -> (pages: Int, bytes: Int)? {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
        defer { try? handle.close() }
        guard let header = try? handle.read(upToCount: 100), header.count == 100, let size = try? handle.seekToEnd(),
            header.starts(with: Array("SQLite format 3\0".utf8))
        else { return nil }
        let bytes = [UInt8](header)
        func be32(_ offset: Int) -> Int { bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) } }
        let rawPageSize = Int(bytes[16]) << 8 | Int(bytes[17])
        let pageSize = rawPageSize == 1 ? 65536 : rawPageSize
        let expected = be32(28) * pageSize
        // The page count is valid when its version-valid-for number matches the change counter.
        guard pageSize >= 512, be32(92) == be32(24), expected > Int(size), expected - Int(size) < 1 << 34 else {
            return nil
        }
        return ((expected - Int(size) + pageSize - 1) / pageSize, expected - Int(size))
    }

    /// Extends a database cut short to the size its header gives with zero bytes (read as
    /// damaged pages); returns how many pages were added. Only ever called on a copy.
    static func padToHeaderSize(_ url: URL) -> Int? {
        guard let (pages, missing) = missingPages(url), let handle = try? FileHandle(forUpdating: url) else {
            return nil
        }
        defer { try? handle.close() }
        guard (try? handle.seekToEnd()) != nil else { return nil }
        let chunk = Data(count: min(missing, 1 << 20))
        var written = 0
        while written < missing {
            let part = min(chunk.count, missing - written)
            guard (try? handle.write(contentsOf: chunk.prefix(part))) != nil else { return nil }
            written += part
        }
        return pages
    }

    /// Replays the copy's `-wal` into its database file, as SQLite does when it opens a database
    /// a process left open (a checkpoint, which also completes one a kill cut short), and removes
    /// the `-wal` and `-shm`; returns whether there were frames to replay. Throws when SQLite
    /// cannot: the copy is then left as it was found.
    static func replayLog(_ url: URL) throws -> Bool {
        let log = (try? FileManager.default.attributesOfItem(atPath: url.path + "-wal")[.size] as? NSNumber)?.intValue
        guard let log, log > 0 else { return false }
        let queue = try DatabaseQueue(path: url.path)
        try queue.writeWithoutTransaction { db in
            let row = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            let busy: Int = row?[0] ?? 1
            if busy != 0 { throw ToolError("the -wal could not be replayed: SQLite reported it busy", url: url) }
        }
        try queue.close()
        return true
    }

    /// What `PRAGMA integrity_check` says of the database (`["ok"]` when it is healthy): the
    /// pages, and every index against its table. Read-only.
    static func integrityCheck(_ url: URL) throws -> [String] {
        var configuration = Configuration()
        configuration.readonly = true
        let queue = try DatabaseQueue(path: url.path, configuration: configuration)
        defer { try? queue.close() }
        do {
            return try queue.read { db in try String.fetchAll(db, sql: "PRAGMA integrity_check") }
        } catch let error as DatabaseError
            where error.resultCode == .SQLITE_CORRUPT || error.resultCode == .SQLITE_NOTADB
        {
            return [error.message ?? "\(error.resultCode)"]
        }
    }

    /// A relationship column the plugin cannot read as record ids: not a blob, or not 16 bytes
    /// per target. The plugin reads such a reference as no reference at all.
    struct UnreadableReference: Codable, Hashable {
        var entity: String
        var id: String
        var relationship: String
        var reason: String
    }

    /// Every relationship value of the store at `url` that is not a record id (or a list of
    /// them), at most `limit`: what a damaged row reads as an empty relationship. Read-only;
    /// the table of a damaged page is read as far as it goes.
    static func unreadableReferences(_ url: URL, schema: Schema, limit: Int = 1000) throws -> [UnreadableReference] {
        var configuration = Configuration()
        configuration.readonly = true
        let queue = try DatabaseQueue(path: url.path, configuration: configuration)
        defer { try? queue.close() }
        var found: [UnreadableReference] = []
        try queue.read { db in
            for entity in schema.entities {
                for relationship in entity.relationships where found.count < limit {
                    let column = "\"" + relationship.name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
                    let table = "\"" + entity.name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
                    let shape =
                        relationship.isToMany
                        ? "length(\(column)) = 0 OR length(\(column)) % 16 != 0" : "length(\(column)) != 16"
                    let sql = """
                        SELECT id, typeof(\(column)), length(\(column)) FROM \(table) \
                        WHERE \(column) IS NOT NULL AND (typeof(\(column)) != 'blob' OR \(shape)) LIMIT \(limit)
                        """
                    guard let rows = try? Row.fetchAll(db, sql: sql) else { continue }
                    for row in rows where found.count < limit {
                        let id: Data? = row[0]
                        let kind: String = row[1]
                        let length: Int = row[2]
                        found.append(
                            UnreadableReference(
                                entity: entity.name,
                                id: id.flatMap { recordID($0, entity: entity.name) } ?? "(an id that is not 16 bytes)",
                                relationship: relationship.name,
                                reason: kind == "blob"
                                    ? "\(length) bytes, not \(relationship.isToMany ? "a list of" : "a") 16-byte record id\(relationship.isToMany ? "s" : "")"
                                    : "a \(kind) value, not a record id"
                            )
                        )
                    }
                }
            }
        }
        return found
    }

    /// The record id of 16 id bytes, as record ids print (`Entity/uuid`).
    private static func recordID(_ bytes: Data, entity: String) -> String? {
        guard bytes.count == 16 else { return nil }
        let uuid = bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
        return "\(ObjectID(entity: entity, uuid: uuid))"
    }
}
