import Foundation
import GRDB
import GRDBSQLite
import Persistence

// MARK: - Opening
extension SQLiteStore {
    struct Opened {
        let queue: DatabaseQueue
        let storeIdentifier: UUID
        let dataVersion: Int
        let checkedIntegrity: Bool
    }

    /// The store's own metadata key for when the last full check passed (seconds since 1970, a
    /// decimal string): written when the store is created and after each full check at open.
    static let integrityCheckedKey = "store.integrityChecked"

    /// What a look at an existing file found.
    private enum Validation {
        /// An SQLite database with nothing in it: made into a store.
        case empty
        /// A Concord store, and the migration it needs (if any).
        case store(identifier: UUID, migration: SchemaMigration?)
    }

    /// Opens (or creates) the store at `url`. An existing file is first checked from its header
    /// (unless a `-wal` with frames is left, see ``LeftoverState``) and then through a read-only
    /// connection (`immutable` when there is no `-wal`, so not even a `-shm` is created), with
    /// the check `integrityCheck` asks for (`PRAGMA integrity_check` after an unclean close or
    /// when the last full check is old): a file that fails a check is never opened for writing.
    static func open(
        at url: URL,
        layout: StoreLayout,
        options: StoreOptions,
        busyTimeout: Double,
        integrityCheck: IntegrityCheckPolicy
    ) throws(PersistenceError) -> Opened {
        let path = url.path
        // The log is looked at before the database's size: a connection that closes checkpoints
        // the log into the database (which grows) and only then deletes the log. Seen the other
        // way round, a size read mid-checkpoint and a log already gone looked like a truncated file.
        let leftover = LeftoverState(databasePath: path)
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue
        if options.isReadOnly && (size ?? 0) == 0 {
            throw PersistenceError(
                .ioFailed,
                "there is no store to open read-only (\(size == nil ? "no file" : "an empty file"))",
                url: url
            )
        }

        var validation = Validation.empty
        var ran = IntegrityCheck.none
        if let size, size > 0 {
            // With frames left in the log, the header may count pages only the log holds yet (a
            // checkpoint cut short): SQLite reads them from there, and the integrity check judges.
            if !leftover.isUnclean { try checkHeader(url: url, size: size) }
            // No log: `immutable`, so not even a `-shm` is made. A log: read through it, first
            // with the `-shm` read-only when there is one (SQLite then reads the log itself rather
            // than rebuild the index in the file), and if a live connection's index refuses a
            // read-only reader, as an ordinary reader. A store opened read-only keeps its reader,
            // so it gets the ordinary one.
            let hasLog = FileManager.default.fileExists(atPath: path + "-wal")
            let hasIndex = FileManager.default.fileExists(atPath: path + "-shm")
            let uri = "file:" + (path.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? path)
            let locations =
                !hasLog
                ? [uri + "?immutable=1"] : hasIndex && !options.isReadOnly ? [uri + "?readonly_shm=1", path] : [path]
            for (attempt, location) in locations.enumerated() {
                let isLast = attempt == locations.count - 1
                let reader: DatabaseQueue
                do {
                    reader = try makeQueue(location, url: url, readOnly: true, busyTimeout: busyTimeout)
                } catch {
                    if !isLast && isSharedMemoryRefusal(error) { continue }
                    throw error
                }
                do {
                    (validation, ran) = try reader.inDatabase { db in
                        try validate(
                            db,
                            url: url,
                            layout: layout,
                            options: options,
                            policy: integrityCheck,
                            leftover: leftover
                        )
                    }
                    if options.isReadOnly {
                        guard case .store(let identifier, _) = validation else {
                            throw PersistenceError(
                                .notAStore,
                                "an empty SQLite database, opened read-only: not a Concord store",
                                url: url
                            )
                        }
                        let version = try reader.inDatabase { db in
                            try Int.fetchOne(db, sql: "PRAGMA data_version") ?? 0
                        }
                        return Opened(
                            queue: reader,
                            storeIdentifier: identifier,
                            dataVersion: version,
                            checkedIntegrity: ran != .none
                        )
                    }
                    try reader.close()
                    break
                } catch {
                    try? reader.close()
                    if !isLast && isSharedMemoryRefusal(error) { continue }
                    throw openingError(error, url: url)
                }
            }
        }

        let queue = try makeQueue(path, url: url, readOnly: false, busyTimeout: busyTimeout)
        do {
            return try queue.inDatabase { db throws -> Opened in
                let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
                guard mode?.lowercased() == "wal" else {
                    throw PersistenceError(
                        .ioFailed,
                        "cannot switch the database to WAL mode (got \(mode ?? "nothing"))",
                        url: url
                    )
                }
                try db.execute(sql: "PRAGMA synchronous = FULL")
                let identifier: UUID
                switch validation {
                case .empty:
                    // (Made only here: opening an existing store needs no randomness.)
                    identifier = try StoreMetadata.makeCheckedIdentifier()
                    try db.inTransaction(.immediate) {
                        for statement in layout.createStatements { try db.execute(sql: statement) }
                        try writeStoreRows(db, identifier: identifier, schema: layout.schema)
                        try recordFullCheck(db)  // a new store is whole
                        return .commit
                    }
                case .store(let stored, let migration):
                    identifier = stored
                    // Recorded after a clean close only: with another connection open (a -wal
                    // left), the write would reach it as a change made by someone else.
                    if ran.isFull && !leftover.isUnclean {
                        try db.inTransaction(.immediate) {
                            try recordFullCheck(db)
                            return .commit
                        }
                    }
                    if let migration {
                        try db.inTransaction(.immediate) {
                            for (sql, bindings) in layout.migrationStatements(migration) {
                                let statement = try RawStatement(db, sql: sql, url: url)
                                try statement.bind(bindings)
                                try statement.run("migrating the store")
                            }
                            try writeStoreRows(db, identifier: identifier, schema: layout.schema)
                            return .commit
                        }
                    }
                }
                let existing = Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index'"))
                let missing = layout.entities.values.flatMap { table in
                    table.indexedAttributes.filter { !existing.contains("\(table.entity.name)_\($0)_index") }.map {
                        table.createIndex($0)
                    }
                }
                if !missing.isEmpty {
                    try db.inTransaction(.immediate) {
                        for statement in missing { try db.execute(sql: statement) }
                        return .commit
                    }
                }
                let version = try Int.fetchOne(db, sql: "PRAGMA data_version") ?? 0
                return Opened(
                    queue: queue,
                    storeIdentifier: identifier,
                    dataVersion: version,
                    checkedIntegrity: ran != .none
                )
            }
        } catch {
            try? queue.close()
            throw openingError(error, url: url)
        }
    }

