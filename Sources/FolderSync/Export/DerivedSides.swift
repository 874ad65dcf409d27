import Persistence

/// The derived (non-owning) sides of relationships in a local commit: logs never carry them, so
/// each device computes them from the owners, and a commit writes them as the store holds them.
enum DerivedSides {
    /// Rewrites the derived (non-owning) to-many sides a local commit sets from what the store
    /// holds now plus the owners this commit changes.
    ///
    /// A context computes a derived side from the records it read; an import that committed
    /// since (adding a note to a folder, say) is missing from that set, and writing it would drop
    /// the imported member from the store for good: derived sides are never synced, so nothing
    /// would put it back. Under the commit lock the store's value is current, so the set written
    /// is the truth after this commit.
    static func refresh(_ changes: inout StoreChanges, stored: [ObjectID: Record], schema: Schema) {
        for index in changes.updates.indices {
            let update = changes.updates[index]
            guard let entity = schema.entity(update.id.entity) else { continue }
            for key in update.toMany.keys where !schema.ownsRelationship(entity: entity.name, key) {
                guard let relationship = entity.relationship(key), let current = stored[update.id] else { continue }
                let inverse = relationship.inverse
                var set = current.toMany[key] ?? []
                // (An insert may replace a stored owner that pointed here and no longer does.)
                for owner in changes.inserts where owner.id.entity == relationship.destination {
                    if owner.toOne[inverse] == update.id || owner.toMany[inverse]?.contains(update.id) == true {
                        set.insert(owner.id)
                    } else {
                        set.remove(owner.id)
                    }
                }
                // An owner another device deleted meanwhile is not brought back by this update.
                for owner in changes.updates where owner.id.entity == relationship.destination {
                    if stored[owner.id] == nil {
                        set.remove(owner.id)
                    } else if let target = owner.toOne[inverse] {
                        if target == update.id { set.insert(owner.id) } else { set.remove(owner.id) }
                    } else if let targets = owner.toMany[inverse] {
                        if targets.contains(update.id) { set.insert(owner.id) } else { set.remove(owner.id) }
                    }
                }
                for deleted in changes.deletes where deleted.entity == relationship.destination { set.remove(deleted) }
                changes.updates[index].toMany[key] = set
            }
        }
    }

    /// Keeps the derived sides of records this commit does not touch in step with the owning
    /// sides it changes, judged against what the store holds now (under the commit lock).
    ///
    /// A context computes inverse changes from the records it read. If an import committed in
    /// between (adding a note to a tag, say), the context does not know the tag's derived side
    /// now holds the note; when the context then rewrites the note's owning set without the tag,
    /// the tag would keep pointing at the note for good (derived sides are never synced). Here
    /// every owning change is compared with the store's current owner, and the derived side of
    /// each target it leaves or joins is corrected, adding updates for targets the commit does
    /// not already rewrite.
    static func repairTargets(
        _ changes: inout StoreChanges,
        stored: [ObjectID: Record],
        schema: Schema,
        store: any PersistentStore
    ) throws {
        let edits = derivedEdits(of: changes, stored: stored, schema: schema)
        guard !edits.isEmpty else { return }
        try apply(edits, to: &changes, schema: schema, store: store)
    }

    /// For each target (and derived key): the owners a commit's owning changes add to its derived
    /// side and remove from it, judged against what the store holds (`stored`).
    typealias DerivedEdits = [ObjectID: [String: (add: Set<ObjectID>, remove: Set<ObjectID>)]]

