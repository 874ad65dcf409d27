import FileCoordination
import Foundation
import GRDB
import GRDBSQLite
import Persistence
import Synchronization

/// A store kept in an SQLite database (see `SQLiteLayout.swift` for the tables), through one
/// GRDB connection in WAL mode with `synchronous=FULL`: a commit that returned survives a crash
/// or a power cut, and other processes (and other store objects) can read while it writes.
///
/// Settings (`StoreOptions.settings`):
/// - `busyTimeout`: seconds to wait for another connection's write lock (default 5).
/// - `indexes`: attributes to index besides those marked `isIndexed`, as
///   `"Entity.attribute,Entity.other"`.
/// - `integrityCheck`: when `PRAGMA quick_check` (a full scan) runs as the store opens.
///   `"afterUncleanClose"` (the default): when the last session did not close the database
///   cleanly (a non-empty `-wal` is left: a crash, or another connection still open), so a page
///   damaged then is found before anything writes to the file; a clean reopen reads only the
///   header. `"quick"` (or `"always"`): at every open. `"never"`: header and SQLite checks only.
///
/// A database left by a process killed in the middle of a checkpoint (its header already counts
/// pages that are still only in the `-wal`) opens: SQLite recovers it from the log, and the
/// integrity check confirms it. A file that is really damaged is refused, and nothing writes it.
/// A folder or file the store cannot write is `PersistenceError.Code.notWritable`, naming the
/// folder and the errno (`EROFS`, `EACCES`).
///
/// When it presents its files (the default), the store follows them: commits by other
/// connections are reported as `StoreEvent.Kind.changedExternally` (its own are not), the
/// deletion of the database tears the store down (`StoreEvent.Kind.removed`, then every call
/// throws `PersistenceError.Code.storeRemoved`), and a coordinated move of the database with
/// its `-wal` and `-shm` files reopens it at the new place (`StoreEvent.Kind.moved(from:to:)`).
public final class SQLiteStore: PersistentStore, FilePresenter {
    /// `"sqlite"`.
    public static let storeType = "sqlite"

    /// The database, its write-ahead log and its shared-memory index.
    public static func files(at url: URL) -> [URL] {
        [url, URL(fileURLWithPath: url.path + "-wal"), URL(fileURLWithPath: url.path + "-shm")]
    }

    /// The schema its records follow.
    public let schema: Schema
    /// Where the store reports events.
    public let events = StoreEventChannel()

    private let options: StoreOptions
    private let layout: StoreLayout
    private let busyTimeout: Double
    private let integrityCheck: IntegrityCheckPolicy
    private let state: Mutex<State>

    private enum Phase { case open, closed, removed }

    private struct State {
        var phase: Phase
        var url: URL
        var queue: DatabaseQueue?
        var storeIdentifier: UUID
        var dataVersion: Int
        var companion: CompanionPresenter?
        var checkedIntegrity: Bool
    }

    /// Opens the store at `url`, creating it when there is no file or an empty one; migrates a
    /// store written with an older schema version. Throws `PersistenceError` naming the file:
    /// `PersistenceError.Code.corruptStore` for a damaged or truncated file,
    /// `PersistenceError.Code.notAStore` for another application's SQLite database,
    /// `PersistenceError.Code.newerSchema` / `PersistenceError.Code.incompatibleSchema`.
    /// A file that fails to open is left exactly as it was.
    public init(url: URL, schema: Schema, options: StoreOptions = StoreOptions()) throws {
        let url = url.standardizedFileURL
        self.schema = schema
        self.options = options
        layout = try StoreLayout(schema: schema, indexSetting: options.settings["indexes"], url: url)
        if let text = options.settings["busyTimeout"] {
            guard let seconds = Double(text), seconds >= 0 else {
                throw PersistenceError(
                    .invalidRequest,
                    "busyTimeout must be a number of seconds, not \(text)",
                    url: url
                )
            }
            busyTimeout = seconds
        } else {
            busyTimeout = 5
        }
        integrityCheck = try IntegrityCheckPolicy(setting: options.settings["integrityCheck"], url: url)
        let opened = try Self.open(
            at: url,
            layout: layout,
            options: options,
            busyTimeout: busyTimeout,
            integrityCheck: integrityCheck
        )
        state = Mutex(
            State(
                phase: .open,
                url: url,
                queue: opened.queue,
                storeIdentifier: opened.storeIdentifier,
                dataVersion: opened.dataVersion,
                companion: nil,
                checkedIntegrity: opened.checkedIntegrity
            )
        )
        if options.presentsFiles {
            let companion = CompanionPresenter(url: URL(fileURLWithPath: url.path + "-wal"), store: self)
            state.withLock { $0.companion = companion }
            FileCoordinator.addFilePresenter(self)
            FileCoordinator.addFilePresenter(companion)
        }
    }

