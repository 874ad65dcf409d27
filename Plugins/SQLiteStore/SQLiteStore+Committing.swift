import FileCoordination
import Foundation
import GRDB
import Persistence

// MARK: - Committing
extension SQLiteStore {
    /// Applies `changes` in one transaction, durably, inside a coordinated write of the
    /// database (so other coordinating processes see a writer).
    public func commit(_ changes: StoreChanges) throws {
        let (queue, url) = try connection()
        if options.isReadOnly {
            throw PersistenceError(.readOnly, "the store was opened read-only", url: url)
        }
        try changes.validate(in: schema)
        if changes.isEmpty { return }
        do {
            try FileCoordinator(filePresenter: self).coordinate(writingItemAt: url, options: []) { _ in
                try queue.writeWithoutTransaction { db in
                    try db.inTransaction(.immediate) {
                        try self.apply(changes, db, url: url)
                        return .commit
                    }
                }
            }
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_IOERR_FSYNC {
            throw unsyncedCommit(error, queue: queue, url: url)
        } catch {
            throw translate(error, url: url, doing: "committing")
        }
    }

    /// The error for a commit whose sync of the `-wal` to disk failed after its pages were
    /// written there. SQLite reports the commit failed, and this store and every other
    /// connection go on without it, but its pages are in the `-wal` with a valid commit mark:
    /// a crash before anything overwrites them would bring the change back at the next open. So
    /// the `-wal` is checkpointed and truncated at once, which drops them: the change is then
    /// not saved, for good, and repeating it makes no duplicate. When that cannot be done
    /// (another connection reads, or the disk fails again), the outcome is unknown until the
    /// store is reopened, and the error says so (reason ``PersistenceError/Reason/commitUnconfirmed``).
    private func unsyncedCommit(_ error: DatabaseError, queue: DatabaseQueue, url: URL) -> PersistenceError {
        let dropped: Bool
        do {
            let busy = try queue.writeWithoutTransaction { db in
                try Int.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)") ?? 1
            }
            dropped = busy == 0 && LeftoverState(databasePath: url.path).logSize == 0
        } catch {
            dropped = false
        }
        let cause = "the sync of its -wal to disk failed (\(error.message ?? "disk I/O error"))"
        if dropped {
            return PersistenceError(
                .ioFailed,
                "committing failed: \(cause); the change is not saved (its pages were dropped from the -wal): "
                    + "it can be repeated once the disk works",
                url: url,
                underlying: error
            )
        }
        return PersistenceError(
            .ioFailed,
            "committing failed: \(cause), and its pages are still in the -wal: the change is not in the store "
                + "now, but a crash before the store's next commit or close could bring it back; reopen the store "
                + "and check before repeating it",
            url: url,
            underlying: error,
            reason: .commitUnconfirmed
        )
    }

    fileprivate func apply(_ changes: StoreChanges, _ db: Database, url: URL) throws {
        // Inserts: full rows, one cached statement per entity.
        var current: (entity: String, table: EntityLayout, statement: RawStatement)?
        for record in changes.inserts {
            if current?.entity != record.id.entity {
                current?.statement.finish()
                let table = layout.entities[record.id.entity]!
                current = (record.id.entity, table, try RawStatement(db, sql: table.insertSQL, url: url))
            }
            let (_, table, statement) = current!
            try statement.bindRow(record, table)
            try statement.run("inserting records")
        }
        current?.statement.finish()

        // Updates: only the properties named.
        for update in changes.updates where !update.isEmpty {
            let table = layout.entities[update.id.entity]!
            var keys = update.keys.sorted()
            keys.removeAll { table.column($0) == nil }
            if keys.isEmpty { continue }
            let sql =
                "UPDATE \(table.quotedTable) SET " + keys.map { quoted($0) + " = ?" }.joined(separator: ", ")
                + " WHERE id = ?"
            let statement = try RawStatement(db, sql: sql, url: url)
            defer { statement.finish() }
            var bindings: [SQLiteBinding] = []
            for key in keys {
                switch table.column(key)!.kind {
                case .attribute(let type): bindings.append(SQLiteBinding(update.values[key] ?? .null, as: type))
                case .toOne: bindings.append((update.toOne[key] ?? nil).map { .uuid($0.uuid) } ?? .null)
                case .toMany: bindings.append((update.toMany[key].flatMap(toManyBlob)).map { .blob($0) } ?? .null)
                }
            }
            bindings.append(.uuid(update.id.uuid))
            try statement.bind(bindings)
            try statement.run("updating records")
        }

        // Deletes.
        for id in changes.deletes {
            let table = layout.entities[id.entity]!
            let statement = try RawStatement(db, sql: table.deleteSQL, url: url)
            defer { statement.finish() }
            try statement.bind([.uuid(id.uuid)])
            try statement.run("deleting records")
        }

        // Metadata entries.
        for (key, value) in changes.metadataEntries.sorted(by: { $0.key < $1.key }) {
            if let value {
                let statement = try RawStatement(
                    db,
                    sql: "INSERT OR REPLACE INTO \(StoreLayout.metadataTable) (key, value) VALUES (?, ?)",
                    url: url
                )
                defer { statement.finish() }
                try statement.bind([.text(MetadataKey.entryPrefix + key), .blob(value)])
                try statement.run("writing metadata")
            } else {
                let statement = try RawStatement(
                    db,
                    sql: "DELETE FROM \(StoreLayout.metadataTable) WHERE key = ?",
                    url: url
                )
                defer { statement.finish() }
                try statement.bind([.text(MetadataKey.entryPrefix + key)])
                try statement.run("writing metadata")
            }
        }
    }
}