    /// What a commit's owning changes do to the derived sides of their targets.
    private static func derivedEdits(
        of changes: StoreChanges,
        stored: [ObjectID: Record],
        schema: Schema
    ) -> DerivedEdits {
        var edits: DerivedEdits = [:]
        func note(
            _ owner: ObjectID,
            _ relationship: RelationshipDescription,
            added: Set<ObjectID>,
            removed: Set<ObjectID>
        ) {
            for target in added {
                edits[target, default: [:]][relationship.inverse, default: ([], [])].add.insert(owner)
            }
            for target in removed {
                edits[target, default: [:]][relationship.inverse, default: ([], [])].remove.insert(owner)
            }
        }
        for update in changes.updates {
            guard let entity = schema.entity(update.id.entity), let old = stored[update.id] else { continue }
            for relationship in entity.relationships
            where schema.ownsRelationship(entity: entity.name, relationship.name) {
                if relationship.isToMany {
                    guard let new = update.toMany[relationship.name] else { continue }
                    let before = old.toMany[relationship.name] ?? []
                    note(update.id, relationship, added: new.subtracting(before), removed: before.subtracting(new))
                } else if let entry = update.toOne[relationship.name] {
                    let before = old.toOne[relationship.name]
                    guard before != entry else { continue }
                    note(update.id, relationship, added: entry.map { [$0] } ?? [], removed: before.map { [$0] } ?? [])
                }
            }
        }
        // An insert that replaces a record the store holds (another process of this device made
        // it meanwhile, unseen by this context) leaves the old version's targets.
        for insert in changes.inserts {
            guard let entity = schema.entity(insert.id.entity), let old = stored[insert.id] else { continue }
            for relationship in entity.relationships
            where schema.ownsRelationship(entity: entity.name, relationship.name) {
                if relationship.isToMany {
                    let new = insert.toMany[relationship.name] ?? []
                    let before = old.toMany[relationship.name] ?? []
                    note(insert.id, relationship, added: new.subtracting(before), removed: before.subtracting(new))
                } else {
                    let (before, new) = (old.toOne[relationship.name], insert.toOne[relationship.name])
                    guard before != new else { continue }
                    note(insert.id, relationship, added: new.map { [$0] } ?? [], removed: before.map { [$0] } ?? [])
                }
            }
        }
        for id in changes.deletes {
            guard let entity = schema.entity(id.entity), let old = stored[id] else { continue }
            for relationship in entity.relationships
            where schema.ownsRelationship(entity: entity.name, relationship.name) {
                let targets =
                    relationship.isToMany
                    ? old.toMany[relationship.name] ?? [] : old.toOne[relationship.name].map { [$0] } ?? []
                note(id, relationship, added: [], removed: targets)
            }
        }
        return edits
    }

    /// Corrects the derived sides of the targets the commit does not rewrite itself (nor insert
    /// or delete), as the store holds them now, adding updates for them.
    private static func apply(
        _ edits: DerivedEdits,
        to changes: inout StoreChanges,
        schema: Schema,
        store: any PersistentStore
    ) throws {
        let deleted = Set(changes.deletes)
        let inserted = Set(changes.inserts.map(\.id))
        // Targets the commit rewrites already had their derived sides refreshed.
        var rewritten = Set<String>()
        for update in changes.updates {
            for key in update.toMany.keys { rewritten.insert("\(update.id)#\(key)") }
            for key in update.toOne.keys { rewritten.insert("\(update.id)#\(key)") }
        }
        let pending = edits.keys.filter { !deleted.contains($0) && !inserted.contains($0) }.sorted()
        let current = Dictionary(
            try pending.chunked(1000).flatMap { try store.records(with: Array($0)) }.map { ($0.id, $0) },
            uniquingKeysWith: { $1 }
        )
        for target in pending {
            guard let record = current[target], let entity = schema.entity(target.entity) else { continue }
            for (key, edit) in edits[target]! where !rewritten.contains("\(target)#\(key)") {
                guard let relationship = entity.relationship(key) else { continue }
                var update = RecordUpdate(id: target)
                if relationship.isToMany {
                    let set = (record.toMany[key] ?? []).subtracting(edit.remove).union(edit.add)
                    guard set != (record.toMany[key] ?? []) else { continue }
                    update.toMany[key] = set
                } else {
                    var value = record.toOne[key]
                    if let owner = value, edit.remove.contains(owner) { value = nil }
                    if let owner = edit.add.sorted().last { value = owner }
                    guard value != record.toOne[key] else { continue }
                    update.toOne[key] = .some(value)
                }
                if let index = changes.updates.firstIndex(where: { $0.id == target }) {
                    changes.updates[index].toMany.merge(update.toMany) { $1 }
                    changes.updates[index].toOne.merge(update.toOne) { $1 }
                } else {
                    changes.updates.append(update)
                }
            }
        }
    }