    deinit {
        if let companion = state.withLock({ $0.companion }) { FileCoordinator.removeFilePresenter(companion) }
        try? state.withLock { $0.queue }?.close()
    }

    /// Where the store is now (it follows moves).
    public var url: URL { state.withLock { $0.url } }

    /// The store's metadata as last committed (by anyone).
    public func metadata() throws -> StoreMetadata {
        try read { db, url in try Self.readMetadata(db, url: url) }
    }

    /// The metadata entries with these keys, as last committed, read by key (the rest of the
    /// metadata is not loaded).
    public func metadataEntries(forKeys keys: [String]) throws -> [String: Data] {
        let unique = Array(Set(keys))
        if unique.isEmpty { return [:] }
        return try read { db, url in
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

    /// The records `request` selects, in its order.
    public func fetch(_ request: Persistence.FetchRequest) throws -> [Persistence.Record] {
        _ = try connection()
        try request.validate(in: schema)
        let table = layout.entities[request.entity]!
        let query = SQLTranslation.select(request, table)
        return try read { db, url in
            let statement = try RawStatement(db, sql: query.sql, url: url)
            defer { statement.finish() }
            try statement.bind(query.bindings)
            let decoder = RowDecoder(table)
            var records: [Record] = []
            if let limit = request.fetchLimit { records.reserveCapacity(min(limit, 10_000)) }
            while try statement.step("fetching records") {
                records.append(try statement.record(decoder))
            }
            return records
        }
    }

    /// How many records `request` selects (ignoring its limit and offset).
    public func count(for request: Persistence.FetchRequest) throws -> Int {
        _ = try connection()
        try request.validate(in: schema)
        let query = SQLTranslation.count(request, layout.entities[request.entity]!)
        return try read { db, url in
            let statement = try RawStatement(db, sql: query.sql, url: url)
            defer { statement.finish() }
            try statement.bind(query.bindings)
            guard try statement.step("counting records") else { return 0 }
            return Int(sqlite3_column_int64(statement.pointer, 0))
        }
    }

    /// The records with these ids that the store holds, in no particular order (ids of
    /// entities the schema lacks find nothing).
    public func records(with ids: [ObjectID]) throws -> [Persistence.Record] {
        _ = try connection()
        var byEntity: [String: [UUID]] = [:]
        for id in Set(ids) where layout.entities[id.entity] != nil { byEntity[id.entity, default: []].append(id.uuid) }
        if byEntity.isEmpty { return [] }
        return try read { db, url in
            var records: [Record] = []
            records.reserveCapacity(ids.count)
            for (entity, uuids) in byEntity.sorted(by: { $0.key < $1.key }) {
                let table = layout.entities[entity]!
                let decoder = RowDecoder(table)
                var start = 0
                while start < uuids.count {
                    let chunk = uuids[start..<min(start + 512, uuids.count)]
                    start += chunk.count
                    let sql =
                        "SELECT \(table.selectList) FROM \(table.quotedTable) WHERE id IN (\(PlaceholderList.text(for: chunk.count)))"
                    let statement = try RawStatement(db, sql: sql, url: url)
                    defer { statement.finish() }
                    try statement.bind(PlaceholderList.padded(chunk.map { .uuid($0) }))
                    while try statement.step("fetching records by id") { records.append(try statement.record(decoder)) }
                }
            }
            return records
        }
    }

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
        } catch {
            throw translate(error, url: url, doing: "committing")
        }
    }

    /// Stops presenting the files and closes the database; every later call throws
    /// `PersistenceError.Code.storeClosed`. Closing twice does nothing.
    public func close() {
        tearDown(to: .closed)
    }

    // MARK: - Presenting

    /// The database file while the store is open; `nil` once it is closed or removed.
    public var presentedItemURL: URL? {
        state.withLock { $0.phase == .open ? $0.url : nil }
    }

