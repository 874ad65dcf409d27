import Foundation
import Persistence

// Typed reads and writes of sync's metadata entries: a snapshot of entries read together, the
// store's reads, the changes a commit (or an object context's save) writes.

/// Metadata entries read from the store, read by key.
package struct SyncMetadataSnapshot: Sendable {
    /// The entries as the store returned them.
    package var entries: [String: Data]

    package init(_ entries: [String: Data] = [:]) { self.entries = entries }

    /// The value of `key`'s entry (`nil`: no entry, or one that holds no value).
    package subscript<Value>(_ key: SyncMetadataKey<Value>) -> Value? {
        entries[key.name].flatMap(key.codec.decode)
    }

    /// Whether the snapshot holds an entry for `key`.
    package func contains(_ key: any SyncMetadataNamed) -> Bool { entries[key.name] != nil }

    /// The bytes of `key`'s entry, as stored.
    package func bytes(_ key: any SyncMetadataNamed) -> Data? { entries[key.name] }

    /// Whether the snapshot holds no entry.
    package var isEmpty: Bool { entries.isEmpty }

    /// The entries of the snapshot in `family`.
    package func entries<Value>(in family: SyncMetadataPrefix<Value>) -> [SyncMetadataEntry<Value>] {
        entries.compactMap { name, data in
            family.suffix(of: name).map { SyncMetadataEntry(name: name, suffix: $0, data: data, codec: family.codec) }
        }
    }
}

/// Metadata entries to write: each set to its value's bytes, or removed.
package struct SyncMetadataChanges: Sendable, SyncMetadataWritable {
    /// The entries as a commit takes them (`nil`: removed).
    package var metadataEntries: [String: Data?]

    package init(_ metadataEntries: [String: Data?] = [:]) { self.metadataEntries = metadataEntries }

    /// Whether nothing is written.
    package var isEmpty: Bool { metadataEntries.isEmpty }

    /// Adds `other`'s writes, which win over these.
    package mutating func merge(_ other: SyncMetadataChanges) {
        metadataEntries.merge(other.metadataEntries) { $1 }
    }
}

/// What holds metadata entries to write (``SyncMetadataChanges``, a commit's `StoreChanges`).
package protocol SyncMetadataWritable {
    var metadataEntries: [String: Data?] { get set }
}

extension StoreChanges: SyncMetadataWritable {}

extension SyncMetadataWritable {
    /// Writes `value` into `key`'s entry.
    package mutating func set<Value>(_ key: SyncMetadataKey<Value>, _ value: Value) throws {
        metadataEntries[key.name] = .some(try key.encode(value))
    }

    /// Marks `key`'s entry present.
    package mutating func mark(_ key: SyncMetadataKey<Void>) {
        metadataEntries[key.name] = .some(try? key.encode(()))
    }

    /// Writes `data`, as it is, into `key`'s entry (`nil`: removes it).
    package mutating func setBytes(_ key: any SyncMetadataNamed, _ data: Data?) {
        metadataEntries[key.name] = .some(data)
    }

    /// Removes `key`'s entry.
    package mutating func remove(_ key: any SyncMetadataNamed) {
        metadataEntries[key.name] = .some(nil)
    }

    /// Removes the entry named `name` (one a read of a family found).
    package mutating func remove(named name: String) {
        metadataEntries[name] = .some(nil)
    }

    /// The value these changes write into `key`'s entry: `nil` when they leave it alone,
    /// `.some(nil)` when they remove it (or write bytes that hold no value).
    package func written<Value>(_ key: SyncMetadataKey<Value>) -> Value?? {
        guard let data = metadataEntries[key.name] else { return nil }
        return .some(data.flatMap(key.codec.decode))
    }

    /// Adds `changes`' writes, which win over these.
    package mutating func merge(_ changes: SyncMetadataChanges) {
        metadataEntries.merge(changes.metadataEntries) { $1 }
    }
}

