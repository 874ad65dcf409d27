import ConcordSystem
import Foundation

/// What a store records about itself, committed in the same atomic write as the data it
/// describes.
public struct StoreMetadata: Sendable, Hashable, Codable {
    /// The store's identity: made when the store is created, kept when it is moved, copied
    /// anew by a migration.
    public var storeIdentifier: UUID
    /// The schema version the store's records were written with.
    public var schemaVersion: Int
    /// Named entries for the layers above (the sync layer's per-record clocks and import
    /// cursors, say), committed with the data they describe. Keys are the owner's; Concord's
    /// own start with `concord.`.
    public var entries: [String: Data]

    /// Metadata for a store (with a new identifier, unless one is given).
    public init(storeIdentifier: UUID = makeIdentifier(), schemaVersion: Int, entries: [String: Data] = [:]) {
        self.storeIdentifier = storeIdentifier
        self.schemaVersion = schemaVersion
        self.entries = entries
    }

    /// A new random identifier (a version 4 UUID) from the kernel's random source, for a store,
    /// a record or anything else that must never repeat. Store plugins make their identifiers
    /// with it: Foundation's `UUID()` returns a constant where `/dev/urandom` cannot be opened
    /// (too many open files, a sandbox), and two stores, or two records, would share one.
    ///
    /// Should the kernel give no randomness, the process stops rather than make an identifier
    /// that may repeat; ``makeCheckedIdentifier()`` throws instead.
    public static func makeIdentifier() -> UUID { RandomSource.uuid() }

    /// A new random identifier, as ``makeIdentifier()`` makes it, or an error when the kernel
    /// gives no randomness.
    ///
    /// - Throws: ``PersistenceError`` with code ``PersistenceError/Code/ioFailed``, reason
    ///   ``PersistenceError/Reason/noRandomness`` and the failed `getrandom` call as its
    ///   ``PersistenceError/underlying`` error.
    public static func makeCheckedIdentifier() throws(PersistenceError) -> UUID {
        do {
            return try RandomSource.makeUUID()
        } catch {
            throw PersistenceError(
                .ioFailed,
                "no randomness from the kernel for a new identifier: nothing was saved; an identifier made without it could repeat one in use",
                underlying: error,
                reason: .noRandomness
            )
        }
    }
}

/// The properties one update sets on one record; properties not named keep their value in the
/// store (so two writers who change different properties of one record both keep theirs).
public struct RecordUpdate: Sendable, Hashable, Codable {
    /// The record updated.
    public var id: ObjectID
    /// New attribute values (`.null` clears one).
    public var values: [String: Value]
    /// New to-one targets (`nil` clears one).
    public var toOne: [String: ObjectID?]
    /// New to-many sets, replacing the old ones.
    public var toMany: [String: Set<ObjectID>]
    /// Elements of to-many sets that the app set explicitly (added or removed), by
    /// relationship: each is a write of its membership, present when ``toMany`` holds it and
    /// absent otherwise, even where the store's set already agreed. Stores apply ``toMany`` and
    /// may ignore this; layers that record history (the sync layer's clocks) log these elements
    /// as written by the save, as Core Data marks a set property changed.
    public var writtenMembers: [String: Set<ObjectID>]

    /// An update of `id`.
    public init(
        id: ObjectID,
        values: [String: Value] = [:],
        toOne: [String: ObjectID?] = [:],
        toMany: [String: Set<ObjectID>] = [:],
        writtenMembers: [String: Set<ObjectID>] = [:]
    ) {
        self.id = id
        self.values = values
        self.toOne = toOne
        self.toMany = toMany
        self.writtenMembers = writtenMembers
    }

    private enum CodingKeys: String, CodingKey {
        case id, values, toOne, toMany, writtenMembers
    }

