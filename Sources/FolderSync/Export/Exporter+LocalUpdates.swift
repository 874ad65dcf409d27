import Foundation
import Persistence

/// How a local save's updates become logged changes.
extension Exporter {
    /// The change a log carries for `update` (of the record the store holds as `stored`),
    /// stamped `stamp`, with `clocks` advanced to match; `nil` when it writes nothing a log
    /// carries (only derived sides). Elements that stand here for the winner of their removed
    /// duplicate (logged as written, or gone from the set to that winner) are added to
    /// `relinked`, for the commit to note.
    func loggedUpdate(
        _ update: RecordUpdate,
        stored: Record?,
        clocks: inout RecordClocks,
        stamp: SyncClock,
        relinked: inout [ObjectID]
    ) throws -> SyncChange? {
        let schema = coordinator.schema
        guard let entity = schema.entity(update.id.entity) else { return nil }
        var change = SyncChange(id: update.id)
        for (key, value) in update.values {
            change.values[key] = ClockedValue(value: value, clock: stamp)
            clocks.properties[key] = stamp
        }
        for (key, target) in update.toOne where schema.ownsRelationship(entity: entity.name, key) {
            change.references[key] = ClockedReference(target: target, clock: stamp)
            clocks.properties[key] = stamp
            clocks.relinked?[key] = nil
            if clocks.relinked?.isEmpty == true { clocks.relinked = nil }
        }
        for (key, targets) in update.toMany where schema.ownsRelationship(entity: entity.name, key) {
            let before = stored?.toMany[key] ?? []
            let written = update.writtenMembers[key] ?? []
            // Elements the app added that the save took to the winner of their removed duplicate
            // (another process's import removed them after this save read them): the log
            // carries the element written, as an import's element that stands for its winner,
            // and not the winner, which only stands for it here.
            let unheld = written.subtracting(targets).subtracting(before)
            let redirected =
                unheld.isEmpty ? [:] : try duplicates.winners(of: unheld).filter { targets.contains($0.value) }
            relinked += redirected.keys.sorted()
            let standingIn = Set(redirected.values).subtracting(written).subtracting(before)
            var members: [ClockedMember] = []
            for target in targets.subtracting(before).subtracting(standingIn).sorted() {
                members.append(ClockedMember(target: target, present: true, clock: stamp))
            }
            // Elements that left the set for the winner of their removed duplicate, which it holds
            // (the save's validation took a reference to a removed duplicate to its winner), are
            // not removals: the winner stands for them here, as on the devices that removed it.
            let leaving = before.subtracting(targets)
            let unwritten = leaving.subtracting(written)
            let redirectedAway =
                unwritten.isEmpty ? [:] : try duplicates.winners(of: unwritten).filter { targets.contains($0.value) }
            relinked += redirectedAway.keys.sorted()
            for target in leaving.sorted() where redirectedAway[target] == nil {
                members.append(ClockedMember(target: target, present: false, clock: stamp))
            }
            // Elements the app set explicitly where the store already agreed are writes too.
            for target in written.intersection(targets).intersection(before).sorted() {
                members.append(ClockedMember(target: target, present: true, clock: stamp))
            }
            for target in unheld.sorted() {
                members.append(ClockedMember(target: target, present: redirected[target] != nil, clock: stamp))
            }
            // Elements that stand here for the winner of their removed duplicate go with it.
            members += try duplicates.standIns(leaving: targets, before: before, states: clocks.members[key]).map {
                ClockedMember(target: $0, present: false, clock: stamp)
            }
            guard !members.isEmpty else { continue }
            change.members[key] = members
            for member in members {
                clocks.members[key, default: [:]][member.target.description] = .init(
                    present: member.present,
                    clock: stamp
                )
            }
        }
        guard !change.values.isEmpty || !change.references.isEmpty || !change.members.isEmpty else { return nil }
        return change
    }

    /// Updates of records that another process's import removed as duplicates after this save
    /// read them: the store does not hold them, but each is a newer write, as on every device
    /// that removed the record when the log arrives. It is logged, kept in the record's ghost,
    /// and the next import undoes the removal (the record comes back with it) and decides again.
    func logUpdatesOfRemovedDuplicates(
        _ updates: [RecordUpdate],
        entries: SyncMetadataSnapshot,
        into plan: inout ExportPlan
    ) throws {
        let schema = coordinator.schema
        for update in updates {
            var clocks = Self.clocks(of: update.id, in: entries)
            var relinked: [ObjectID] = []
            guard let removal = clocks.removedAsDuplicate, let ghost = clocks.ghost,
                let entity = schema.entity(update.id.entity),
                let change = try loggedUpdate(
                    update,
                    stored: ghost,
                    clocks: &clocks,
                    stamp: plan.stamp,
                    relinked: &relinked
                )
            else { continue }
            for target in relinked { plan.noteRelinked(target, in: update.id) }
            clocks.ghost = DuplicateLedger.owningSides(of: update.applied(to: ghost), entity: entity, schema: schema)
            plan.log(change, clocks: clocks)
            plan.reconsider(removal.winner)
        }
    }
}
