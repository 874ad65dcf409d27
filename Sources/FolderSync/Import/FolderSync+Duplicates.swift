import Foundation
import Persistence

/// Duplicates an import removes, and how a removal is undone.
///
/// An import removes a duplicate whenever two records share a key in what this device holds at
/// that moment. Another device may never hold them alike (one was renamed before it saw them
/// both), so such a removal is not a deletion: no log carries it, the record's history and
/// values stay in its clocks (``RecordClocks/removedAsDuplicate``, the ghost), and references
/// moved to the winner remember the target they were written with
/// (``RecordClocks/relinked``, the to-many elements' own clocks). A newer write to the removed
/// record or to its winner, from any device or from this one, undoes the removal: the record
/// comes back with every reference that named it, and the import's save decides again. Every
/// device so ends with the duplicates of the same final data removed.
extension FolderSync {
    /// Whether `id`, a relationship target the store does not hold, was deleted (a tombstone, or
    /// a duplicate removed by policy) or has not arrived: sync delivers records in any order
    /// across devices, and a reference may come before its target.
    public func state(ofMissing id: ObjectID) throws -> MissingTargetState? {
        guard (try? coordinator.store(forEntity: id.entity)) === store else { return nil }
        let entries = try store.syncMetadata([SyncMetadata.recordClocks(id), SyncMetadata.redirect(id)])
        if entries.contains(SyncMetadata.redirect(id)) { return .deleted }
        if let clocks = entries[SyncMetadata.recordClocks(id)], clocks.deleted != nil,
            !clocks.isAlive
        {
            return .deleted
        }
        return .notArrived
    }

    /// The winner that `id`, a removed duplicate, was folded into (following a winner that lost
    /// in turn), or `nil`.
    public func replacement(forMissing id: ObjectID) throws -> ObjectID? {
        guard (try? coordinator.store(forEntity: id.entity)) === store else { return nil }
        var current = id
        for _ in 0..<8 {
            guard let text = try store.syncMetadataValue(SyncMetadata.redirect(current)),
                let winner = Self.objectID(text, entity: current.entity)
            else { break }
            current = winner
        }
        return current == id ? nil : current
    }

    /// In an import's commit: the duplicates it removed become removals (not deletions), and the
    /// references it moved to their winners remember their targets.
    func recordDuplicateRemovals(
        _ changes: inout StoreChanges,
        context: ObjectContext,
        removed: [ObjectID],
        entries: SyncMetadataSnapshot
    ) throws {
        let schema = coordinator.schema
        func clocks(_ id: ObjectID) throws -> RecordClocks {
            let key = SyncMetadata.recordClocks(id)
            if let written = changes.written(key) { return written ?? RecordClocks() }
            if entries.contains(key) { return entries[key] ?? RecordClocks() }
            return Self.clocks(of: id, in: try store.syncMetadata([key]))
        }
        let deleted = Set(removed)
        // (A record removed as a duplicate in turn keeps them too, for its ghost.)
        for (record, moved) in context.duplicateRelinks.sorted(by: { $0.key < $1.key })
        where (!deleted.contains(record) || context.duplicateRedirects[record] != nil)
            && (try? coordinator.store(forEntity: record.entity)) === store
        {
            guard let entity = schema.entity(record.entity) else { continue }
            var state = try clocks(record)
            let before = state
            for (name, target) in moved.sorted(by: { $0.key < $1.key })
            where schema.ownsRelationship(entity: entity.name, name) {
                guard let relationship = entity.relationship(name) else { continue }
                let logical: ObjectID
                if relationship.isToMany {
                    // The element's own clock keeps it; one that came with the creation gets one.
                    logical = target
                    if state.members[name]?[target.description] == nil, let stamp = state.created {
                        state.members[name, default: [:]][target.description] = .init(present: true, clock: stamp)
                    }
                } else {
                    logical = state.relinked?[name] ?? target
                    state.relinked = (state.relinked ?? [:]).merging([name: logical]) { $1 }
                }
                changes.mark(SyncMetadata.relinked(target: logical, record: record))
            }
            if state != before { try changes.set(SyncMetadata.recordClocks(record), state) }
        }
        for id in removed {
            guard let winner = context.duplicateRedirects[id] else { continue }
            var state = try clocks(id)
            guard state.isAlive || (state.created == nil && state.deleted == nil) else { continue }
            state.removedAsDuplicate = .init(winner: winner, newest: state.newest)
            if let record = context.removedDuplicates[id], let entity = schema.entity(id.entity) {
                state.ghost = Self.owningSides(of: record, entity: entity, schema: schema)
            }
            try changes.set(SyncMetadata.recordClocks(id), state)
            changes.mark(SyncMetadata.loser(winner: winner, loser: id))
        }
        // What a policy's merge (and the framework's) changed in each winner, as it was: kept
        // until the removals in its favour are undone (the earliest value stays while any merge
        // stands).
        for (winner, steps) in context.winnerMerges.sorted(by: { $0.key < $1.key })
        where (try? coordinator.store(forEntity: winner.entity)) === store {
            guard let entity = schema.entity(winner.entity) else { continue }
            var state = try clocks(winner)
            let kept = state
            for step in steps {
                Self.notePremerge(before: step.before, after: step.after, entity: entity, schema: schema, in: &state)
            }
            if state != kept { try changes.set(SyncMetadata.recordClocks(winner), state) }
        }
    }

