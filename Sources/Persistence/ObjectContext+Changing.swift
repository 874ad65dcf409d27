import Foundation

// Changing records: inserts, updates, deletes (delete rules, inverses), metadata, rollback, prefetch.
extension ObjectContext {
    /// Inserts a new record of `entity` with its defaults, then `values`, then runs the entity's
    /// `didInsert` hook. Relationships are set afterwards with ``update(_:)-(Record)``.
    ///
    /// Without `id`, the record gets a new random id; when the kernel gives no randomness this
    /// throws ``PersistenceError/Code/ioFailed`` with reason ``PersistenceError/Reason/noRandomness``.
    @discardableResult
    public func insert(entity: String, id: ObjectID? = nil, values: [String: Value] = [:]) throws -> Record {
        guard let description = schema.entity(entity) else {
            throw PersistenceError(.invalidRequest, "no entity \(entity) in schema version \(schema.version)")
        }
        var record = Record.new(description, id: try id ?? .checkedRandom(entity: entity))
        for (key, value) in values { record[key] = value }
        return try insert(record)
    }

    /// Inserts `record` as it is (relationships included, inverses kept consistent), then runs
    /// the entity's `didInsert` hook.
    ///
    /// In a local context an insert never replaces a record: an id this context or its store
    /// already holds throws ``PersistenceError/Code/invalidRequest`` with reason
    /// ``PersistenceError/Reason/duplicateID``, and so does the save when another context or
    /// process saved a record with the id meanwhile. To replace a record on purpose, delete it
    /// first in the same context. (An import context applies what another device wrote: its
    /// inserts may meet a record the store holds, and replace it.)
    @discardableResult
    public func insert(_ record: Record) throws -> Record {
        try processInbox()
        guard schema.entity(record.id.entity) != nil else {
            throw PersistenceError(.invalidRequest, "no entity \(record.id.entity) in schema version \(schema.version)")
        }
        // (Read once: a local insert of an id that is not there has no previous version.)
        let checkedNew = origin == .local && deleted[record.id] == nil
        if checkedNew, try current(record.id) != nil {
            throw duplicateInsert([record.id], store: try? coordinator.store(forEntity: record.id.entity).url)
        }
        var record = record
        if let hook = hooks[record.id.entity] {
            try hook.didInsert(&record, origin: origin, context: self)
        }
        let previous = checkedNew ? inserted[record.id] ?? updated[record.id]?.current : try current(record.id)
        deleted[record.id] = nil
        updated[record.id] = nil
        written[record.id] = nil
        inserted[record.id] = record
        try maintainInverses(from: previous ?? Record(id: record.id), to: record)
        if origin == .local { try hooks[record.id.entity]?.didChangeLocally(record, change: .insert, context: self) }
        return record
    }

    /// Replaces the record with `record.id` by `record`, keeping the inverses of changed
    /// relationships consistent. The save commits only the properties that differ from the
    /// store's version, so another writer's changes to other properties survive.
    public func update(_ record: Record) throws {
        try processInbox()
        // The version the caller's record derives from: pending, or as this context last read it.
        let previous =
            deleted[record.id] != nil
            ? nil : try inserted[record.id] ?? updated[record.id]?.current ?? snapshots[record.id] ?? current(record.id)
        guard let previous else {
            throw PersistenceError(
                .invalidRequest,
                "cannot update \(record.id): no such record (deleted, or never saved)"
            )
        }
        try setRaw(record)
        try maintainInverses(from: previous, to: record)
        if origin == .local { try hooks[record.id.entity]?.didChangeLocally(record, change: .update, context: self) }
    }

    /// Deletes the record with `id` as an imported deletion: no delete rules run and no other
    /// record's owning relationship (``Schema/ownsRelationship(entity:_:)``) is changed; only the
    /// derived sides that pointed at the record forget it. References to it that remain are
    /// reported by validation at the next local save, where repair policies deal with them. The
    /// sync layer applies other devices' deletions this way, so the outcome does not depend on
    /// the order in which changes arrive.
    public func deleteWithoutRules(_ id: ObjectID) throws {
        try processInbox()
        guard let record = try current(id), let entity = schema.entity(id.entity) else { return }
        for relationship in entity.relationships where schema.ownsRelationship(entity: entity.name, relationship.name) {
            try adjustInverse(of: id, relationship, added: [], removed: Self.targets(of: record, relationship))
        }
        if inserted.removeValue(forKey: id) != nil {
            if let stored = try storeRecord(id) { deleted[id] = stored }
        } else {
            deleted[id] = updated[id]?.base ?? record
        }
        updated[id] = nil
        written[id] = nil
    }