    /// Gives a record a local commit inserts the derived sides that owners the store already
    /// holds give it: an id made again (a deterministic id, or one this device knew) may have
    /// owners that kept pointing at it while it did not exist (an element added elsewhere while
    /// it was deleted here). The context knows only the owners it read; the import of the same
    /// creation on another device takes them all, so this device must too. `known` says which
    /// ids can have such owners (a new random id cannot).
    static func fillInserts(
        _ changes: inout StoreChanges,
        schema: Schema,
        store: any PersistentStore,
        known: (ObjectID) -> Bool
    ) throws {
        for index in changes.inserts.indices {
            let record = changes.inserts[index]
            guard known(record.id), let entity = schema.entity(record.id.entity) else { continue }
            for relationship in entity.relationships
            where !schema.ownsRelationship(entity: entity.name, relationship.name) {
                let inverse = relationship.inverse
                let stored = try store.fetch(
                    FetchRequest(entity: relationship.destination, predicate: Field(inverse).refers(to: record.id))
                )
                var owners = Set(stored.map(\.id))
                if relationship.isToMany {
                    owners.formUnion(record.toMany[relationship.name] ?? [])
                } else if let current = record.toOne[relationship.name] {
                    owners.insert(current)
                }
                // What this commit does to the owners comes last.
                for owner in changes.inserts where owner.id.entity == relationship.destination {
                    if owner.toOne[inverse] == record.id || owner.toMany[inverse]?.contains(record.id) == true {
                        owners.insert(owner.id)
                    } else {
                        owners.remove(owner.id)
                    }
                }
                for owner in changes.updates where owner.id.entity == relationship.destination {
                    if let target = owner.toOne[inverse] {
                        if target == record.id { owners.insert(owner.id) } else { owners.remove(owner.id) }
                    } else if let targets = owner.toMany[inverse] {
                        if targets.contains(record.id) { owners.insert(owner.id) } else { owners.remove(owner.id) }
                    }
                }
                for deleted in changes.deletes where deleted.entity == relationship.destination {
                    owners.remove(deleted)
                }
                if relationship.isToMany {
                    changes.inserts[index].toMany[relationship.name] = owners.isEmpty ? nil : owners
                } else {
                    changes.inserts[index].toOne[relationship.name] = owners.min()
                }
            }
        }
    }

    /// Takes `gone` (records this commit updated that the store no longer holds: another
    /// process deleted them, or its import removed them as duplicates, after this context read
    /// them) out of the derived sides this commit writes: their owning sides never reach the
    /// store, so a derived element naming them would point at nothing (another device, building
    /// the derived side from the owners it holds, never has it).
    static func dropElements(naming gone: Set<ObjectID>, from changes: inout StoreChanges, schema: Schema) {
        guard !gone.isEmpty else { return }
        func derived(_ entity: String) -> [RelationshipDescription] {
            schema.entity(entity)?.relationships.filter { !schema.ownsRelationship(entity: entity, $0.name) } ?? []
        }
        for index in changes.inserts.indices {
            for relationship in derived(changes.inserts[index].id.entity) {
                let name = relationship.name
                if relationship.isToMany, let set = changes.inserts[index].toMany[name], !set.isDisjoint(with: gone) {
                    let kept = set.subtracting(gone)
                    changes.inserts[index].toMany[name] = kept.isEmpty ? nil : kept
                } else if let target = changes.inserts[index].toOne[name], gone.contains(target) {
                    changes.inserts[index].toOne[name] = nil
                }
            }
        }
        for index in changes.updates.indices {
            for relationship in derived(changes.updates[index].id.entity) {
                let name = relationship.name
                if relationship.isToMany, let set = changes.updates[index].toMany[name], !set.isDisjoint(with: gone) {
                    changes.updates[index].toMany[name] = set.subtracting(gone)
                } else if let target = changes.updates[index].toOne[name], let id = target, gone.contains(id) {
                    changes.updates[index].toOne[name] = .some(nil)
                }
            }
        }
    }
}
