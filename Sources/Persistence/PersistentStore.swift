import Foundation
import Synchronization

/// How a store is opened.
public struct StoreOptions: Sendable, Hashable {
    /// Open for reading only: commits throw ``PersistenceError/Code/readOnly`` and nothing on
    /// disk is created or changed.
    public var isReadOnly: Bool
    /// Register the store as a presenter of its files, so that it follows other processes'
    /// changes, deletions and moves (the default). Off for short-lived stores such as the
    /// source of a migration.
    public var presentsFiles: Bool
    /// Plugin-specific settings by name (for example `"format": "xml"` for the plist store).
    public var settings: [String: String]

    /// Options.
    public init(isReadOnly: Bool = false, presentsFiles: Bool = true, settings: [String: String] = [:]) {
        self.isReadOnly = isReadOnly
        self.presentsFiles = presentsFiles
        self.settings = settings
    }
}

/// Something that happened to a store's files, reported by the store.
public struct StoreEvent: Sendable, Hashable, CustomStringConvertible {
    /// What happened.
    public enum Kind: Sendable, Hashable {
        /// Another process (or another store object) changed the store's data; the store has
        /// reloaded, and fetches now return the new contents.
        case changedExternally
        /// The store's files were deleted; the store has been torn down and every call on it
        /// throws ``PersistenceError/Code/storeRemoved``.
        case removed
        /// The store's files were moved; the store follows them to the new place.
        case moved(from: URL, to: URL)
        /// The store's files changed but could not be read back; the store keeps serving what
        /// it last read and names the cause.
        case reloadFailed(String)
        /// A commit's new content is in place and every reader sees it, but the system could
        /// not confirm it durable (the `fsync` of its folder failed; the cause is named): a
        /// power cut may undo it. The save succeeded: saving again would do the work twice.
        case durabilityUnconfirmed(String)
    }

    /// The store's type name.
    public var storeType: String
    /// The store's identity.
    public var storeIdentifier: UUID
    /// The store's location when it happened (the new one for a move).
    public var url: URL
    /// What happened.
    public var kind: Kind

    /// An event.
    public init(storeType: String, storeIdentifier: UUID, url: URL, kind: Kind) {
        self.storeType = storeType
        self.storeIdentifier = storeIdentifier
        self.url = url
        self.kind = kind
    }

    /// `type store at path: kind`.
    public var description: String { "\(storeType) store at \(url.path): \(kind)" }
}

/// Where a store reports its ``StoreEvent``s; its coordinator listens. Thread-safe.
public final class StoreEventChannel: Sendable {
    private let handlers = Mutex<[UInt64: @Sendable (StoreEvent) -> Void]>([:])
    private let counter = Atomic<UInt64>(0)

    /// A channel with no listeners.
    public init() {}

    /// Tells every listener, in the order they were added, on the calling thread.
    public func send(_ event: StoreEvent) {
        let current = handlers.withLock { $0.sorted { $0.key < $1.key }.map(\.value) }
        for handler in current { handler(event) }
    }

    /// Adds a listener; keep the token to remove it.
    public func addListener(_ handler: @escaping @Sendable (StoreEvent) -> Void) -> UInt64 {
        let token = counter.add(1, ordering: .relaxed).newValue
        handlers.withLock { $0[token] = handler }
        return token
    }

    /// Removes a listener.
    public func removeListener(_ token: UInt64) {
        _ = handlers.withLock { $0.removeValue(forKey: token) }
    }
}

/// A place records are kept: the contract every store plugin meets, and that the
/// `StoreConformance` suite checks.
///
/// A store holds the records of one schema. It is thread-safe; every call is synchronous and may
/// block on I/O and on file coordination (never call it from Swift's cooperative thread pool in
/// a loop; hop to a thread of your own).
///
/// - Opening (``init(url:schema:options:)``) creates the store if there is no file, reads it
///   if there is one, migrates it when its schema version is older (adding entities and
///   attributes), and throws ``PersistenceError`` naming the file for anything else: damaged
///   or truncated files (``PersistenceError/Code/corruptStore``), another kind of file
///   (``PersistenceError/Code/notAStore``), a newer or incompatible schema. A file that fails to
///   open is never modified.
/// - ``commit(_:)`` is atomic and durable: after it returns, the changes survive a crash; if it
///   throws, the store is as it was.
/// - Fetches follow ``FetchRequest``'s semantics exactly, whatever the plugin.
/// - A store that presents its files reports other processes' changes, the deletion of its
///   files and their moves through ``events``.
public protocol PersistentStore: AnyObject, Sendable {
    /// The name the store is registered under (`"sqlite"`, `"json"`, ...).
    static var storeType: String { get }

    /// Every file a store at `url` consists of (the main file first), existing or not: what a
    /// move or a removal of the store must carry along.
    static func files(at url: URL) -> [URL]