    private static func makeQueue(
        _ location: String,
        url: URL,
        readOnly: Bool,
        busyTimeout: Double
    ) throws(PersistenceError) -> DatabaseQueue {
        var configuration = Configuration()
        configuration.readonly = readOnly
        configuration.busyMode = .timeout(busyTimeout)
        configuration.foreignKeysEnabled = false
        configuration.journalMode = .default  // WAL is switched on by the store, once the file is known to be its own
        configuration.label = "concord.sqlite"
        configuration.prepareDatabase { db in
            db.add(
                function: DatabaseFunction("concord_holds_id", argumentCount: 2, pure: true) { arguments in
                    guard let blob = Data.fromDatabaseValue(arguments[0]), let id = Data.fromDatabaseValue(arguments[1])
                    else { return 0 }
                    return blobHoldsID(blob, id) ? 1 : 0
                }
            )
        }
        do {
            return try DatabaseQueue(path: location, configuration: configuration)
        } catch {
            throw openingError(error, url: url)
        }
    }

    private static func openingError(_ error: any Error, url: URL) -> PersistenceError {
        switch error {
        case let error as PersistenceError:
            return error
        case let error as DatabaseError:
            if let failure = writeFailure(error, url: url) {
                return WriteAccess.error(failure, store: url, doing: "opening the store", cause: error)
            }
            if error.resultCode == .SQLITE_NOTADB || error.resultCode == .SQLITE_CORRUPT {
                return PersistenceError(
                    .corruptStore,
                    "the file is not a readable SQLite database: \(error.message ?? "\(error.resultCode)")",
                    url: url,
                    underlying: error
                )
            }
            return PersistenceError(
                .ioFailed,
                "cannot open the store: \(error.message ?? "\(error.resultCode)")",
                url: url,
                underlying: error
            )
        default:
            return PersistenceError(.ioFailed, "cannot open the store: \(error)", url: url, underlying: error)
        }
    }