    /// Another connection changed the database (or its log): reports
    /// `StoreEvent.Kind.changedExternally` if it committed anything.
    public func presentedItemDidChange() {
        checkForExternalChanges()
    }

    /// The database is being (or was) deleted: the store closes and reports
    /// `StoreEvent.Kind.removed`.
    public func accommodatePresentedItemDeletion() throws {
        guard let (_, url) = try? connection() else { return }
        if FileManager.default.fileExists(atPath: url.path) {
            tearDown(to: .removed)  // a coordinated deletion, about to happen
        } else {
            confirmRemoval(of: url)  // after the fact: a deletion, or a move still being reported
        }
    }

    /// The database moved (with its companions): the store reopens it at `newURL` and reports
    /// `StoreEvent.Kind.moved(from:to:)`.
    public func presentedItemDidMove(to newURL: URL) {
        followMove(to: newURL.standardizedFileURL)
    }

    /// Before another writer in this process changes or moves the files: the log is
    /// checkpointed into the database and emptied, so the database file alone is complete.
    public func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        checkpoint()
        writer(nil)
    }

    /// Before another reader in this process reads the database (a copy, say): the log is
    /// checkpointed into it, so the database file alone holds every commit.
    public func savePresentedItemChanges() throws {
        checkpoint()
    }

    /// The value of `PRAGMA name` on the store's own connection (for tests and diagnostics).
    func pragma(_ name: String) throws -> String? {
        try read { db, _ in try String.fetchOne(db, sql: "PRAGMA \(name)") }
    }

    /// Whether the last open ran the integrity check (for tests).
    var checkedIntegrityAtOpen: Bool { state.withLock { $0.checkedIntegrity } }

    // MARK: - Connection state

    /// The open connection, or the error every call gets once the store is closed or removed.
    private func connection() throws(PersistenceError) -> (DatabaseQueue, URL) {
        let (phase, queue, url) = state.withLock { ($0.phase, $0.queue, $0.url) }
        switch phase {
        case .open: return (queue!, url)
        case .closed: throw PersistenceError(.storeClosed, "the store was closed", url: url)
        case .removed: throw PersistenceError(.storeRemoved, "the store's files were deleted", url: url)
        }
    }

    private func read<T>(_ body: (Database, URL) throws -> T) throws -> T {
        let (queue, url) = try connection()
        do {
            return try queue.inDatabase { db in try body(db, url) }
        } catch {
            throw translate(error, url: url, doing: "reading")
        }
    }

    /// `error` as a `PersistenceError`; a store closed or removed meanwhile says so.
    private func translate(_ error: any Error, url: URL, doing what: String) -> PersistenceError {
        do { _ = try connection() } catch { return error }
        switch error {
        case let error as PersistenceError:
            return error
        case let error as DatabaseError:
            return Self.persistenceError(error, url: url, doing: what)
        case let error as FileCoordinationError:
            return PersistenceError(
                .ioFailed,
                "\(what) failed: could not coordinate the write",
                url: url,
                underlying: error
            )
        default:
            return PersistenceError(.ioFailed, "\(what) failed: \(error)", url: url, underlying: error)
        }
    }

    private static func persistenceError(_ error: DatabaseError, url: URL, doing what: String) -> PersistenceError {
        if let failure = writeFailure(error, url: url) {
            return WriteAccess.error(failure, store: url, doing: what, cause: error)
        }
        let code: PersistenceError.Code
        switch error.resultCode {
        case .SQLITE_CORRUPT, .SQLITE_NOTADB: code = .corruptStore
        default: code = .ioFailed
        }
        return PersistenceError(
            code,
            "\(what) failed: \(error.message ?? "\(error.resultCode)")",
            url: url,
            underlying: error
        )
    }

    private func tearDown(to phase: Phase) {
        let (queue, companion, url, identifier, wasOpen) = state.withLock { state in
            let wasOpen = state.phase == .open
            if wasOpen { state.phase = phase }
            defer {
                if wasOpen {
                    state.queue = nil
                    state.companion = nil
                }
            }
            return (state.queue, state.companion, state.url, state.storeIdentifier, wasOpen)
        }
        guard wasOpen else { return }
        if options.presentsFiles { FileCoordinator.removeFilePresenter(self) }
        if let companion { FileCoordinator.removeFilePresenter(companion) }
        try? queue?.close()
        if phase == .removed {
            events.send(StoreEvent(storeType: Self.storeType, storeIdentifier: identifier, url: url, kind: .removed))
        }
    }

    fileprivate func checkForExternalChanges() {
        guard let (queue, url) = try? connection() else { return }
        if !FileManager.default.fileExists(atPath: url.path) {
            confirmRemoval(of: url)
            return
        }
        let identifier = state.withLock { $0.storeIdentifier }
        do {
            let changed = try queue.inDatabase { db -> Bool in
                let version = try Int.fetchOne(db, sql: "PRAGMA data_version") ?? 0
                return state.withLock { state in
                    guard state.phase == .open, state.dataVersion != version else { return false }
                    state.dataVersion = version
                    return true
                }
            }
            if changed {
                events.send(
                    StoreEvent(
                        storeType: Self.storeType,
                        storeIdentifier: identifier,
                        url: url,
                        kind: .changedExternally
                    )
                )
            }
        } catch {
            guard (try? connection()) != nil else { return }
            let failure = translate(error, url: url, doing: "reading the changed store")
            events.send(
                StoreEvent(
                    storeType: Self.storeType,
                    storeIdentifier: identifier,
                    url: url,
                    kind: .reloadFailed(failure.description)
                )
            )
        }
    }

    /// The database is gone from `url`, but another process moving the files (the companions
    /// first, the database last, each a separate rename) looks the same until the move of the
    /// database is reported: the store is torn down only if, a moment later, it has not followed
    /// a move and the file is still missing.
    private func confirmRemoval(of url: URL) {
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(250)) { [weak self] in
            guard let self else { return }
            let unchanged = self.state.withLock { $0.phase == .open && $0.url == url }
            if unchanged && !FileManager.default.fileExists(atPath: url.path) { self.tearDown(to: .removed) }
        }
    }

    private func checkpoint() {
        guard !options.isReadOnly, let (queue, _) = try? connection() else { return }
        _ = try? queue.inDatabase { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
    }

    private func followMove(to newURL: URL) {
        guard let (oldQueue, oldURL) = try? connection(), oldURL != newURL else { return }
        let identifier = state.withLock { $0.storeIdentifier }
        let opened: Opened
        do {
            opened = try Self.open(
                at: newURL,
                layout: layout,
                options: options,
                busyTimeout: busyTimeout,
                integrityCheck: integrityCheck
            )
        } catch {
            // The old connection's descriptors follow the moved files: keep serving through it.
            events.send(
                StoreEvent(
                    storeType: Self.storeType,
                    storeIdentifier: identifier,
                    url: oldURL,
                    kind: .reloadFailed("\(error)")
                )
            )
            return
        }
        let companion =
            options.presentsFiles
            ? CompanionPresenter(url: URL(fileURLWithPath: newURL.path + "-wal"), store: self) : nil
        let (moved, oldCompanion) = state.withLock { state -> (Bool, CompanionPresenter?) in
            guard state.phase == .open, state.queue === oldQueue else { return (false, nil) }
            let old = state.companion
            state.queue = opened.queue
            state.url = newURL
            state.dataVersion = opened.dataVersion
            state.companion = companion
            state.checkedIntegrity = opened.checkedIntegrity
            return (true, old)
        }
        guard moved else {
            try? opened.queue.close()
            return
        }
        if let oldCompanion { FileCoordinator.removeFilePresenter(oldCompanion) }
        if let companion { FileCoordinator.addFilePresenter(companion) }
        try? oldQueue.close()
        events.send(
            StoreEvent(
                storeType: Self.storeType,
                storeIdentifier: identifier,
                url: newURL,
                kind: .moved(from: oldURL, to: newURL)
            )
        )
    }
}