    /// Decodes an update; one encoded before ``writtenMembers`` existed has none.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(ObjectID.self, forKey: .id)
        values = try container.decode([String: Value].self, forKey: .values)
        toOne = try container.decode([String: ObjectID?].self, forKey: .toOne)
        toMany = try container.decode([String: Set<ObjectID>].self, forKey: .toMany)
        writtenMembers = try container.decodeIfPresent([String: Set<ObjectID>].self, forKey: .writtenMembers) ?? [:]
    }

    /// Whether the update sets nothing.
    public var isEmpty: Bool { values.isEmpty && toOne.isEmpty && toMany.isEmpty }

    /// The names of the properties it sets.
    public var keys: Set<String> { Set(values.keys).union(toOne.keys).union(toMany.keys) }

    /// `record` with this update applied.
    public func applied(to record: Record) -> Record {
        var record = record
        for (key, value) in values { record[key] = value }
        for (key, target) in toOne { record.toOne[key] = target }
        for (key, targets) in toMany { record.toMany[key] = targets.isEmpty ? nil : targets }
        return record
    }

    /// The update that turns `old` into `new` (same id), listing only what differs.
    public static func difference(from old: Record, to new: Record) -> RecordUpdate {
        var update = RecordUpdate(id: new.id)
        for key in Set(old.values.keys).union(new.values.keys) where old[key] != new[key] {
            update.values[key] = new[key]
        }
        for key in Set(old.toOne.keys).union(new.toOne.keys) where old.toOne[key] != new.toOne[key] {
            update.toOne[key] = .some(new.toOne[key])
        }
        for key in Set(old.toMany.keys).union(new.toMany.keys) where (old.toMany[key] ?? []) != (new.toMany[key] ?? [])
        {
            update.toMany[key] = new.toMany[key] ?? []
        }
        return update
    }
}

/// One atomic commit to a store: all of it is durable when ``PersistentStore/commit(_:)``
/// returns, or none of it is.
///
/// Applied in this order: ``inserts`` (a record whose id exists replaces it), ``updates`` (an
/// update of a record the store no longer holds is dropped: a deletion wins), ``deletes`` (of
/// ids the store does not hold: nothing), then ``metadataEntries``.
public struct StoreChanges: Sendable, Hashable {
    /// New records.
    public var inserts: [Record]
    /// Property-level updates of existing records.
    public var updates: [RecordUpdate]
    /// Records to delete.
    public var deletes: [ObjectID]
    /// Metadata entries to set (a value) or remove (`nil`).
    public var metadataEntries: [String: Data?]

    /// A commit.
    public init(
        inserts: [Record] = [],
        updates: [RecordUpdate] = [],
        deletes: [ObjectID] = [],
        metadataEntries: [String: Data?] = [:]
    ) {
        self.inserts = inserts
        self.updates = updates
        self.deletes = deletes
        self.metadataEntries = metadataEntries
    }

    /// Whether it changes nothing.
    public var isEmpty: Bool { inserts.isEmpty && updates.isEmpty && deletes.isEmpty && metadataEntries.isEmpty }

    /// Checks every record, update and id against `schema`; the first problem throws.
    public func validate(in schema: Schema) throws(PersistenceError) {
        for record in inserts {
            guard schema.entity(record.id.entity) != nil else {
                throw PersistenceError(
                    .invalidRequest,
                    "cannot insert \(record.id): no entity \(record.id.entity) in schema version \(schema.version)"
                )
            }
            if let wrong = schema.violations(of: record).first(where: {
                $0.rule != .missingRequiredValue && $0.rule != .missingRequiredRelationship
            }) {
                throw PersistenceError(.invalidRequest, "cannot insert \(record.id): \(wrong)")
            }
        }
        for update in updates {
            guard let entity = schema.entity(update.id.entity) else {
                throw PersistenceError(
                    .invalidRequest,
                    "cannot update \(update.id): no entity \(update.id.entity) in schema version \(schema.version)"
                )
            }
            for (key, value) in update.values {
                guard let attribute = entity.attribute(key), value == .null || value.type == attribute.type else {
                    throw PersistenceError(.invalidRequest, "cannot set \(update.id).\(key) to \(value)")
                }
            }
            for key in update.toOne.keys where entity.relationship(key)?.isToMany != false {
                throw PersistenceError(.invalidRequest, "\(update.id.entity) has no to-one relationship \(key)")
            }
            for key in update.toMany.keys where entity.relationship(key)?.isToMany != true {
                throw PersistenceError(.invalidRequest, "\(update.id.entity) has no to-many relationship \(key)")
            }
        }
        for id in deletes where schema.entity(id.entity) == nil {
            throw PersistenceError(
                .invalidRequest,
                "cannot delete \(id): no entity \(id.entity) in schema version \(schema.version)"
            )
        }
    }
}