extension StoreChanges {
    /// Changes that write `metadata` and nothing else.
    package init(syncMetadata metadata: SyncMetadataChanges) {
        self.init(metadataEntries: metadata.metadataEntries)
    }
}

extension PersistentStore {
    /// The entries of `keys`, as last committed (read by key: the store's metadata holds an entry
    /// per record).
    package func syncMetadata(_ keys: [any SyncMetadataNamed]) throws -> SyncMetadataSnapshot {
        SyncMetadataSnapshot(try metadataEntries(forKeys: keys.map(\.name)))
    }

    /// The entries of `keys`, as last committed.
    package func syncMetadata<Value>(_ keys: [SyncMetadataKey<Value>]) throws -> SyncMetadataSnapshot {
        SyncMetadataSnapshot(try metadataEntries(forKeys: keys.map(\.name)))
    }

    /// The value of `key`'s entry, as last committed (`nil`: none).
    package func syncMetadataValue<Value>(_ key: SyncMetadataKey<Value>) throws -> Value? {
        try metadataEntries(forKeys: [key.name])[key.name].flatMap(key.codec.decode)
    }

    /// Whether `key` has an entry, as last committed.
    package func hasSyncMetadata(_ key: any SyncMetadataNamed) throws -> Bool {
        try metadataEntries(forKeys: [key.name])[key.name] != nil
    }

    /// Whether any entry of `family` is there, as last committed.
    package func hasSyncMetadata<Value>(in family: SyncMetadataPrefix<Value>) throws -> Bool {
        try hasMetadataEntries(withPrefix: family.prefix)
    }

    /// Up to `limit` entries of `family`, in key order, after the one named `name` (`nil`: from
    /// the first).
    package func syncMetadata<Value>(
        in family: SyncMetadataPrefix<Value>,
        after name: String? = nil,
        limit: Int
    ) throws -> [SyncMetadataEntry<Value>] {
        try metadataEntries(withPrefix: family.prefix, after: name, limit: limit).map {
            SyncMetadataEntry(
                name: $0.key,
                suffix: $0.key.dropFirst(family.prefix.count),
                data: $0.value,
                codec: family.codec
            )
        }
    }

    /// Every entry of `family`, in key order, handed over `batchSize` at a time.
    package func enumerateSyncMetadata<Value>(
        in family: SyncMetadataPrefix<Value>,
        batchSize: Int = 1000,
        _ body: ([SyncMetadataEntry<Value>]) throws -> Void
    ) throws {
        let count = family.prefix.count
        try enumerateMetadataEntries(withPrefix: family.prefix, batchSize: batchSize) { batch in
            try body(
                batch.map {
                    SyncMetadataEntry(
                        name: $0.key,
                        suffix: $0.key.dropFirst(count),
                        data: $0.value,
                        codec: family.codec
                    )
                }
            )
        }
    }
}

extension ObjectContext {
    /// Writes `value` into `key`'s entry of `store` with the context's next save.
    package func setSyncMetadata<Value>(
        _ key: SyncMetadataKey<Value>,
        _ value: Value,
        in store: any PersistentStore
    )
        throws
    {
        setMetadata(try key.encode(value), forKey: key.name, in: store)
    }

    /// Writes `data`, as it is, into `key`'s entry of `store` (`nil`: removes it) with the
    /// context's next save.
    package func setSyncMetadataBytes(_ key: any SyncMetadataNamed, _ data: Data?, in store: any PersistentStore) {
        setMetadata(data, forKey: key.name, in: store)
    }

    /// Removes `key`'s entry of `store` with the context's next save.
    package func removeSyncMetadata(_ key: any SyncMetadataNamed, in store: any PersistentStore) {
        setMetadata(nil, forKey: key.name, in: store)
    }

    /// The entries of `family` this context writes into `store` with its next save (`nil`:
    /// removed).
    package func unsavedSyncMetadata<Value>(
        in family: SyncMetadataPrefix<Value>,
        in store: any PersistentStore
    )
        -> [String: Data?]
    {
        unsavedMetadata(withPrefix: family.prefix, in: store)
    }
}