/// Presents the store's `-wal` file, where other connections' commits land first, and passes
/// what it hears on to the store.
final class CompanionPresenter: FilePresenter {
    private let location: Mutex<URL>
    private weak let store: SQLiteStore?

    init(url: URL, store: SQLiteStore) {
        location = Mutex(url)
        self.store = store
    }

    var presentedItemURL: URL? { location.withLock { $0 } }

    func presentedItemDidChange() { store?.checkForExternalChanges() }

    /// The log went away (SQLite deletes it when the last connection closes): only the
    /// database's own deletion removes the store, so just look again.
    func accommodatePresentedItemDeletion() throws { store?.checkForExternalChanges() }

    func presentedItemDidMove(to newURL: URL) { location.withLock { $0 = newURL } }
}

// MARK: - Opening

extension SQLiteStore {
    struct Opened {
        let queue: DatabaseQueue
        let storeIdentifier: UUID
        let dataVersion: Int
        let checkedIntegrity: Bool
    }

    private enum MetadataKey {
        static let identifier = "store.identifier"
        static let schemaVersion = "store.schemaVersion"
        static let schema = "store.schema"
        static let entryPrefix = "entry."
    }

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
    /// `PRAGMA quick_check` when `integrityCheck` asks for it: a file that fails a check is never
    /// opened for writing.
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
        var checked = false
        if let size, size > 0 {
            // With frames left in the log, the header may count pages only the log holds yet (a
            // checkpoint cut short): SQLite reads them from there, and the integrity check judges.
            if !leftover.isUnclean { try checkHeader(url: url, size: size) }
            checked = integrityCheck.checks(leftover)
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
                    validation = try reader.inDatabase { db in
                        try validate(
                            db,
                            url: url,
                            layout: layout,
                            options: options,
                            checkIntegrity: checked,
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
                            checkedIntegrity: checked
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
                var identifier = UUID()
                switch validation {
                case .empty:
                    try db.inTransaction(.immediate) {
                        for statement in layout.createStatements { try db.execute(sql: statement) }
                        try writeStoreRows(db, identifier: identifier, schema: layout.schema)
                        return .commit
                    }
                case .store(let stored, let migration):
                    identifier = stored
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
                    checkedIntegrity: checked
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
    private static func writeFailure(_ error: DatabaseError, url: URL) -> (url: URL, code: POSIXErrorCode)? {
        switch error.resultCode {
        case .SQLITE_CANTOPEN, .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_IOERR, .SQLITE_FULL, .SQLITE_AUTH:
            return WriteAccess.failure(at: url)
        default:
            return nil
        }
    }

    /// Reads what an existing database holds, changing nothing; with `checkIntegrity`, first
    /// runs `PRAGMA quick_check`, so a damaged page is found before anything writes the file.
    private static func validate(
        _ db: Database,
        url: URL,
        layout: StoreLayout,
        options: StoreOptions,
        checkIntegrity: Bool,
        leftover: LeftoverState
    ) throws -> Validation {
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
        if checkIntegrity {
            let result: [String]
            do {
                result = try String.fetchAll(db, sql: "PRAGMA quick_check")
            } catch let error as DatabaseError
                where error.resultCode == .SQLITE_CORRUPT || error.resultCode == .SQLITE_NOTADB
            {
                result = [error.message ?? "\(error.resultCode)"]
            }
            if result != ["ok"] {
                let when =
                    leftover.isUnclean
                    ? " (checked because the last session left \(leftover.logSize) bytes in the -wal: it was not closed cleanly)"
                    : ""
                throw PersistenceError(
                    .corruptStore,
                    "the database is damaged, quick_check\(when): " + result.prefix(5).joined(separator: "; "),
                    url: url
                )
            }
        }
        guard isStore else { return .empty }
        let stored = try readStored(db, url: url)
        let plan = try SchemaMigration(from: stored.schema, to: layout.schema, url: url)
        if plan.isIdentity { return .store(identifier: stored.metadata.storeIdentifier, migration: nil) }
        if options.isReadOnly {
            throw PersistenceError(
                .readOnly,
                "the store has schema version \(stored.schema.version) and needs migrating to \(layout.schema.version), but was opened read-only",
                url: url
            )
        }
        return .store(identifier: stored.metadata.storeIdentifier, migration: plan)
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

    /// The metadata and the schema the store was written with.
    fileprivate static func readStored(_ db: Database, url: URL) throws -> (metadata: StoreMetadata, schema: Schema) {
        var identifier: UUID?
        var schema: Schema?
        var entries: [String: Data] = [:]
        let rows = try Row.fetchAll(db, sql: "SELECT key, value FROM \(StoreLayout.metadataTable)")
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

// MARK: - Committing

extension SQLiteStore {
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