    /// The elements of a to-many relationship that a local save takes away without naming them:
    /// those present by their clocks (`states`) that the store held as their removed duplicate's
    /// winner, when the save leaves that winner out of `targets`. A user who takes the winner off
    /// takes off what it stood for; otherwise the element would bring it back on every device.
    func standIns(
        leaving targets: Set<ObjectID>,
        before: Set<ObjectID>,
        states: [String: RecordClocks.MemberClock]?
    ) throws -> [ObjectID] {
        guard let states else { return [] }
        var found: [ObjectID] = []
        for (element, state) in states.sorted(by: { $0.key < $1.key }) where state.present {
            guard let id = Self.objectID(element, entity: nil), !targets.contains(id), !before.contains(id),
                let winner = try replacement(forMissing: id), before.contains(winner), !targets.contains(winner)
            else { continue }
            found.append(id)
        }
        return found
    }

    /// `record` with only what logs carry: attributes and owning relationships.
    static func owningSides(of record: Record, entity: EntityDescription, schema: Schema) -> Record {
        var kept = record
        for relationship in entity.relationships where !schema.ownsRelationship(entity: entity.name, relationship.name)
        {
            kept.toOne[relationship.name] = nil
            kept.toMany[relationship.name] = nil
        }
        return kept
    }

    /// The records `change` refers to.
    static func targets(of change: SyncChange) -> Set<ObjectID> {
        var targets = Set<ObjectID>()
        for reference in change.references.values { if let target = reference.target { targets.insert(target) } }
        for members in change.members.values { targets.formUnion(members.map(\.target)) }
        return targets
    }

    /// Whether `change` carries a write newer than `clock` (any write when `clock` is `nil`).
    static func hasWrite(in change: SyncChange, newerThan clock: SyncClock?) -> Bool {
        guard let clock else { return true }
        if let created = change.created, created > clock { return true }
        if let deleted = change.deleted, deleted > clock { return true }
        if change.values.values.contains(where: { $0.clock > clock }) { return true }
        if change.references.values.contains(where: { $0.clock > clock }) { return true }
        return change.members.values.contains { $0.contains { $0.clock > clock } }
    }

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

