import FileCoordination
import Foundation
import GRDB
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
/// - `integrityCheck`: which check runs as the store opens, before anything can write the file.
///   `"afterUncleanClose"` (the default): `PRAGMA integrity_check` (every page, and every index
///   against its table, so an index that would answer a query short is found) when the last
///   session did not close the database cleanly (a non-empty `-wal` is left: a crash, or another
///   connection still open), or when the last full check is older than `integrityCheckInterval`
///   (or the store records none); a clean reopen checked recently reads only the header.
///   `"quick"` (or `"always"`): `PRAGMA quick_check` (pages, not indexes) at every open.
///   `"full"`: `integrity_check` at every open. `"never"`: header and SQLite checks only.
/// - `integrityCheckInterval`: seconds a passed full check counts for (default 86,400: one
///   day). A store records when it was created and when a full check passed at a clean open (one
///   made after an unclean close is not recorded: another connection may be open); a store
///   opened read-only cannot record it, so it checks again at each open once the interval is past.
///
/// A check that fails makes the open throw `PersistenceError.Code.corruptStore`, naming the file
/// and the `concord store check` and `concord store salvage` commands to run; nothing writes the
/// file, so every later open checks again and fails the same way.
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

    let options: StoreOptions
    let layout: StoreLayout
    let busyTimeout: Double
    let integrityCheck: IntegrityCheckPolicy
    let state: Mutex<State>

    enum Phase { case open, closed, removed }

    struct State {
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
            busyTimeout = try Self.seconds(text, setting: "busyTimeout", url: url)
        } else {
            busyTimeout = 5
        }
        integrityCheck = try IntegrityCheckPolicy(
            setting: options.settings["integrityCheck"],
            interval: options.settings["integrityCheckInterval"],
            url: url
        )
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

    /// Stops presenting the files and closes the database; every later call throws
    /// `PersistenceError.Code.storeClosed`. Closing twice does nothing.
    public func close() {
        tearDown(to: .closed)
    }

    /// The value of `PRAGMA name` on the store's own connection (for tests and diagnostics).
    func pragma(_ name: String) throws -> String? {
        try read { db, _ in try String.fetchOne(db, sql: "PRAGMA \(name)") }
    }

    /// Whether the last open ran the integrity check (for tests).
    var checkedIntegrityAtOpen: Bool { state.withLock { $0.checkedIntegrity } }

    // MARK: - Connection state

    /// The open connection, or the error every call gets once the store is closed or removed.
    func connection() throws(PersistenceError) -> (DatabaseQueue, URL) {
        let (phase, queue, url) = state.withLock { ($0.phase, $0.queue, $0.url) }
        switch phase {
        case .open: return (queue!, url)
        case .closed: throw PersistenceError(.storeClosed, "the store was closed", url: url)
        case .removed: throw PersistenceError(.storeRemoved, "the store's files were deleted", url: url)
        }
    }

    func read<T>(_ body: (Database, URL) throws -> T) throws -> T {
        let (queue, url) = try connection()
        do {
            return try queue.inDatabase { db in try body(db, url) }
        } catch {
            throw translate(error, url: url, doing: "reading")
        }
    }

    /// `error` as a `PersistenceError`; a store closed or removed meanwhile says so.
    func translate(_ error: any Error, url: URL, doing what: String) -> PersistenceError {
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

    func tearDown(to phase: Phase) {
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
}
