import Foundation
import Persistence

/// How an imported change merges into what the store holds: the merge rules.
struct RecordMerger: SyncPart {
    let context: SyncContext
    let duplicates: DuplicateLedger

    /// Merges one change into the context: last writer wins per attribute, per owning to-one
    /// relationship and per to-many element. A record exists when its latest creation is newer
    /// than its latest deletion: a deletion beats every write, and only a newer creation (of a
    /// deterministic id, made again after the deletion was seen) brings the id back, with none
    /// of the earlier incarnation's writes. Writes that arrive before the record's creation wait
    /// in its clocks (a "ghost") and join it when it arrives; those no newer than a deletion are
    /// dropped.
    /// Whether `change` deletes the record `state` describes: its deletion is not older than the
    /// record's latest creation (its own, or the change's).
    static func deletesForGood(_ change: SyncChange, _ state: RecordClocks) -> Bool {
        guard let deleted = change.deleted else { return false }
        guard let created = [state.created, change.created].compactMap({ $0 }).max() else { return true }
        return deleted >= created
    }

    func applyChange(
        _ change: SyncChange,
        in context: ObjectContext,
        clocks: inout [ObjectID: RecordClocks],
        entries: SyncMetadataSnapshot,
        redirects: [ObjectID: ObjectID] = [:]
    ) throws {
        let schema = coordinator.schema
        guard let entity = schema.entity(change.id.entity) else { return }
        var state = try reconsiderRemoval(
            change,
            clocks[change.id] ?? Self.clocks(of: change.id, in: entries),
            in: context,
            clocks: &clocks
        )
        // A removed duplicate that came back in this import is not redirected any more.
        let redirects = redirects.filter { clocks[$0.key].map { $0.removedAsDuplicate != nil } ?? true }
        for target in DuplicateLedger.targets(of: change) where redirects[target] != nil {
            try context.setSyncMetadata(SyncMetadata.relinked(target: target, record: change.id), (), in: store)
        }
        // A write to a winner may end its likeness with the duplicates removed in its favour.
        if coordinator.policies.uniquenessPolicy(for: entity.name) != nil {
            try duplicates.undoRemovals(favouring: change.id, in: context, clocks: &clocks)
            state.clearPremerge()
        }
        defer { clocks[change.id] = state }
        // The record's values that have no clock of their own came with this creation.
        let creation = state.created
        if let created = change.created {
            clock.observe(created)
            state.created = max(state.created ?? created, created)
        }
        if let deleted = change.deleted {
            clock.observe(deleted)
            state.deleted = max(state.deleted ?? deleted, deleted)
        }
        let existing = try context.record(with: change.id)
        // A record with no history at all was in the store before sync (its join exports it).
        let predates = state.created == nil && state.deleted == nil && existing != nil
        guard state.isAlive || predates else {
            // Deleted (and not created since), or not created yet.
            if existing != nil { try context.deleteWithoutRules(change.id) }
            // Writes newer than the deletion that the record held wait with the others.
            var ghost = state.ghost ?? existing ?? Record(id: change.id)
            merge(change, into: &ghost, state: &state, entity: entity, creation: creation, redirects: redirects)
            // (A removed duplicate's ghost is the record itself: nothing in it is forgotten.)
            if let deleted = state.deleted, state.removedAsDuplicate == nil {
                try duplicates.forget(writesUpTo: deleted, in: &ghost, state: state)
            }
            state.ghost = ghost.values.isEmpty && ghost.toOne.isEmpty && ghost.toMany.isEmpty ? nil : ghost
            return
        }
        var record = existing ?? state.ghost ?? Record(id: change.id)
        merge(change, into: &record, state: &state, entity: entity, creation: creation, redirects: redirects)
        if let deleted = state.deleted {
            try dropEarlierIncarnation(
                of: &record,
                deletedAt: deleted,
                state: state,
                entity: entity,
                creation: creation
            )
        }
        if existing != nil {
            try context.update(record)
            return
        }
        state.ghost = nil
        // Derived sides come from the owners that already point here.
        try duplicates.insertImported(record, entity: entity, in: context)
    }

    /// A newer write undoes this device's removal of the record as a duplicate; so does a
    /// deletion of it, however old (a deletion beats every write: the record is no duplicate of
    /// anything on the devices that never removed it, and the references moved off it name it
    /// again, as there). Returns the record's clocks after that.
    private func reconsiderRemoval(
        _ change: SyncChange,
        _ state: RecordClocks,
        in context: ObjectContext,
        clocks: inout [ObjectID: RecordClocks]
    ) throws -> RecordClocks {
        guard let removal = state.removedAsDuplicate,
            DuplicateLedger.hasWrite(in: change, newerThan: removal.newest) || Self.deletesForGood(change, state)
        else { return state }
        clocks[change.id] = state
        try duplicates.undoRemoval(of: change.id, in: context, clocks: &clocks)
        // A winner a policy's merge changed goes back as it was, with all its removals: the
        // import's save merges again what is still alike.
        if try duplicates.hasPremerge(removal.winner, clocks: clocks) {
            try duplicates.undoRemovals(favouring: removal.winner, in: context, clocks: &clocks)
        }
        return clocks[change.id] ?? state
    }

