import Foundation
import Persistence

/// Undoing a removal: the record comes back with every reference that named it, and what a
/// merge changed in its winner goes back where no write changed it since.
extension DuplicateLedger {
    /// Undoes the removals in favour of `winner`: a write to it may end the likeness.
    func undoRemovals(
        favouring winner: ObjectID,
        in context: ObjectContext,
        clocks: inout [ObjectID: RecordClocks]
    ) throws {
        for loser in try losers(favouring: winner) {
            try undoRemoval(of: loser, favouring: winner, in: context, clocks: &clocks)
        }
        // What a policy's merge changed goes back, where no write changed it since.
        var state =
            try clocks[winner]
            ?? Self.clocks(of: winner, in: store.syncMetadata([SyncMetadata.recordClocks(winner)]))
        guard state.hasPremerge else { return }
        if var record = try context.record(with: winner) {
            let before = record
            Self.restorePremerge(state, in: &record)
            if record != before { try context.update(record) }
        } else if let removal = state.removedAsDuplicate, var ghost = state.ghost {
            // The winner was removed in turn (a chain): its ghost, as merged, goes back too, and
            // so does its own removal, with what its winner took from it; the import decides again.
            let before = ghost
            Self.restorePremerge(state, in: &ghost)
            state.clearPremerge()
            state.ghost = ghost
            clocks[winner] = state
            guard ghost != before else { return }
            try undoRemoval(of: winner, in: context, clocks: &clocks)
            if try hasPremerge(removal.winner, clocks: clocks) {
                try undoRemovals(favouring: removal.winner, in: context, clocks: &clocks)
            }
            return
        }
        state.clearPremerge()
        clocks[winner] = state
    }

    /// Undoes the removal of the duplicate `loser` (removed in favour of `winner`, when the
    /// caller knows): it comes back (unless a deletion ended it meanwhile), with the references
    /// that name it; the import's save decides again. A loser a local save made again (a
    /// deterministic id) is back already: the references that named it come back to it.
    func undoRemoval(
        of loser: ObjectID,
        favouring winner: ObjectID? = nil,
        in context: ObjectContext,
        clocks: inout [ObjectID: RecordClocks]
    ) throws {
        guard let removedFor = try restore(loser, favouring: winner, in: context, clocks: &clocks) else { return }
        context.removeSyncMetadata(SyncMetadata.redirect(loser), in: store)
        context.removeSyncMetadata(SyncMetadata.loser(winner: removedFor, loser: loser), in: store)
        // Where the winner stands now (it may have lost in turn).
        var standIns: Set<ObjectID> = [removedFor]
        if let further = try replacement(forMissing: removedFor) { standIns.insert(further) }
        for holder in try relinkedHolders(of: loser, in: context, clocks: clocks).sorted() {
            try giveBack(loser, to: holder, replacing: standIns, in: context, clocks: &clocks)
        }
    }

    /// A record's clocks: those this import holds, else the stored ones.
    private func knownClocks(_ id: ObjectID, _ clocks: [ObjectID: RecordClocks]) throws -> RecordClocks {
        if let known = clocks[id] { return known }
        return Self.clocks(of: id, in: try store.syncMetadata([SyncMetadata.recordClocks(id)]))
    }

    /// Brings `loser` back (or, deleted meanwhile, its ghost with what its deletion left):
    /// returns the winner it was removed for, or `nil` when nothing is to be undone.
    private func restore(
        _ loser: ObjectID,
        favouring winner: ObjectID?,
        in context: ObjectContext,
        clocks: inout [ObjectID: RecordClocks]
    ) throws -> ObjectID? {
        var state = try knownClocks(loser, clocks)
        guard let entity = coordinator.schema.entity(loser.entity) else { return nil }
        guard let removal = state.removedAsDuplicate else {
            return state.isAlive ? winner : nil
        }
        state.removedAsDuplicate = nil
        var record = state.ghost ?? Record(id: loser)
        state.ghost = nil
        if state.isAlive || (state.created == nil && state.deleted == nil) {
            clocks[loser] = state
            try insertImported(record, entity: entity, in: context)
        } else {
            // Deleted meanwhile: the references that name it go back to it all the same, as on
            // every device that never removed it (validation then sees a deleted target).
            if let deleted = state.deleted { try forget(writesUpTo: deleted, in: &record, state: state) }
            state.ghost = record.values.isEmpty && record.toOne.isEmpty && record.toMany.isEmpty ? nil : record
            clocks[loser] = state
        }
        return removal.winner
    }

