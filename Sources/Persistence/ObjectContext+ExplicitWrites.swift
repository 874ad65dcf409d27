import Foundation

/// What a save writes of one updated record beyond what differs from the store's version: the
/// attributes and to-one relationships the app set, and the to-many elements it added or
/// removed, by relationship.
struct WrittenProperties: Sendable, Hashable {
    /// Attributes and to-one relationships set explicitly.
    var keys: Set<String> = []
    /// To-many elements set explicitly (present or absent), by relationship.
    var members: [String: Set<ObjectID>] = [:]

    var isEmpty: Bool { keys.isEmpty && members.values.allSatisfy(\.isEmpty) }
}

// Explicit writes: a property the app sets is written by the save even when the value equals the
// one the store holds, as Core Data marks a set property changed. Layers that keep history (the
// sync layer's per-property clocks) then count it as this save's write, so the device the user
// used last wins over an older concurrent write, even when this device's store was stale.
extension ObjectContext {
    /// Sets attribute `key` of the record with `id` to `value`. The save writes it even when the
    /// store already holds that value, as Core Data's `setValue(_:forKey:)` marks a property
    /// changed: with sync, it is this save's write and wins over older writes from other devices.
    ///
    /// - Throws: ``PersistenceError`` with ``PersistenceError/Code/invalidRequest`` when the
    ///   record does not exist or its entity has no attribute `key`.
    public func setValue(_ value: Value, forKey key: String, of id: ObjectID) throws {
        var record = try recordForWriting(id, key: key, kind: "attribute") { $0.attribute(key) != nil }
        record[key] = value
        try update(record, writing: [key])
    }

    /// Sets to-one relationship `key` of the record with `id` to `target` (`nil` clears it). The
    /// save writes it even when the store already points there, and with it the inverse side of
    /// the target (see ``setValue(_:forKey:of:)``).
    ///
    /// - Throws: ``PersistenceError`` with ``PersistenceError/Code/invalidRequest`` when the
    ///   record does not exist or its entity has no to-one relationship `key`.
    public func setTarget(_ target: ObjectID?, forKey key: String, of id: ObjectID) throws {
        var record = try recordForWriting(id, key: key, kind: "to-one relationship") {
            $0.relationship(key)?.isToMany == false
        }
        record.toOne[key] = target
        try update(record, writing: [key])
    }

    /// Adds `targets` to to-many relationship `key` of the record with `id`. Each is written by
    /// the save even when the store's set already holds it (see ``setValue(_:forKey:of:)``); the
    /// set's other elements are not written, so changes other devices make to them stay.
    ///
    /// - Throws: ``PersistenceError`` with ``PersistenceError/Code/invalidRequest`` when the
    ///   record does not exist or its entity has no to-many relationship `key`.
    public func addTargets(_ targets: Set<ObjectID>, forKey key: String, of id: ObjectID) throws {
        try changeTargets(targets, forKey: key, of: id, adding: true)
    }

    /// Removes `targets` from to-many relationship `key` of the record with `id`. Each removal is
    /// written by the save even when the store's set already lacks it (see
    /// ``addTargets(_:forKey:of:)``).
    ///
    /// - Throws: ``PersistenceError`` with ``PersistenceError/Code/invalidRequest`` when the
    ///   record does not exist or its entity has no to-many relationship `key`.
    public func removeTargets(_ targets: Set<ObjectID>, forKey key: String, of id: ObjectID) throws {
        try changeTargets(targets, forKey: key, of: id, adding: false)
    }

    /// Replaces the record with `record.id` by `record`, as ``update(_:)-(Record)`` does, and
    /// counts the properties named in `keys` as written by the save even where they equal the
    /// store's version. The properties not named are committed only where they differ, so an app
    /// that saves a whole form keeps per-property merging for the fields the user did not touch.
    /// For a to-many relationship named in `keys`, every element of the record's set counts as
    /// written (``addTargets(_:forKey:of:)`` writes single elements).
    ///
    /// - Throws: ``PersistenceError`` with ``PersistenceError/Code/invalidRequest`` when the
    ///   record does not exist or a key names no property of its entity.
    public func update(_ record: Record, writing keys: Set<String>) throws {
        guard let entity = schema.entity(record.id.entity) else {
            throw PersistenceError(
                .invalidRequest,
                "no entity \(record.id.entity) in schema version \(schema.version)"
            )
        }
        for key in keys.sorted() where entity.attribute(key) == nil && entity.relationship(key) == nil {
            throw PersistenceError(
                .invalidRequest,
                "cannot write \(record.id).\(key): \(entity.name) has no such property"
            )
        }
        let before = try current(record.id)
        try update(record)
        var writes = WrittenProperties()
        for key in keys {
            if entity.relationship(key)?.isToMany == true {
                let was = before?.toMany[key] ?? []
                let now = record.toMany[key] ?? []
                writes.members[key] = now.union(was.subtracting(now))
            } else {
                writes.keys.insert(key)
            }
        }
        try markWritten(record.id, writes)
    }