    /// Deletes the record with `id`, applying its relationships' delete rules: `nullify` clears
    /// the other side, `cascade` deletes the related records too, `deny` refuses
    /// (``PersistenceError/Code/deleteDenied``) while related records exist. Deleting a record
    /// that does not exist does nothing.
    public func delete(_ id: ObjectID) throws {
        try processInbox()
        guard try current(id) != nil else { return }
        var plan: [ObjectID] = []
        try planDeletion(of: id, into: &plan)
        for victim in plan {
            guard let record = try current(victim) else { continue }
            try hooks[victim.entity]?.willDelete(record, origin: origin, context: self)
        }
        let doomed = Set(plan)
        for victim in plan {
            guard let record = try current(victim), let entity = schema.entity(victim.entity) else { continue }
            for relationship in entity.relationships {
                let targets = Self.targets(of: record, relationship).subtracting(doomed)
                try adjustInverse(of: victim, relationship, added: [], removed: targets)
            }
        }
        for victim in plan {
            guard let record = try current(victim) else { continue }
            if inserted.removeValue(forKey: victim) != nil {
                if let stored = try storeRecord(victim) { deleted[victim] = stored }
            } else {
                deleted[victim] = updated[victim]?.base ?? record
            }
            updated[victim] = nil
            written[victim] = nil
        }
        if origin == .local {
            for victim in plan {
                try hooks[victim.entity]?.didChangeLocally(Record(id: victim), change: .delete, context: self)
            }
        }
    }

    /// Sets a metadata entry of `store` (or removes it, for `nil`), committed by the next save
    /// in the same atomic write as the data.
    public func setMetadata(_ value: Data?, forKey key: String, in store: any PersistentStore) {
        // Mutated in place: a copy per call would make many entries quadratic.
        pendingMetadata[ObjectIdentifier(store), default: (store, [:])].entries[key] = .some(value)
    }

    /// The metadata entries of `store` that this context set (a value) or removed (`nil`) and has
    /// not saved yet, whose keys start with `prefix`.
    public func unsavedMetadata(withPrefix prefix: String, in store: any PersistentStore) -> [String: Data?] {
        (pendingMetadata[ObjectIdentifier(store)]?.entries ?? [:]).filter { $0.key.hasPrefix(prefix) }
    }

    /// Forgets every unsaved change.
    public func rollback() {
        duplicateRedirects = [:]
        removedDuplicates = [:]
        duplicateRelinks = [:]
        winnerMerges = [:]
        keptForValidation = []
        validatedDeferred = []
        validatedDeferredEntries = [:]
        inserted = [:]
        updated = [:]
        written = [:]
        deleted = [:]
        pendingMetadata = [:]
    }

    /// Forgets every unsaved change and every record read so far: later updates compare with
    /// the store's version at the time they are made. Call it after reading many records you
    /// will not change, to release their snapshots.
    public func reset() {
        rollback()
        snapshots = [:]
        prefetched = []
        readAbsent = []
    }

    /// Reads the records with `ids` from their stores, one read per store instead of one per
    /// record, ahead of changing them. Until this context next saves or is reset, looking one of
    /// these ids up (``record(with:)``, ``insert(_:)->Record``, ``update(_:)-(Record)``, ``delete(_:)-(ObjectID)``) uses what
    /// this read found, including that the store did not hold it; changes that other contexts
    /// save meanwhile are not seen. Call it before touching many records the store may or may
    /// not hold, as an import does.
    public func prefetch(_ ids: some Sequence<ObjectID>) throws {
        try processInbox()
        var unread: [String: [ObjectID]] = [:]
        for id in ids where !prefetched.contains(id) && schema.entity(id.entity) != nil {
            unread[id.entity, default: []].append(id)
        }
        for (entity, group) in unread.sorted(by: { $0.key < $1.key }) {
            let store = try coordinator.store(forEntity: entity)
            for chunk in stride(from: 0, to: group.count, by: 500) {
                let slice = Array(group[chunk..<min(chunk + 500, group.count)])
                let found = try store.records(with: slice)
                for id in slice { snapshots[id] = nil }
                for record in found { snapshots[record.id] = record }
                prefetched.formUnion(slice)
            }
        }
    }

