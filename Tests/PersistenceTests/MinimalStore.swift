import FileCoordination
import Foundation
import Persistence
import Synchronization

/// The smallest store that meets the ``PersistentStore`` contract: a template to copy.
///
/// The whole store is one JSON document (`{metadata, schema, records}`). Every commit is one
/// coordinated read-modify-write of the file (``FileCoordinator/updateContentsOfItem(at:_:)``:
/// re-read, apply, atomic replace), so two objects on one file, in one process or two, never
/// write over each other's commits. Reads use the last snapshot while the file is the one it
/// was read from (same inode, size and modification time) and re-read it otherwise. It does not
/// present its files, so it reports no events.
final class MinimalStore: PersistentStore {
    static let storeType = "minimal-json"

    let url: URL
    let schema: Schema
    let events = StoreEventChannel()

    fileprivate struct Snapshot: Codable {
        var metadata: StoreMetadata
        var schema: Schema
        var records: [Record]
    }

    /// What identifies one version of the file: an atomic replace makes a new inode.
    private struct Stamp: Equatable {
        var inode: UInt64
        var size: UInt64
        var modified: Date
    }

    private struct State {
        var snapshot: Snapshot
        var stamp: Stamp?
        var isClosed = false
    }

    private let isReadOnly: Bool
    private let state: Mutex<State>
    private let coordinator = FileCoordinator()

    init(url: URL, schema: Schema, options: StoreOptions) throws {
        self.url = url
        self.schema = schema
        isReadOnly = options.isReadOnly
        let coordinator = self.coordinator
        if FileManager.default.fileExists(atPath: url.path) {
            let (snapshot, stamp, migrated) = try Self.read(url, schema: schema, coordinator: coordinator)
            if migrated && !options.isReadOnly {
                try Self.write(snapshot, to: url, coordinator: coordinator)
            }
            state = Mutex(State(snapshot: snapshot, stamp: migrated ? nil : stamp))
        } else {
            guard !options.isReadOnly else {
                throw PersistenceError(.ioFailed, "there is no store to open read-only", url: url)
            }
            let snapshot = Snapshot(metadata: StoreMetadata(schemaVersion: schema.version), schema: schema, records: [])
            try Self.write(snapshot, to: url, coordinator: coordinator)
            state = Mutex(State(snapshot: snapshot, stamp: nil))
        }
    }

    func metadata() throws -> StoreMetadata { try current().metadata }

    func fetch(_ request: FetchRequest) throws -> [Record] {
        try request.validate(in: schema)
        return request.evaluate(over: try current().records)
    }

    func count(for request: FetchRequest) throws -> Int {
        try request.validate(in: schema)
        return try current().records.lazy.filter(request.matches).count
    }

    func records(with ids: [ObjectID]) throws -> [Record] {
        let wanted = Set(ids)
        return try current().records.filter { wanted.contains($0.id) }
    }

    func commit(_ changes: StoreChanges) throws {
        try state.withLock { state throws(PersistenceError) in
            if state.isClosed { throw PersistenceError(.storeClosed, "the store is closed", url: url) }
        }
        if isReadOnly { throw PersistenceError(.readOnly, "the store was opened read-only", url: url) }
        try changes.validate(in: schema)
        var committed: Snapshot?
        try io("commit") {
            try coordinator.updateContentsOfItem(at: url) { data in
                guard let data else { throw PersistenceError(.storeRemoved, "the store's file is gone", url: url) }
                var snapshot = try Self.decode(data, url: url, schema: schema).snapshot
                snapshot.apply(changes)
                committed = snapshot
                return try Self.encode(snapshot)
            }
        }
        if let committed {
            state.withLock {
                $0.snapshot = committed
                $0.stamp = nil
            }
        }
    }

    func close() {
        state.withLock { $0.isClosed = true }
    }

