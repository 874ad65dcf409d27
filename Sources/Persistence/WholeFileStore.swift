import ConcordSystem
import FileCoordination
import Foundation
import Synchronization

/// Everything a whole-file store keeps: what its file encodes.
public struct StoreSnapshot: Sendable, Hashable {
    /// The store's metadata.
    public var metadata: StoreMetadata
    /// The schema the records were written with.
    public var schema: Schema
    /// The records, by id.
    public var records: [ObjectID: Record]

    /// A snapshot.
    public init(metadata: StoreMetadata, schema: Schema, records: [ObjectID: Record] = [:]) {
        self.metadata = metadata
        self.schema = schema
        self.records = records
    }

    /// The records in id order (for deterministic files).
    public var sortedRecords: [Record] { records.values.sorted { $0.id < $1.id } }
}

extension StoreSnapshot: Codable {
    private enum CodingKeys: String, CodingKey { case metadata, schema, records }

    /// Encodes the metadata, the schema and the records in id order.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(metadata, forKey: .metadata)
        try container.encode(schema, forKey: .schema)
        try container.encode(sortedRecords, forKey: .records)
    }

    /// Decodes a snapshot; the schema is checked as it is decoded.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        metadata = try container.decode(StoreMetadata.self, forKey: .metadata)
        schema = try container.decode(Schema.self, forKey: .schema)
        let list = try container.decode([Record].self, forKey: .records)
        records = Dictionary(list.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
    }
}

/// The file format of a whole-file store: its type name, and how a ``StoreSnapshot`` becomes
/// the file's bytes and back. ``WholeFileStore`` does everything else.
///
/// A format is usually a caseless enum: `enum CSVFormat: StoreFileFormat { … }`, opened as
/// `WholeFileStore<CSVFormat>` (give it a name with a `typealias`). Leaving out a requirement is
/// a compile-time error.
public protocol StoreFileFormat: Sendable {
    /// The name the store is registered under (``PersistentStore/storeType``).
    static var storeType: String { get }

    /// The file's bytes for `snapshot`. Equal snapshots should give equal bytes.
    static func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data

    /// The snapshot `data` holds. Never trusts the file: anything it cannot read throws
    /// ``PersistenceError`` (``PersistenceError/Code/corruptStore`` or
    /// ``PersistenceError/Code/notAStore``) naming `url`, never a crash.
    static func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot
}

/// A store kept as one file that is read whole and replaced whole (the plist and JSON plugins):
/// `Format` supplies the type name and the file format, this class everything else.
///
/// What it promises, beyond ``PersistentStore``:
/// - Every commit re-reads the file first if anyone else replaced it since it was read (inside
///   the same coordinated write), so two processes committing to one store never lose each
///   other's changes; the new file is written by coordinated atomic replace (temporary file,
///   `fsync`, `rename`, directory `fsync`).
/// - It presents its file: another process's replace reloads it (``StoreEvent/Kind/changedExternally``),
///   a deletion tears it down (``StoreEvent/Kind/removed``), a move is followed
///   (``StoreEvent/Kind/moved(from:to:)``). A file that changes into something unreadable leaves
///   the last good contents in place and reports ``StoreEvent/Kind/reloadFailed(_:)``.
/// - A zero-length, truncated or foreign file fails to open with ``PersistenceError`` naming
///   it, and is never written.
public final class WholeFileStore<Format: StoreFileFormat>: PersistentStore, FilePresenter, @unchecked Sendable {
    /// The format's type name.
    public static var storeType: String { Format.storeType }

    /// `snapshot` in the format's bytes (``StoreFileFormat/encode(_:options:)``).
    public static func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data {
        try Format.encode(snapshot, options: options)
    }

    /// The snapshot in `data` (``StoreFileFormat/decode(_:url:options:)``).
    public static func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot {
        try Format.decode(data, url: url, options: options)
    }

    /// What tells one version of the file from another. The content's digest is part of it: an
    /// inode number is reused as soon as a replace frees it, and modification times are only as
    /// fine as the kernel's clock tick, so two quick commits of equal size can share the rest.
    private struct FileStamp: Equatable {
        var inode: UInt64
        var size: UInt64
        var modified: Date
        var digest: UInt64

        /// The stamp of the file at `url` (read whole, unless `data` is what it holds).
        static func of(_ url: URL, data: Data? = nil) -> FileStamp? {
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: url.path),
                let data = data ?? (try? Data(contentsOf: url))
            else { return nil }
            return FileStamp(
                inode: (attributes[.systemFileNumber] as? NSNumber)?.uint64Value ?? 0,
                size: (attributes[.size] as? NSNumber)?.uint64Value ?? 0,
                modified: attributes[.modificationDate] as? Date ?? .distantPast,
                digest: digest(data)
            )
        }