    /// A record made again after its deletion: an earlier incarnation's values and elements do
    /// not belong to this one (a creation from an older schema does not carry every attribute).
    /// Elements go too, also those held here for a removed duplicate written before it.
    private func dropEarlierIncarnation(
        of record: inout Record,
        deletedAt deleted: SyncClock,
        state: RecordClocks,
        entity: EntityDescription,
        creation: SyncClock?
    ) throws {
        let schema = coordinator.schema
        for attribute in entity.attributes {
            if let stamp = state.properties[attribute.name] ?? creation, stamp <= deleted {
                record[attribute.name] = .null
            }
        }
        for relationship in entity.relationships
        where !relationship.isToMany && schema.ownsRelationship(entity: entity.name, relationship.name) {
            if let stamp = state.properties[relationship.name] ?? creation, stamp <= deleted {
                record.toOne[relationship.name] = nil
            }
        }
        for (key, set) in record.toMany {
            guard let writes = state.members[key] else { continue }
            let kept = try duplicates.elements(set, writtenAfter: deleted, writes: writes, keepingUnwritten: true)
            record.toMany[key] = kept.isEmpty ? nil : kept
        }
    }

    /// Applies the writes of `change` to `record` that are newer than what `state` knows (a
    /// property without a clock of its own holds what `creation` wrote); writes no newer than
    /// the record's latest deletion are ignored.
    private func merge(
        _ change: SyncChange,
        into record: inout Record,
        state: inout RecordClocks,
        entity: EntityDescription,
        creation: SyncClock?,
        redirects: [ObjectID: ObjectID]
    ) {
        let floor = state.deleted
        // A write counts when its stamp is newer than what is known; at an equal stamp (two
        // copies of one store, started from one stored clock) when `winsTie` says so, so that
        // every device keeps the same one whichever it met first.
        func counts(_ write: SyncClock, over known: SyncClock?, winsTie: @autoclosure () -> Bool) -> Bool {
            clock.observe(write)
            if let floor, write <= floor { return false }
            guard let known else { return true }
            return write > known || (write == known && winsTie())
        }
        for (key, write) in change.values
        where entity.attribute(key) != nil
            && counts(
                write.clock,
                over: state.properties[key] ?? creation,
                winsTie: write.value.winsTie(over: state.written(key, in: record))
            )
        {
            record[key] = write.value
            state.properties[key] = write.clock
        }
        for (key, write) in change.references
        where entity.relationship(key)?.isToMany == false
            && counts(
                write.clock,
                over: state.properties[key] ?? creation,
                winsTie: Self.winsTie(write.target, over: state.writtenTarget(key, in: record))
            )
        {
            // A target removed here as a duplicate stands for its winner; the clocks remember it.
            let target = write.target.map { redirects[$0] ?? $0 }
            record.toOne[key] = target
            state.properties[key] = write.clock
            if let original = write.target, target != original {
                state.relinked = (state.relinked ?? [:]).merging([key: original]) { $1 }
            } else {
                state.relinked?[key] = nil
                if state.relinked?.isEmpty == true { state.relinked = nil }
            }
        }
        for (key, members) in change.members where entity.relationship(key)?.isToMany == true {
            var set = record.toMany[key] ?? []
            for member in members {
                let known = state.members[key]?[member.target.description]
                // At an equal stamp a removal wins.
                guard counts(member.clock, over: known?.clock, winsTie: !member.present && known?.present == true)
                else { continue }
                state.members[key, default: [:]][member.target.description] = .init(
                    present: member.present,
                    clock: member.clock
                )
                // An element removed here as a duplicate stands for its winner; its clock is kept
                // under the element written.
                let actual = redirects[member.target] ?? member.target
                if member.present {
                    set.insert(actual)
                } else if actual == member.target || state.members[key]?[actual.description]?.present != true {
                    set.remove(actual)
                }
            }
            record.toMany[key] = set.isEmpty ? nil : set
        }
    }

    /// Whether `target` wins over `known` when the two were written with one stamp: the greater
    /// id, in its description's UTF-8 bytes (none before any).
    static func winsTie(_ target: ObjectID?, over known: ObjectID?) -> Bool {
        guard let target else { return false }
        guard let known else { return true }
        return known.description.utf8.lexicographicallyPrecedes(target.description.utf8)
    }
}

extension RecordClocks {
    /// The value the write `properties[name]` names (or the creation) gave attribute `name`: the
    /// record's, unless a duplicate's merge changed it since.
    func written(_ name: String, in record: Record) -> Value {
        if let kept = premerge?[name], kept.clock == properties[name] { return kept.value }
        return record[name]
    }

    /// The target the write `properties[name]` names (or the creation) gave owning to-one
    /// `name`: the record's, unless it stands for a removed duplicate or a merge changed it since.
    func writtenTarget(_ name: String, in record: Record) -> ObjectID? {
        if let original = relinked?[name] { return original }
        if let kept = premergeRelationships?[name], kept.elements.isEmpty, kept.clock == properties[name] {
            return kept.target
        }
        return record.toOne[name]
    }
}

extension Value {
    /// Whether this value wins over `known` when the two were written with one stamp: a total
    /// order, the same on every device. Kinds order as declared (`null` first); within a kind,
    /// numbers by value (doubles in IEEE total order), strings, data and UUIDs by their bytes,
    /// dates by time.
    func winsTie(over known: Value) -> Bool {
        func rank(_ value: Value) -> Int {
            switch value {
            case .null: 0
            case .string: 1
            case .integer: 2
            case .double: 3
            case .boolean: 4
            case .date: 5
            case .data: 6
            case .uuid: 7
            }
        }
        switch (self, known) {
        case (.double(let mine), .double(let theirs)):
            return !mine.isTotallyOrdered(belowOrEqualTo: theirs)
        case (.date(let mine), .date(let theirs)):
            let (a, b) = (mine.timeIntervalSinceReferenceDate, theirs.timeIntervalSinceReferenceDate)
            return !a.isTotallyOrdered(belowOrEqualTo: b)
        default:
            if rank(self) != rank(known) { return rank(self) > rank(known) }
            return compare(to: known) == .orderedDescending
        }
    }
}