    /// The records whose references were moved off `loser`: those stored as moved, and those this
    /// import moved before the removal was undone (in this save, or its clocks). The notes of the
    /// moves go.
    private func relinkedHolders(
        of loser: ObjectID,
        in context: ObjectContext,
        clocks: [ObjectID: RecordClocks]
    ) throws -> Set<ObjectID> {
        var holders = Set<ObjectID>()
        let relinks = SyncMetadata.relinks(of: loser)
        var keys: [SyncMetadataKey<Void>] = []
        try store.enumerateSyncMetadata(in: relinks, batchSize: 500) { batch in keys += batch.map(\.key) }
        keys += context.unsavedSyncMetadata(in: relinks, in: store).compactMap {
            $0.value == nil ? nil : relinks.key(named: $0.key)
        }
        for key in keys {
            context.removeSyncMetadata(key, in: store)
            guard let name = SyncMetadata.lastRecord(of: key.name),
                let holder = Self.objectID(String(name), entity: nil)
            else { continue }
            holders.insert(holder)
        }
        for (id, known) in clocks where known.relinked?.values.contains(loser) == true { holders.insert(id) }
        return holders
    }

    /// Gives `holder` its references to `loser` back: its to-one references moved off it, and its
    /// to-many elements naming it whose write is newer than the holder's deletion (the stand-ins
    /// in `standIns` that took its place go, unless written themselves).
    private func giveBack(
        _ loser: ObjectID,
        to holder: ObjectID,
        replacing standIns: Set<ObjectID>,
        in context: ObjectContext,
        clocks: inout [ObjectID: RecordClocks]
    ) throws {
        let schema = coordinator.schema
        guard let holderEntity = schema.entity(holder.entity) else { return }
        var holderClocks = try knownClocks(holder, clocks)
        // A holder removed as a duplicate in turn keeps its references in its ghost: they go
        // back there, so that it comes back (or its winner merges it) as elsewhere.
        let stored = try context.record(with: holder)
        guard var held = stored ?? holderClocks.ghost.flatMap({ holderClocks.removedAsDuplicate != nil ? $0 : nil })
        else { return }
        let before = held
        for (name, target) in holderClocks.relinked ?? [:] where target == loser {
            held.toOne[name] = loser
            holderClocks.relinked?[name] = nil
        }
        if holderClocks.relinked?.isEmpty == true { holderClocks.relinked = nil }
        for relationship in holderEntity.relationships
        where relationship.isToMany && schema.ownsRelationship(entity: holderEntity.name, relationship.name) {
            let states = holderClocks.members[relationship.name] ?? [:]
            // A write the holder's deletion ended names the loser no more (the holder was made
            // again since).
            guard let write = states[loser.description], write.present,
                holderClocks.deleted.map({ write.clock > $0 }) ?? true,
                held.toMany[relationship.name]?.contains(loser) != true
            else { continue }
            var set = held.toMany[relationship.name] ?? []
            set.insert(loser)
            for standIn in standIns where states[standIn.description]?.present != true { set.remove(standIn) }
            held.toMany[relationship.name] = set
        }
        guard stored == nil else {
            clocks[holder] = holderClocks
            if held != before { try context.update(held) }
            return
        }
        holderClocks.ghost = held
        clocks[holder] = holderClocks
        // A removed duplicate whose reference changed comes back, as after a write to it:
        // what its winner took from it (the relinked target) goes back too, and the import
        // decides again.
        guard held != before, let removal = holderClocks.removedAsDuplicate else { return }
        try undoRemoval(of: holder, in: context, clocks: &clocks)
        if try hasPremerge(removal.winner, clocks: clocks) {
            try undoRemovals(favouring: removal.winner, in: context, clocks: &clocks)
        }
    }

    /// Inserts `record`, which an import brings into existence, with its derived sides taken
    /// from the owners that already point at it.
    func insertImported(_ record: Record, entity: EntityDescription, in context: ObjectContext) throws {
        let schema = coordinator.schema
        var record = record
        for relationship in entity.relationships where !schema.ownsRelationship(entity: entity.name, relationship.name)
        {
            let owners = try context.fetch(
                FetchRequest(
                    entity: relationship.destination,
                    predicate: Field(relationship.inverse).refers(to: record.id)
                )
            )
            let ids = Set(owners.map(\.id))
            if relationship.isToMany {
                record.toMany[relationship.name] = ids.isEmpty ? nil : ids
            } else {
                record.toOne[relationship.name] = ids.min()
            }
        }
        try context.insert(record)
    }
}
