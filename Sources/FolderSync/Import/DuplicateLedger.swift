import Foundation
import Persistence

/// The duplicates this device removed (by its uniqueness policies), and how a removal is undone.
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
struct DuplicateLedger: SyncPart {
    let context: SyncContext

    /// Whether `id`, a relationship target the store does not hold, was deleted (a tombstone, or
    /// a duplicate removed by policy) or has not arrived: sync delivers records in any order
    /// across devices, and a reference may come before its target.
    func state(ofMissing id: ObjectID) throws -> MissingTargetState? {
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
    func replacement(forMissing id: ObjectID) throws -> ObjectID? {
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

    /// The duplicates removed on this device in favour of `winners` (and of those in turn), with
    /// their clocks, leaving out `excluded`.
    func removed(
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
}