    /// A read-only `-shm` that SQLite could not read through (a live connection's index with no
    /// read mark to share, say): `SQLITE_READONLY` or `SQLITE_BUSY`, itself or as the cause.
    private static func isSharedMemoryRefusal(_ error: any Error) -> Bool {
        let database = (error as? DatabaseError) ?? ((error as? PersistenceError)?.underlying as? DatabaseError)
        guard let database else { return false }
        // SQLITE_PROTOCOL: a `readonly_shm` reader that finds the index left by a killed writer
        // (a log with no frames) cannot rebuild it and gives up; an ordinary reader can
        // (`make crash`: every SQLite store killed in the middle of a save failed to reopen so).
        return database.resultCode == .SQLITE_READONLY || database.resultCode == .SQLITE_BUSY
            || database.resultCode == .SQLITE_PROTOCOL
    }

    /// When SQLite failed to open, create or write a file: the folder or file that cannot be
    /// written, and why (`nil` for other failures, or when everything can be written).
    static func writeFailure(_ error: DatabaseError, url: URL) -> (url: URL, code: POSIXErrorCode)? {
        switch error.resultCode {
        case .SQLITE_CANTOPEN, .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_IOERR, .SQLITE_FULL, .SQLITE_AUTH:
            return WriteAccess.failure(at: url)
        default:
            return nil
        }
    }

    /// Reads what an existing database holds, changing nothing; first runs the check `policy`
    /// asks for (`leftover` and the last full check the store recorded decide), so a damaged page
    /// or an index that disagrees with its table is found before anything writes the file.
    /// Returns what it found and the check it ran.
    private static func validate(
        _ db: Database,
        url: URL,
        layout: StoreLayout,
        options: StoreOptions,
        policy: IntegrityCheckPolicy,
        leftover: LeftoverState
    ) throws -> (Validation, IntegrityCheck) {
        let objects = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") ?? 0
        let isStore =
            try Bool.fetchOne(
                db,
                sql: "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?",
                arguments: [StoreLayout.metadataTable]
            ) ?? false
        if objects > 0 && !isStore {
            throw PersistenceError(
                .notAStore,
                "an SQLite database without Concord's \(StoreLayout.metadataTable) table: not a Concord store",
                url: url
            )
        }
        let check = policy.check(leftover, lastFullCheck: isStore ? try? lastFullCheck(db) : nil)
        if let pragma = check.pragma, objects > 0 {
            let result: [String]
            do {
                result = try String.fetchAll(db, sql: "PRAGMA \(pragma)")
            } catch let error as DatabaseError
                where error.resultCode == .SQLITE_CORRUPT || error.resultCode == .SQLITE_NOTADB
            {
                result = [error.message ?? "\(error.resultCode)"]
            }
            if result != ["ok"] {
                var why = ""
                if case .full(let reason) = check { why = " (\(reason.text))" }
                throw PersistenceError(
                    .corruptStore,
                    "the database is damaged, \(pragma)\(why): " + result.prefix(5).joined(separator: "; ")
                        + "; nothing was written to it. Run `concord store check \(url.path)` to see the damage, "
                        + "and `concord store salvage \(url.path) --to NEW.sqlite` to copy what can be read",
                    url: url
                )
            }
        }
        guard isStore else { return (.empty, check) }
        // (The identifier and the schema only: a store's metadata grows with its synced records.)
        let stored = try readStored(db, url: url, identityOnly: true)
        let plan = try SchemaMigration(from: stored.schema, to: layout.schema, url: url)
        if plan.isIdentity { return (.store(identifier: stored.metadata.storeIdentifier, migration: nil), check) }
        if options.isReadOnly {
            throw PersistenceError(
                .readOnly,
                "the store has schema version \(stored.schema.version) and needs migrating to \(layout.schema.version), but was opened read-only",
                url: url
            )
        }
        return (.store(identifier: stored.metadata.storeIdentifier, migration: plan), check)
    }