    /// Replaces the stored version of `object` with this one and counts the properties named in
    /// `keys` as written by the save (see ``update(_:writing:)-(Record,_)``).
    public func update<T: Entity>(_ object: T, writing keys: Set<String>) throws {
        try update(object.record(in: coordinator.schema), writing: keys)
    }

    // MARK: Internals

    private func recordForWriting(
        _ id: ObjectID,
        key: String,
        kind: String,
        _ has: (EntityDescription) -> Bool
    ) throws -> Record {
        guard let entity = schema.entity(id.entity), has(entity) else {
            throw PersistenceError(.invalidRequest, "cannot write \(id).\(key): \(id.entity) has no \(kind) \(key)")
        }
        guard let record = try current(id) else {
            throw PersistenceError(
                .invalidRequest,
                "cannot write \(id).\(key): no such record (deleted, or never saved)"
            )
        }
        return record
    }

    private func changeTargets(_ targets: Set<ObjectID>, forKey key: String, of id: ObjectID, adding: Bool) throws {
        var record = try recordForWriting(id, key: key, kind: "to-many relationship") {
            $0.relationship(key)?.isToMany == true
        }
        var set = record.toMany[key] ?? []
        if adding { set.formUnion(targets) } else { set.subtract(targets) }
        record.toMany[key] = set.isEmpty ? nil : set
        try update(record)
        try markWritten(id, WrittenProperties(members: [key: targets]))
    }

    /// Records `writes` for `id` (an updated record; a pending insert is written whole anyway),
    /// and the inverse sides they imply on the records at the other end.
    private func markWritten(_ id: ObjectID, _ writes: WrittenProperties) throws {
        guard !writes.isEmpty, let entity = schema.entity(id.entity) else { return }
        try addWritten(id, writes)
        guard let record = try current(id) else { return }
        func inverse(of key: String) -> RelationshipDescription? {
            entity.relationship(key).flatMap { schema.entity($0.destination)?.relationship($0.inverse) }
        }
        // A to-one write: the target's inverse side names this record.
        for key in writes.keys {
            guard let inverse = inverse(of: key), let target = record.toOne[key] else { continue }
            try writeInverse(inverse, of: target, naming: id, present: true)
        }
        // A to-many element: its inverse side names this record, or no longer does.
        for (key, elements) in writes.members {
            guard let inverse = inverse(of: key) else { continue }
            for target in elements.sorted() {
                try writeInverse(inverse, of: target, naming: id, present: record.toMany[key]?.contains(target) == true)
            }
        }
    }

    private func writeInverse(
        _ inverse: RelationshipDescription,
        of target: ObjectID,
        naming id: ObjectID,
        present: Bool
    ) throws {
        guard inserted[target] == nil, let record = try current(target) else { return }
        // (A to-one side that points elsewhere is another write's, not this one's.)
        guard inverse.isToMany || record.toOne[inverse.name] == (present ? id : nil) else { return }
        // Held as updated, unchanged, so the save can write it.
        if updated[target] == nil {
            guard let base = try snapshots[target] ?? storeRecord(target) else { return }
            updated[target] = (base, record)
        }
        try addWritten(
            target,
            inverse.isToMany
                ? WrittenProperties(members: [inverse.name: [id]]) : WrittenProperties(keys: [inverse.name])
        )
    }

    private func addWritten(_ id: ObjectID, _ writes: WrittenProperties) throws {
        guard updated[id] != nil else { return }
        written[id, default: WrittenProperties()].keys.formUnion(writes.keys)
        for (key, elements) in writes.members where !elements.isEmpty {
            written[id, default: WrittenProperties()].members[key, default: []].formUnion(elements)
        }
    }

    /// `update` with the writes of `written` added: each written attribute and to-one
    /// relationship with the current value, each written to-many relationship with the current
    /// set and its written elements.
    static func adding(
        _ written: WrittenProperties?,
        except excluded: Set<String> = [],
        of current: Record,
        to update: RecordUpdate,
        schema: Schema
    ) -> RecordUpdate {
        guard let written, let entity = schema.entity(current.id.entity) else { return update }
        var update = update
        for key in written.keys where !excluded.contains(key) {
            if entity.attribute(key) != nil {
                update.values[key] = current[key]
            } else if entity.relationship(key)?.isToMany == false {
                update.toOne[key] = .some(current.toOne[key])
            }
        }
        for (key, elements) in written.members where !elements.isEmpty && !excluded.contains(key) {
            update.toMany[key] = update.toMany[key] ?? current.toMany[key] ?? []
            update.writtenMembers[key, default: []].formUnion(elements)
        }
        return update
    }
}