    /// Opens the store at `url`, creating it if no file exists there.
    init(url: URL, schema: Schema, options: StoreOptions) throws

    /// Where the store is now (it follows moves).
    var url: URL { get }

    /// The schema its records follow.
    var schema: Schema { get }

    /// The store's metadata as last committed.
    func metadata() throws -> StoreMetadata

    /// The metadata entries with these keys, as last committed; keys the store lacks are
    /// absent from the result. A store whose metadata is large (the sync layer keeps an entry
    /// per record) answers without reading all of it; the default reads ``metadata()``.
    func metadataEntries(forKeys keys: [String]) throws -> [String: Data]

    /// Up to `limit` metadata entries whose keys begin with `prefix` and sort after `key`
    /// (`nil`: from the first), in ascending order of their keys (compared as UTF-8 bytes), as
    /// last committed. The sync layer keeps an entry per record; walking them a page at a time
    /// (``enumerateMetadataEntries(withPrefix:batchSize:_:)``) keeps memory proportional to the
    /// page. The default reads ``metadata()``; a plugin whose metadata can grow large answers
    /// from an index.
    func metadataEntries(
        withPrefix prefix: String,
        after key: String?,
        limit: Int
    ) throws -> [(key: String, value: Data)]

    /// The records `request` selects, in its order.
    func fetch(_ request: FetchRequest) throws -> [Record]

    /// How many records `request` selects (ignoring its limit and offset).
    func count(for request: FetchRequest) throws -> Int

    /// The records with these ids that the store holds, in no particular order.
    func records(with ids: [ObjectID]) throws -> [Record]

    /// Applies `changes` atomically and durably.
    func commit(_ changes: StoreChanges) throws

    /// Where the store reports events.
    var events: StoreEventChannel { get }

    /// Stops presenting the files and releases them; every later call throws
    /// ``PersistenceError/Code/storeClosed``. Closing twice does nothing.
    func close()

    /// Brings what the store reads up to date with what other processes have committed to its
    /// files, before the caller reads and then commits under an exclusion of its own (the sync
    /// layer's cross-process lock). A store whose reads always see the latest commit (SQLite)
    /// does nothing; a store that caches its file (the whole-file stores) re-reads it if it
    /// changed. The default does nothing.
    func refresh() throws
}

extension PersistentStore {
    /// The store's type name.
    public var storeType: String { Self.storeType }

    /// Does nothing: reads see the latest commit.
    public func refresh() throws {}

    /// The entries of ``metadata()`` with these keys.
    public func metadataEntries(forKeys keys: [String]) throws -> [String: Data] {
        let entries = try metadata().entries
        var found: [String: Data] = [:]
        for key in keys { if let value = entries[key] { found[key] = value } }
        return found
    }

    /// The entries of ``metadata()`` with the prefix, sorted, after `key`, at most `limit`.
    public func metadataEntries(
        withPrefix prefix: String,
        after key: String?,
        limit: Int
    ) throws -> [(key: String, value: Data)] {
        let matching = try metadata().entries.filter { entry in
            entry.key.hasPrefix(prefix)
                && key.map { after in after.utf8.lexicographicallyPrecedes(entry.key.utf8) } ?? true
        }
        return matching.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }.prefix(max(limit, 0)).map {
            ($0.key, $0.value)
        }
    }

    /// Every metadata entry whose key begins with `prefix`, in key order, handed over
    /// `batchSize` at a time: memory stays proportional to the batch.
    public func enumerateMetadataEntries(
        withPrefix prefix: String,
        batchSize: Int = 1000,
        _ body: ([(key: String, value: Data)]) throws -> Void
    ) throws {
        var last: String?
        while true {
            let batch = try metadataEntries(withPrefix: prefix, after: last, limit: max(batchSize, 1))
            if batch.isEmpty { return }
            try body(batch)
            last = batch.last?.key
            if batch.count < batchSize { return }
        }
    }

    /// Whether any metadata entry's key begins with `prefix`.
    public func hasMetadataEntries(withPrefix prefix: String) throws -> Bool {
        try !metadataEntries(withPrefix: prefix, after: nil, limit: 1).isEmpty
    }

    /// Every record of `entity`, in id order, handed over `batchSize` at a time: memory stays
    /// proportional to the batch, not the store.
    public func enumerateRecords(
        of entity: String,
        batchSize: Int = 1000,
        _ body: ([Record]) throws -> Void
    ) throws {
        var last: ObjectID?
        while true {
            let predicate: RecordPredicate = last.map { .idAfter($0) } ?? .constant(true)
            let batch = try fetch(FetchRequest(entity: entity, predicate: predicate, limit: max(batchSize, 1)))
            if batch.isEmpty { return }
            try body(batch)
            last = batch.last?.id
            if batch.count < batchSize { return }
        }
    }
}

extension PersistentStore {
    /// A store is one file unless its plugin says otherwise.
    public static func files(at url: URL) -> [URL] { [url] }
}