    /// The snapshot, re-read first if the file is not the one it came from.
    private func current() throws -> Snapshot {
        let (cached, closed) = state.withLock { ($0.stamp, $0.isClosed) }
        if closed { throw PersistenceError(.storeClosed, "the store is closed", url: url) }
        if let stamp = Self.stamp(of: url), stamp == cached {
            return state.withLock { $0.snapshot }
        }
        let (snapshot, stamp, _) = try Self.read(url, schema: schema, coordinator: coordinator)
        state.withLock {
            $0.snapshot = snapshot
            $0.stamp = stamp
        }
        return snapshot
    }

    private static func read(
        _ url: URL,
        schema: Schema,
        coordinator: FileCoordinator
    ) throws -> (Snapshot, Stamp?, migrated: Bool) {
        var result: (Snapshot, Stamp?, Bool)?
        try io("read", url: url) {
            try coordinator.coordinate(readingItemAt: url) { url in
                let stamp = Self.stamp(of: url)
                let data = try Data(contentsOf: url)
                let (snapshot, migrated) = try decode(data, url: url, schema: schema)
                result = (snapshot, stamp, migrated)
            }
        }
        return result!
    }

    /// The file's snapshot, migrated to `schema`.
    private static func decode(_ data: Data, url: URL, schema: Schema) throws -> (snapshot: Snapshot, migrated: Bool) {
        guard (try? JSONSerialization.jsonObject(with: data)) != nil else {
            throw PersistenceError(.corruptStore, "the file is not valid JSON", url: url)
        }
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(
            positiveInfinity: "inf",
            negativeInfinity: "-inf",
            nan: "nan"
        )
        var snapshot: Snapshot
        do {
            snapshot = try decoder.decode(Snapshot.self, from: data)
        } catch {
            throw PersistenceError(
                .notAStore,
                "the file is JSON but not a \(storeType) store",
                url: url,
                underlying: error
            )
        }
        let migration = try SchemaMigration(from: snapshot.schema, to: schema, url: url)
        if migration.isIdentity { return (snapshot, false) }
        snapshot.records = snapshot.records.compactMap(migration.migrate)
        snapshot.schema = schema
        snapshot.metadata.schemaVersion = schema.version
        return (snapshot, true)
    }

    private static func encode(_ snapshot: Snapshot) throws -> Data {
        let encoder = JSONEncoder()
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "inf",
            negativeInfinity: "-inf",
            nan: "nan"
        )
        return try encoder.encode(snapshot)
    }

    private static func write(_ snapshot: Snapshot, to url: URL, coordinator: FileCoordinator) throws {
        try io("write", url: url) { try coordinator.replaceContentsOfItem(at: url, with: encode(snapshot)) }
    }

    private static func stamp(of url: URL) -> Stamp? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: url.path),
            let inode = (attributes[.systemFileNumber] as? NSNumber)?.uint64Value,
            let size = (attributes[.size] as? NSNumber)?.uint64Value,
            let modified = attributes[.modificationDate] as? Date
        else { return nil }
        return Stamp(inode: inode, size: size, modified: modified)
    }

    private func io(_ what: String, _ body: () throws -> Void) throws { try Self.io(what, url: url, body) }

    /// Runs `body`; errors other than ``PersistenceError`` become ``PersistenceError/Code/ioFailed``.
    private static func io(_ what: String, url: URL, _ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.ioFailed, "cannot \(what) the store", url: url, underlying: error)
        }
    }
}

extension MinimalStore.Snapshot {
    /// Applies a validated commit in the documented order: inserts, updates, deletes, metadata.
    fileprivate mutating func apply(_ changes: StoreChanges) {
        var byID = Dictionary(records.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last })
        for record in changes.inserts { byID[record.id] = record }
        for update in changes.updates { byID[update.id] = byID[update.id].map(update.applied) }
        for id in changes.deletes { byID[id] = nil }
        for (key, value) in changes.metadataEntries { metadata.entries[key] = value }
        records = byID.values.sorted { $0.id < $1.id }
    }
}
