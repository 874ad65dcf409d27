import Foundation
import Persistence

/// Elements that stand for removed duplicates, and what a deletion ends of them.
///
/// A to-many element written to name a record this device removed as a duplicate is held as
/// that record's winner (a stand-in); its clock stays under the element written. Whatever asks
/// which writes an element came from (a deletion ending an incarnation, say) follows the stand-in
/// back to those writes, as every device that never removed the duplicate sees them.
extension DuplicateLedger {
    /// For those of `targets` removed here as duplicates, the winner each stands for now
    /// (following a winner that lost in turn); the others are left out.
    func winners(of targets: Set<ObjectID>) throws -> [ObjectID: ObjectID] {
        var found: [ObjectID: ObjectID] = [:]
        var asking = targets
        for _ in 0..<8 where !asking.isEmpty {
            let entries = try store.syncMetadata(asking.map { SyncMetadata.redirect($0) })
            var next = Set<ObjectID>()
            for id in asking {
                guard let text = entries[SyncMetadata.redirect(id)],
                    let winner = Self.objectID(text, entity: id.entity)
                else { continue }
                found[id] = winner
                next.insert(winner)
            }
            asking = next.subtracting(found.keys)
        }
        // Chains end at the last winner.
        for id in found.keys {
            var end = found[id]!
            var hops = 0
            while let further = found[end], hops < 8 {
                end = further
                hops += 1
            }
            found[id] = end
        }
        return found
    }

    /// `held`, the elements a record holds in one to-many relationship, without those the
    /// incarnation that `deleted` ended wrote: an element whose write (in `writes`, the
    /// relationship's element clocks) is no newer than the deletion, or that stands here for a
    /// removed duplicate written no later, unless a newer write holds it too. An element no write
    /// names (in the store before sync) stays when `keepingUnwritten`.
    func elements(
        _ held: Set<ObjectID>,
        writtenAfter deleted: SyncClock,
        writes: [String: RecordClocks.MemberClock],
        keepingUnwritten: Bool
    ) throws -> Set<ObjectID> {
        var written: [ObjectID: RecordClocks.MemberClock] = [:]
        for (text, write) in writes {
            if let id = Self.objectID(text, entity: nil) { written[id] = write }
        }
        // Only an element written present and not held itself can be held as its winner.
        let standsFor = Set(written.filter { $0.value.present && !held.contains($0.key) }.keys)
        let winners = standsFor.isEmpty ? [:] : try winners(of: standsFor)
        var newer = Set<ObjectID>()
        var older = Set<ObjectID>()
        for (id, write) in written {
            let holding = winners[id] ?? id
            if write.clock > deleted {
                newer.insert(holding)
            } else {
                older.insert(holding)
            }
        }
        return held.filter { newer.contains($0) || (keepingUnwritten && !older.contains($0)) }
    }

    /// Drops from `ghost` (a record not alive: what waits for its creation, or what a removed
    /// duplicate held) the writes no newer than `deleted`: they belong to an incarnation that is
    /// gone.
    func forget(writesUpTo deleted: SyncClock, in ghost: inout Record, state: RecordClocks) throws {
        for key in ghost.values.keys where state.properties[key].map({ $0 <= deleted }) ?? true {
            ghost.values[key] = nil
        }
        for key in ghost.toOne.keys where state.properties[key].map({ $0 <= deleted }) ?? true {
            ghost.toOne[key] = nil
        }
        for (key, set) in ghost.toMany {
            let kept = try elements(
                set,
                writtenAfter: deleted,
                writes: state.members[key] ?? [:],
                keepingUnwritten: false
            )
            ghost.toMany[key] = kept.isEmpty ? nil : kept
        }
    }
}