    /// The duplicates this device removed in favour of `winner` (by their ``SyncMetadata/loser``
    /// marks).
    func losers(favouring winner: ObjectID) throws -> [ObjectID] {
        var losers: [ObjectID] = []
        try store.enumerateSyncMetadata(in: SyncMetadata.losers(favouring: winner), batchSize: 500) { batch in
            for entry in batch {
                guard let name = SyncMetadata.lastRecord(of: entry.name),
                    let loser = Self.objectID(String(name), entity: nil)
                else { continue }
                losers.append(loser)
            }
        }
        return losers
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
        let schema = coordinator.schema
        func stored(_ id: ObjectID) throws -> RecordClocks {
            if let known = clocks[id] { return known }
            return Self.clocks(of: id, in: try store.syncMetadata([SyncMetadata.recordClocks(id)]))
        }
        var state = try stored(loser)
        guard let entity = schema.entity(loser.entity) else { return }
        let removedFor: ObjectID
        if let removal = state.removedAsDuplicate {
            removedFor = removal.winner
            state.removedAsDuplicate = nil
            var record = state.ghost ?? Record(id: loser)
            state.ghost = nil
            if state.isAlive || (state.created == nil && state.deleted == nil) {
                clocks[loser] = state
                try insertImported(record, entity: entity, in: context)
            } else {
                // Deleted meanwhile: the references that name it go back to it all the same, as on
                // every device that never removed it (validation then sees a deleted target).
                if let deleted = state.deleted { Self.forget(writesUpTo: deleted, in: &record, state: state) }
                state.ghost = record.values.isEmpty && record.toOne.isEmpty && record.toMany.isEmpty ? nil : record
                clocks[loser] = state
            }
        } else if let winner, state.isAlive {
            removedFor = winner
        } else {
            return
        }
        context.removeSyncMetadata(SyncMetadata.redirect(loser), in: store)
        context.removeSyncMetadata(SyncMetadata.loser(winner: removedFor, loser: loser), in: store)
        // Where the winner stands now (it may have lost in turn).
        var standIns: Set<ObjectID> = [removedFor]
        if let further = try replacement(forMissing: removedFor) { standIns.insert(further) }
        // The records whose references were moved off it: those stored as moved, and those this
        // import moved before the removal was undone (in this save, or its clocks).
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
        for holder in holders.sorted() {
            guard let holderEntity = schema.entity(holder.entity) else { continue }
            var holderClocks = try stored(holder)
            // A holder removed as a duplicate in turn keeps its references in its ghost: they go
            // back there, so that it comes back (or its winner merges it) as elsewhere.
            let stored = try context.record(with: holder)
            guard var held = stored ?? holderClocks.ghost.flatMap({ holderClocks.removedAsDuplicate != nil ? $0 : nil })
            else { continue }
            let before = held
            for (name, target) in holderClocks.relinked ?? [:] where target == loser {
                held.toOne[name] = loser
                holderClocks.relinked?[name] = nil
            }
            if holderClocks.relinked?.isEmpty == true { holderClocks.relinked = nil }
            for relationship in holderEntity.relationships
            where relationship.isToMany && schema.ownsRelationship(entity: holderEntity.name, relationship.name) {
                let states = holderClocks.members[relationship.name] ?? [:]
                guard states[loser.description]?.present == true,
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
                continue
            }
            holderClocks.ghost = held
            clocks[holder] = holderClocks
            // A removed duplicate whose reference changed comes back, as after a write to it:
            // what its winner took from it (the relinked target) goes back too, and the import
            // decides again.
            guard held != before, let removal = holderClocks.removedAsDuplicate else { continue }
            try undoRemoval(of: holder, in: context, clocks: &clocks)
            if try hasPremerge(removal.winner, clocks: clocks) {
                try undoRemovals(favouring: removal.winner, in: context, clocks: &clocks)
            }
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

    /// The duplicates removed on this device in favour of `winners` (and of those in turn), with
    /// their clocks, leaving out `excluded`.
    func duplicatesRemoved(
        favouring winners: [ObjectID],
        except excluded: Set<ObjectID>
    ) throws -> [(ObjectID, RecordClocks)] {
        let unique = Set(coordinator.policies.uniqueEntities)
        var pending = winners.filter { unique.contains($0.entity) }
        var seen = excluded
        var found: [(ObjectID, RecordClocks)] = []
        while let winner = pending.popLast() {
            for loser in try losers(favouring: winner).sorted() where seen.insert(loser).inserted {
                let clocks = Self.clocks(of: loser, in: try store.syncMetadata([SyncMetadata.recordClocks(loser)]))
                guard clocks.removedAsDuplicate != nil else { continue }
                found.append((loser, clocks))
                pending.append(loser)
            }
        }
        return found
    }

    /// Notes, in a local commit, the winners of removed duplicates among `written` (the records
    /// it writes or deletes, as its log says): the next import undoes those removals and decides
    /// again, as every other device does when the log arrives.
    func noteChangedWinners(_ written: [ObjectID], in changes: inout StoreChanges) throws {
        let unique = Set(coordinator.policies.uniqueEntities)
        guard !unique.isEmpty else { return }
        let touched = written.filter { unique.contains($0.entity) }
        for id in touched where try store.hasSyncMetadata(in: SyncMetadata.losers(favouring: id)) {
            changes.mark(SyncMetadata.reconsider(id))
        }
    }

    /// Undoes the removals in favour of the winners local saves changed, in one import save that
    /// decides again. Runs under the sync lock, before an import applies logs.
    func reconsiderChangedWinners() throws {
        var winners: [(key: SyncMetadataKey<Void>, id: ObjectID)] = []
        try store.enumerateSyncMetadata(in: SyncMetadata.reconsider, batchSize: 500) { batch in
            for entry in batch {
                guard let id = Self.objectID(String(entry.suffix), entity: nil) else {
                    continue
                }
                winners.append((entry.key, id))
            }
        }
        guard !winners.isEmpty else { return }
        let context = ObjectContext(coordinator: coordinator, origin: .import, name: "sync duplicates")
        var clocks: [ObjectID: RecordClocks] = [:]
        for winner in winners {
            try undoRemovals(favouring: winner.id, in: context, clocks: &clocks)
            context.removeSyncMetadata(winner.key, in: store)
        }
        for (id, state) in clocks { try context.setSyncMetadata(SyncMetadata.recordClocks(id), state, in: store) }
        try context.save()
    }
}