        /// FNV-1a over the bytes.
        static func digest(_ data: Data) -> UInt64 {
            data.withUnsafeBytes { buffer in
                var hash: UInt64 = 0xcbf2_9ce4_8422_2325
                for byte in buffer {
                    hash ^= UInt64(byte)
                    hash = hash &* 0x0000_0100_0000_01b3
                }
                return hash
            }
        }
    }

    private enum Phase: Equatable { case open, closed, removed }

    private struct State {
        var url: URL
        var snapshot: StoreSnapshot
        var stamp: FileStamp?
        var phase: Phase = .open
    }

    /// The schema its records follow.
    public let schema: Schema
    /// How it was opened.
    public let options: StoreOptions
    /// Where it reports events.
    public let events = StoreEventChannel()
    private let state: Mutex<State>
    /// Where reloads run, one at a time and in order (see ``presentedItemDidChange()``).
    private let reloads = DispatchQueue(label: "concord.store.reload")
    /// For tests: runs after a reload read the file, before it installs what it read.
    let reloadWillInstall = Mutex<(@Sendable () -> Void)?>(nil)

    /// Opens the store at `url`, creating the file if there is none (unless read-only).
    public init(url: URL, schema: Schema, options: StoreOptions) throws {
        self.schema = schema
        self.options = options
        let url = url.standardizedFileURL
        let coordinator = FileCoordinator()
        var snapshot: StoreSnapshot
        var stamp: FileStamp?
        if FileManager.default.fileExists(atPath: url.path) {
            let (data, readStamp) = try Self.read(url, coordinator: coordinator)
            stamp = readStamp
            let stored = try Self.decode(data, url: url, options: options)
            let migration = try SchemaMigration(from: stored.schema, to: schema, url: url)
            snapshot = stored
            if !migration.isIdentity {
                snapshot = StoreSnapshot(
                    metadata: stored.metadata,
                    schema: schema,
                    records: stored.records.compactMapValues(migration.migrate)
                )
                snapshot.metadata.schemaVersion = schema.version
                if !options.isReadOnly {
                    stamp = try Self.write(snapshot, to: url, options: options, coordinator: coordinator).0
                }
            }
        } else {
            guard !options.isReadOnly else {
                throw PersistenceError(.ioFailed, "there is no store to open read-only", url: url)
            }
            snapshot = StoreSnapshot(metadata: StoreMetadata(schemaVersion: schema.version), schema: schema)
            stamp = try Self.write(snapshot, to: url, options: options, coordinator: coordinator).0
        }
        state = Mutex(State(url: url, snapshot: snapshot, stamp: stamp))
        if !options.isReadOnly { Self.removeStaleTemporaries(of: url) }
        if options.presentsFiles { FileCoordinator.addFilePresenter(self) }
    }

    /// How old one of the store file's temporaries must be to be taken for a write that a crash
    /// or a kill interrupted: a minute (a write in progress renames its temporary within moments).
    static var staleTemporaryAge: Double { 60 }

    /// Removes the temporaries of the file at `url` that interrupted writes left beside it
    /// (`.NAME.RANDOM.concord-tmp`, not modified for ``staleTemporaryAge``).
    @discardableResult
    static func removeStaleTemporaries(of url: URL) -> [String] {
        AtomicFile.removeStaleTemporaries(
            in: url.deletingLastPathComponent().path,
            prefix: "." + url.lastPathComponent + ".",
            olderThan: staleTemporaryAge,
            now: Date().timeIntervalSince1970
        )
    }

    deinit {
        if options.presentsFiles { FileCoordinator.removeFilePresenter(self) }
    }

    /// Where the store is now.
    public var url: URL { state.withLock { $0.url } }

    /// The metadata as last read or committed.
    public func metadata() throws -> StoreMetadata {
        try withOpenState { $0.snapshot.metadata }
    }

    /// The records `request` selects, in its order.
    public func fetch(_ request: FetchRequest) throws -> [Record] {
        try request.validate(in: schema)
        let records = try withOpenState { state in
            state.snapshot.records.values.filter { $0.id.entity == request.entity }
        }
        return request.evaluate(over: records)
    }

    /// How many records `request` selects, ignoring its limit and offset.
    public func count(for request: FetchRequest) throws -> Int {
        try request.validate(in: schema)
        return try withOpenState { state in state.snapshot.records.values.count(where: request.matches) }
    }

    /// The records with these ids that the store holds.
    public func records(with ids: [ObjectID]) throws -> [Record] {
        try withOpenState { state in ids.compactMap { state.snapshot.records[$0] } }
    }

    /// Applies `changes` on top of the file as it is now (re-read first if another writer
    /// replaced it), and replaces the file atomically and durably.
    public func commit(_ changes: StoreChanges) throws {
        try changes.validate(in: schema)
        guard !options.isReadOnly else {
            throw PersistenceError(.readOnly, "the store was opened read-only", url: url)
        }
        let url = try withOpenState { $0.url }
        if changes.isEmpty { return }
        let coordinator = FileCoordinator(filePresenter: self)
        do {
            try coordinator.coordinate(writingItemAt: url, options: []) { url in
                // Someone else may have replaced the file since we read it: start from theirs.
                var (snapshot, stamp) = state.withLock { ($0.snapshot, $0.stamp) }
                let onDisk = try? Data(contentsOf: url)
                if let data = onDisk, let current = FileStamp.of(url, data: data), current != stamp {
                    let stored = try Self.decode(data, url: url, options: options)
                    let migration = try SchemaMigration(from: stored.schema, to: schema, url: url)
                    snapshot = StoreSnapshot(
                        metadata: stored.metadata,
                        schema: schema,
                        records: stored.records.compactMapValues(migration.migrate)
                    )
                    snapshot.metadata.schemaVersion = schema.version
                } else if onDisk == nil {
                    throw PersistenceError(.storeRemoved, "the store's file was deleted", url: url)
                }
                Self.apply(changes, to: &snapshot)
                let unconfirmed: SystemCallError?
                (stamp, unconfirmed) = try Self.write(snapshot, to: url, options: options, coordinator: coordinator)
                state.withLock { state in
                    state.snapshot = snapshot
                    state.stamp = stamp
                }
                if let unconfirmed {
                    events.send(
                        StoreEvent(
                            storeType: Self.storeType,
                            storeIdentifier: identifier,
                            url: url,
                            kind: .durabilityUnconfirmed("\(unconfirmed)")
                        )
                    )
                }
            }
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.ioFailed, "cannot write the store", url: url, underlying: error)
        }
    }

    /// Re-reads the file if another process replaced it since it was read.
    public func refresh() throws {
        _ = try withOpenState { _ in }
        // A reload begun on the presenter queue may install what it read in between: look again
        // until the snapshot is what the file holds (a few times at most: with writers held off,
        // as under a sync lock, it settles at once).
        for _ in 0..<5 {
            guard let (url, stamp) = state.withLock({ $0.phase == .open ? ($0.url, $0.stamp) : nil }),
                let current = FileStamp.of(url), current != stamp
            else { return }
            reloadIfChanged()
        }
    }

    /// Stops presenting the file; every later call throws ``PersistenceError/Code/storeClosed``.
    public func close() {
        let wasOpen = state.withLock { state in
            defer { if state.phase == .open { state.phase = .closed } }
            return state.phase == .open
        }
        if wasOpen, options.presentsFiles { FileCoordinator.removeFilePresenter(self) }
    }

    // MARK: FilePresenter

    /// The store's file, while it is open.
    public var presentedItemURL: URL? { state.withLock { $0.phase == .open ? $0.url : nil } }

    /// Someone changed the file: the store reloads it (and reports
    /// ``StoreEvent/Kind/changedExternally``) on a serial queue of its own, not in this callback.
    /// The reload reads under coordination, which asks the file's other presenters to relinquish
    /// it; run inside the callback, two stores of one file that heard the same change each waited
    /// for the other's presenter queue, forever.
    public func presentedItemDidChange() {
        reloads.async { [weak self] in self?.reloadIfChanged() }
    }

    /// The file moved: the store follows it and reports ``StoreEvent/Kind/moved(from:to:)``.
    public func presentedItemDidMove(to newURL: URL) {
        let old = state.withLock { state -> URL? in
            guard state.phase == .open else { return nil }
            defer { state.url = newURL.standardizedFileURL }
            return state.url
        }
        guard let old, old != newURL.standardizedFileURL else { return }
        events.send(
            StoreEvent(
                storeType: Self.storeType,
                storeIdentifier: identifier,
                url: newURL,
                kind: .moved(from: old, to: newURL)
            )
        )
    }

    /// The file is being deleted: the store tears down and reports ``StoreEvent/Kind/removed``.
    public func accommodatePresentedItemDeletion() throws {
        tearDown()
    }

    // MARK: Internals

    private var identifier: UUID { state.withLock { $0.snapshot.metadata.storeIdentifier } }

    private func tearDown() {
        let url = state.withLock { state -> URL? in
            guard state.phase == .open else { return nil }
            state.phase = .removed
            state.snapshot.records = [:]
            return state.url
        }
        guard let url else { return }
        if options.presentsFiles { FileCoordinator.removeFilePresenter(self) }
        events.send(StoreEvent(storeType: Self.storeType, storeIdentifier: identifier, url: url, kind: .removed))
    }

    /// Reads the file again if it changed since the snapshot was read (what a presenter's
    /// change message does; tests call it directly).
    func reloadIfChanged() {
        guard let (url, stamp) = state.withLock({ $0.phase == .open ? ($0.url, $0.stamp) : nil }) else { return }
        // A missing file is not a deletion: the file may be in the middle of a move, whose
        // message follows; a deletion arrives as accommodatePresentedItemDeletion().
        guard let current = FileStamp.of(url), current != stamp else { return }
        do {
            let (data, readStamp) = try Self.read(url, coordinator: FileCoordinator(filePresenter: self))
            reloadWillInstall.withLock { $0 }?()
            let stored = try Self.decode(data, url: url, options: options)
            let migration = try SchemaMigration(from: stored.schema, to: schema, url: url)
            var snapshot = StoreSnapshot(
                metadata: stored.metadata,
                schema: schema,
                records: stored.records.compactMapValues(migration.migrate)
            )
            snapshot.metadata.schemaVersion = schema.version
            let changed = state.withLock { state -> Bool in
                // Installed only over what was there when the reload began: a commit of this
                // process (or another reload) that ended meanwhile left something at least as
                // new as what this read, and installing this would take the store back in time.
                guard state.phase == .open, state.stamp == stamp, readStamp != stamp else { return false }
                state.snapshot = snapshot
                state.stamp = readStamp
                return true
            }
            if changed {
                events.send(
                    StoreEvent(
                        storeType: Self.storeType,
                        storeIdentifier: snapshot.metadata.storeIdentifier,
                        url: url,
                        kind: .changedExternally
                    )
                )
            }
        } catch {
            if FileStamp.of(url) != nil {
                events.send(
                    StoreEvent(
                        storeType: Self.storeType,
                        storeIdentifier: identifier,
                        url: url,
                        kind: .reloadFailed("\(error)")
                    )
                )
            }
        }
    }

    private func withOpenState<T>(_ body: (inout State) throws -> T) throws -> T {
        try state.withLock { state in
            switch state.phase {
            case .open: return try body(&state)
            case .closed: throw PersistenceError(.storeClosed, "the store was closed", url: state.url)
            case .removed: throw PersistenceError(.storeRemoved, "the store's file was deleted", url: state.url)
            }
        }
    }

    private static func read(_ url: URL, coordinator: FileCoordinator) throws -> (Data, FileStamp?) {
        do {
            return try coordinator.coordinate(readingItemAt: url, options: []) { url in
                let data = try Data(contentsOf: url)
                return (data, FileStamp.of(url, data: data))
            }
        } catch {
            throw PersistenceError(.ioFailed, "cannot read the store", url: url, underlying: error)
        }
    }

    private static func write(
        _ snapshot: StoreSnapshot,
        to url: URL,
        options: StoreOptions,
        coordinator: FileCoordinator
    ) throws -> (FileStamp?, unconfirmed: SystemCallError?) {
        let data = try encode(snapshot, options: options)
        var unconfirmed: SystemCallError?
        do {
            try coordinator.replaceContentsOfItem(at: url, with: data)
        } catch let error as SystemCallError where error.contentReplaced {
            // In place, not confirmed durable: the commit stands (reporting it failed would
            // invite a retry that commits it twice), and the event says what is unconfirmed.
            unconfirmed = error
        } catch {
            throw PersistenceError(.ioFailed, "cannot write the store", url: url, underlying: error)
        }
        return (FileStamp.of(url, data: data), unconfirmed)
    }

    private static func apply(_ changes: StoreChanges, to snapshot: inout StoreSnapshot) {
        for record in changes.inserts { snapshot.records[record.id] = record }
        for update in changes.updates {
            if let record = snapshot.records[update.id] { snapshot.records[update.id] = update.applied(to: record) }
        }
        for id in changes.deletes { snapshot.records[id] = nil }
        for (key, value) in changes.metadataEntries { snapshot.metadata.entries[key] = value }
    }
}

/// What the migration between store types needs to know of a whole-file store whatever its
/// format: every commit rewrites the whole file, so records are best committed in one go.
protocol WholeFileCommitting {}

extension WholeFileStore: WholeFileCommitting {}

/// A whole-file store of any format, as a type: what a tool that handles every whole-file store
/// (a checker, a salvager) needs without knowing the format.
public protocol AnyWholeFileStore: PersistentStore {
    /// The snapshot a file of this store type holds; throws a ``PersistenceError`` naming `url`
    /// for anything else.
    static func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot
    /// The file's bytes for `snapshot`.
    static func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data
}

extension WholeFileStore: AnyWholeFileStore {}
