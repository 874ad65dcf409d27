import Foundation
import Persistence

/// What merging duplicates changed in their winner, kept so that undoing the removals undoes it.
///
/// A uniqueness policy's `merge(_:into:in:)` and the framework (moving the loser's relationships
/// over, ending the winner's references to the loser) change the winner on the devices that
/// fold the duplicates. Another device may never fold them, so those changes are no writes: the
/// winner's clocks keep each changed attribute and owning relationship as it was, with its clock
/// then, and undoing the removals puts back what no write changed since.
extension DuplicateLedger {
    /// Adds to `state` what one merge step changed in a winner (`before`, `after`) that it does
    /// not hold yet: attributes, and owning relationships (a to-one's target, to-many elements).
    /// (Per step: a reference moved off another removed duplicate in the same save is a relink,
    /// kept by the holder's clocks, not part of the merge.)
    static func notePremerge(
        before: Record,
        after: Record,
        entity: EntityDescription,
        schema: Schema,
        in state: inout RecordClocks
    ) {
        var premerge = state.premerge ?? [:]
        for name in Set(before.values.keys).union(after.values.keys).sorted()
        where before[name] != after[name] && premerge[name] == nil {
            premerge[name] = .init(value: before[name], clock: state.properties[name])
        }
        state.premerge = premerge.isEmpty ? nil : premerge
        var relationships = state.premergeRelationships ?? [:]
        for relationship in entity.relationships where schema.ownsRelationship(entity: entity.name, relationship.name) {
            let name = relationship.name
            if relationship.isToMany {
                let (was, now) = (before.toMany[name] ?? [], after.toMany[name] ?? [])
                guard was != now else { continue }
                var kept = relationships[name] ?? .init()
                for element in was.symmetricDifference(now) where kept.elements[element.description] == nil {
                    kept.elements[element.description] = .init(
                        present: was.contains(element),
                        clock: state.members[name]?[element.description]?.clock
                    )
                }
                relationships[name] = kept
            } else if before.toOne[name] != after.toOne[name], relationships[name] == nil {
                relationships[name] = .init(target: before.toOne[name], clock: state.properties[name])
            }
        }
        state.premergeRelationships = relationships.isEmpty ? nil : relationships
    }

    /// Puts back in `record` what merges changed (``notePremerge(before:after:entity:schema:in:)``)
    /// where no write changed it since.
    static func restorePremerge(_ state: RecordClocks, in record: inout Record) {
        for (name, kept) in state.premerge ?? [:] where state.properties[name] == kept.clock {
            record[name] = kept.value
        }
        for (name, kept) in state.premergeRelationships ?? [:] {
            if kept.elements.isEmpty {
                if state.properties[name] == kept.clock { record.toOne[name] = kept.target }
                continue
            }
            var set = record.toMany[name] ?? []
            for (element, was) in kept.elements where state.members[name]?[element]?.clock == was.clock {
                guard let id = objectID(element, entity: nil) else { continue }
                if was.present { set.insert(id) } else { set.remove(id) }
            }
            record.toMany[name] = set.isEmpty ? nil : set
        }
    }

    /// Whether a policy's merge changed `winner` (its removals then go back together).
    func hasPremerge(_ winner: ObjectID, clocks: [ObjectID: RecordClocks]) throws -> Bool {
        let state =
            try clocks[winner]
            ?? Self.clocks(of: winner, in: store.syncMetadata([SyncMetadata.recordClocks(winner)]))
        return state.hasPremerge
    }
}