    /// Replaces the record with `record.id` by `record`, keeping inverses consistent, without
    /// running hooks (the save pipeline's own corrections, made under the commit's locks).
    func updateWithoutHooks(_ record: Record) throws {
        let previous =
            try inserted[record.id] ?? updated[record.id]?.current ?? snapshots[record.id] ?? current(record.id)
        guard let previous else { return }
        try setRaw(record)
        try maintainInverses(from: previous, to: record)
    }

    /// Records `record` as the current version without touching inverses.
    private func setRaw(_ record: Record) throws {
        if inserted[record.id] != nil {
            inserted[record.id] = record
        } else if let pair = updated[record.id] {
            updated[record.id] = (pair.base, record)
        } else if let base = try snapshots[record.id] ?? storeRecord(record.id) {
            updated[record.id] = (base, record)
        }
    }

    private func modify(_ id: ObjectID, _ body: (inout Record) -> Void) throws {
        guard var record = try current(id) else { return }
        body(&record)
        try setRaw(record)
    }

    static func targets(of record: Record, _ relationship: RelationshipDescription) -> Set<ObjectID> {
        relationship.isToMany
            ? record.toMany[relationship.name] ?? [] : record.toOne[relationship.name].map { [$0] } ?? []
    }

    private func maintainInverses(from old: Record, to new: Record) throws {
        guard let entity = schema.entity(new.id.entity) else { return }
        for relationship in entity.relationships {
            let before = Self.targets(of: old, relationship)
            let after = Self.targets(of: new, relationship)
            if before == after { continue }
            try adjustInverse(
                of: new.id,
                relationship,
                added: after.subtracting(before),
                removed: before.subtracting(after)
            )
        }
    }

    /// Makes the records at the other end of `relationship` agree that `source` now points at
    /// `added` and no longer at `removed`.
    private func adjustInverse(
        of source: ObjectID,
        _ relationship: RelationshipDescription,
        added: Set<ObjectID>,
        removed: Set<ObjectID>
    ) throws {
        guard let inverse = schema.entity(relationship.destination)?.relationship(relationship.inverse) else { return }
        for target in removed.sorted() {
            try modify(target) { record in
                if inverse.isToMany {
                    record.toMany[inverse.name]?.remove(source)
                    if record.toMany[inverse.name]?.isEmpty == true { record.toMany[inverse.name] = nil }
                } else if record.toOne[inverse.name] == source {
                    record.toOne[inverse.name] = nil
                }
            }
        }
        for target in added.sorted() {
            var displaced: ObjectID?
            try modify(target) { record in
                if inverse.isToMany {
                    record.toMany[inverse.name, default: []].insert(source)
                } else {
                    if let previous = record.toOne[inverse.name], previous != source { displaced = previous }
                    record.toOne[inverse.name] = source
                }
            }
            // The target left its previous owner, whose side of the relationship must drop it.
            if let displaced {
                try modify(displaced) { record in
                    if relationship.isToMany {
                        record.toMany[relationship.name]?.remove(target)
                        if record.toMany[relationship.name]?.isEmpty == true { record.toMany[relationship.name] = nil }
                    } else if record.toOne[relationship.name] == target {
                        record.toOne[relationship.name] = nil
                    }
                }
            }
        }
    }

    private func planDeletion(of id: ObjectID, into plan: inout [ObjectID]) throws {
        guard !plan.contains(id), let record = try current(id), let entity = schema.entity(id.entity) else { return }
        plan.append(id)
        for relationship in entity.relationships {
            let targets = Self.targets(of: record, relationship)
            switch relationship.deleteRule {
            case .deny where !targets.isEmpty:
                throw PersistenceError(
                    .deleteDenied,
                    "cannot delete \(id): its \(relationship.name) relationship still holds \(targets.count) record(s) and its delete rule is deny"
                )
            case .cascade:
                for target in targets.sorted() { try planDeletion(of: target, into: &plan) }
            default:
                break
            }
        }
    }
}
