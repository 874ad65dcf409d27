import Persistence

extension FolderSync {
    /// Rewrites the derived (non-owning) to-many sides a local commit sets from what the store
    /// holds now plus the owners this commit changes.
    ///
    /// A context computes a derived side from the records it read; an import that committed
    /// since (adding a note to a folder, say) is missing from that set, and writing it would drop
    /// the imported member from the store for good: derived sides are never synced, so nothing
    /// would put it back. Under the commit lock the store's value is current, so the set written
    /// is the truth after this commit.
    static func refreshDerivedSides(_ changes: inout StoreChanges, stored: [ObjectID: Record], schema: Schema) {
        for index in changes.updates.indices {
            let update = changes.updates[index]
            guard let entity = schema.entity(update.id.entity) else { continue }
            for key in update.toMany.keys where !schema.ownsRelationship(entity: entity.name, key) {
                guard let relationship = entity.relationship(key), let current = stored[update.id] else { continue }
                let inverse = relationship.inverse
                var set = current.toMany[key] ?? []
                for owner in changes.inserts where owner.id.entity == relationship.destination {
                    if owner.toOne[inverse] == update.id || owner.toMany[inverse]?.contains(update.id) == true { set.insert(owner.id) }
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
}