    /// When the last full check passed, as the store recorded it (`nil`: never).
    private static func lastFullCheck(_ db: Database) throws -> Date? {
        let value = try String.fetchOne(
            db,
            sql: "SELECT CAST(value AS TEXT) FROM \(StoreLayout.metadataTable) WHERE key = ?",
            arguments: [integrityCheckedKey]
        )
        return value.flatMap(TimeInterval.init).map(Date.init(timeIntervalSince1970:))
    }

    /// Records that a full check passed now.
    private static func recordFullCheck(_ db: Database) throws {
        try db.execute(
            sql: "INSERT OR REPLACE INTO \(StoreLayout.metadataTable) (key, value) VALUES (?, ?)",
            arguments: [integrityCheckedKey, Data(String(Date().timeIntervalSince1970).utf8)]
        )
    }

    /// Catches a truncated database without reading it: the header's page count times its page
    /// size must fit in the file.
    private static func checkHeader(url: URL, size: Int) throws(PersistenceError) {
        let header: Data
        do {
            let handle = try FileHandle(forReadingFrom: url)
            defer { try? handle.close() }
            header = try handle.read(upToCount: 100) ?? Data()
        } catch {
            throw PersistenceError(.ioFailed, "cannot read the database header: \(error)", url: url)
        }
        guard header.count == 100, header.starts(with: Array("SQLite format 3\0".utf8)) else {
            throw PersistenceError(
                .corruptStore,
                "the file is not a readable SQLite database: \(String(cString: sqlite3_errstr(SQLITE_NOTADB))) (\(header.count < 100 ? "\(size) bytes, shorter than a header" : "no SQLite header"))",
                url: url
            )
        }
        let bytes = [UInt8](header)
        func be32(_ offset: Int) -> Int { bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) } }
        let rawPageSize = Int(bytes[16]) << 8 | Int(bytes[17])
        let pageSize = rawPageSize == 1 ? 65536 : rawPageSize
        let pageCount = be32(28)
        // The header's page count is valid when its version-valid-for number matches the change counter.
        guard pageSize >= 512, be32(92) == be32(24), pageCount > 0 else { return }
        if size < pageCount * pageSize {
            throw PersistenceError(
                .corruptStore,
                "the database is truncated: its header says \(pageCount) pages of \(pageSize) bytes (\(pageCount * pageSize) bytes), the file has \(size)",
                url: url
            )
        }
    }

    private static func writeStoreRows(_ db: Database, identifier: UUID, schema: Schema) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let rows: [(String, Data)] = [
            (MetadataKey.identifier, Data(identifier.uuidString.utf8)),
            (MetadataKey.schemaVersion, Data(String(schema.version).utf8)),
            (MetadataKey.schema, try encoder.encode(schema)),
        ]
        for (key, value) in rows {
            try db.execute(
                sql: "INSERT OR REPLACE INTO \(StoreLayout.metadataTable) (key, value) VALUES (?, ?)",
                arguments: [key, value]
            )
        }
    }
}
