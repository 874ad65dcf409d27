import FolderSync
import Foundation
import Persistence
import Synchronization

/// What the simulated devices' local saves did and what repairs acted on, to check the
/// invariants against: no acknowledged save lost, no deleted record back, no repair of a
/// reference whose target nobody deleted, no duplicate of an entity with a uniqueness policy.
///
/// Every save is kept with the device and step that made it and whether the device was away
/// (paused or disabled) then. A save that was never exported and that its device then gave up by
/// choice (it replaced its data with the container's) or lost (its store was lost) promises
/// nothing: its creations are not expected, and its deletions may be undone.
public final class SimulationLedger: Sendable {
    /// One local save.
    struct Save {
        var device: Int
        var step: UInt64
        /// Made while its device was paused or disabled.
        var away: Bool
        /// Given up (never exported, then replaced or lost with the device's store).
        var givenUp = false
        /// Given up after it had reached the container (its device then replaced its data with a
        /// container another device replaced): a device that applied it and merges keeps it.
        var exportedBeforeGivenUp = false
    }

    private struct State {
        var saves: [Save] = []
        var created: [ObjectID: [Int]] = [:]
        var deleted: [ObjectID: [Int]] = [:]
        var repaired: [(record: ObjectID, target: ObjectID, state: MissingTargetState?)] = []
        /// Records made anew by a device's data becoming the container's (a replaced container,
        /// or a merge into one): the save number after which their deletions count.
        var revived: [ObjectID: Int] = [:]
        /// Records a device's replacement of the container left out (its data did not hold
        /// them): the save number up to which their creations promise nothing.
        var superseded: [ObjectID: Int] = [:]
        /// Every attribute a save wrote (set explicitly, or in a creation), with the save's
        /// clock: the value of the write with the greatest clock is what every device must end with.
        var writes: [Field: [Write]] = [:]
        /// To-many relationships a save changed without the app setting them (a fold moved
        /// them): their elements are not checked against the last writes.
        var policyMoved: Set<Field> = []
        /// The clock each save stamped its writes with (saves that logged something).
        var saveClocks: [Int: SyncClock] = [:]
        /// The save numbers at which a device replaced the container with its data: writes made
        /// before the last one may be given up by that choice.
        var replacements: [Int] = []
    }

    struct Field: Hashable {
        var id: ObjectID
        var key: String
    }

    struct Write {
        var value: Value
        var clock: SyncClock
        var save: Int
    }
    private let state = Mutex(State())

    /// Notes the records a local save (by `device`, at `step`, `away` or not) created and
    /// deleted; returns the save's number (for ``giveUp(_:)``). `folded` are the duplicates the
    /// device had removed in favour of records the save deleted: sync deletes them too.
    @discardableResult
    func record(
        _ changes: ChangeSet,
        folded: [ObjectID] = [],
        step: UInt64,
        device: Int = 0,
        away: Bool = false
    ) -> Int {
        state.withLock { state in
            let index = state.saves.count
            state.saves.append(Save(device: device, step: step, away: away))
            for record in changes.inserted { state.created[record.id, default: []].append(index) }
            for id in changes.deleted + folded { state.deleted[id, default: []].append(index) }
            return index
        }
    }

    /// Notes the attributes save number `save` wrote with `clock`: those `explicit` names (what
    /// the app set, even to the value the store held) and every attribute of the records it
    /// created (`created`, as committed).
    ///
    /// Relationships the save changed that the app did not set (a duplicate folded into its
    /// winner moves its references over, in `updated` and `updatedKeys`) are writes too: a to-one
    /// with the target it has after the save; the elements of a to-many are not told apart, so
    /// the relationship is left out of the check from then on (``policyMoved``).
    func recordWrites(
        _ explicit: [SyncSimulator.AttributeWrite],
        created: [Record],
        updated: [Record] = [],
        updatedKeys: [ObjectID: Set<String>] = [:],
        clock: SyncClock,
        save: Int
    ) {
        var implicit: [SyncSimulator.AttributeWrite] = []
        var moved: [Field] = []
        let written = Set(explicit.map { Field(id: $0.id, key: $0.key) })
        for record in updated {
            let relationships = SyncSimulator.schema.entity(record.id.entity)?.relationships ?? []
            for key in updatedKeys[record.id] ?? [] {
                guard let relationship = relationships.first(where: { $0.name == key }) else { continue }
                if relationship.isToMany {
                    if !written.contains(where: { $0.id == record.id && $0.key.hasPrefix(key + "[") }) {
                        moved.append(Field(id: record.id, key: key))
                    }
                } else if !written.contains(Field(id: record.id, key: SyncSimulator.AttributeWrite.toOneKey(key))) {
                    implicit.append(
                        SyncSimulator.AttributeWrite(id: record.id, relationship: key, target: record.toOne[key])
                    )
                }
            }
        }
        state.withLock { state in
            state.saveClocks[save] = clock
            state.policyMoved.formUnion(moved)
            for write in implicit {
                state.writes[Field(id: write.id, key: write.key), default: []].append(
                    Write(value: write.value, clock: clock, save: save)
                )
            }
            for write in explicit {
                state.writes[Field(id: write.id, key: write.key), default: []].append(
                    Write(value: write.value, clock: clock, save: save)
                )
            }
            for record in created {
                var made = record.values.map {
                    SyncSimulator.AttributeWrite(id: record.id, key: $0.key, value: $0.value)
                }
                for (key, target) in record.toOne
                where SyncSimulator.schema.ownsRelationship(entity: record.id.entity, key) {
                    made.append(SyncSimulator.AttributeWrite(id: record.id, relationship: key, target: target))
                }
                // (A derived side is a function of the owning one: only what the record owns.)
                for (key, members) in record.toMany
                where SyncSimulator.schema.ownsRelationship(entity: record.id.entity, key) {
                    for member in members {
                        made.append(
                            SyncSimulator.AttributeWrite(
                                id: record.id,
                                relationship: key,
                                member: member,
                                isMember: true
                            )
                        )
                    }
                }
                for write in made {
                    state.writes[Field(id: write.id, key: write.key), default: []].append(
                        Write(value: write.value, clock: clock, save: save)
                    )
                }
            }
        }
    }

    /// Every record a save created, in id order.
    var createdRecords: [ObjectID] { state.withLock { $0.created.keys.sorted() } }

    /// The saves `device` made, by number.
    func saves(of device: Int) -> [Int] {
        state.withLock { state in state.saves.indices.filter { state.saves[$0].device == device } }
    }

    /// Marks `saves` as given up: they were never exported, and their device replaced its data
    /// with the container's (or lost its store). `exported` are those whose logs had reached
    /// the container all the same (a device that applies them keeps what they deleted).
    func giveUp(_ saves: [Int], exported: Set<Int> = []) {
        state.withLock { state in
            for index in saves {
                if !state.saves[index].givenUp, exported.contains(index) {
                    state.saves[index].exportedBeforeGivenUp = true
                }
                state.saves[index].givenUp = true
            }
        }
    }

    /// Marks every save of `device` so far as given up: it replaced its data with that of a
    /// container another device replaced meanwhile.
    /// `exported` are those that had reached the container.
    func giveUpEverySave(of device: Int, exported: Set<Int> = []) {
        state.withLock { state in
            for index in state.saves.indices where state.saves[index].device == device {
                if !state.saves[index].givenUp, exported.contains(index) {
                    state.saves[index].exportedBeforeGivenUp = true
                }
                state.saves[index].givenUp = true
            }
        }
    }

    /// Notes that `ids`, which `device` holds at `step`, went into a container as new records
    /// (the device replaced the container with its data, or merged into a replaced one): a
    /// deletion made before now no longer rules them out.
    func revive(_ ids: [ObjectID], step: UInt64, device: Int) {
        state.withLock { state in
            let index = state.saves.count
            state.saves.append(Save(device: device, step: step, away: false))
            for id in ids { state.revived[id] = index }
        }
    }

    /// Notes that device `index` replaced the container with its data, holding `ids` at `step`:
    /// they go into it as new records (``revive(_:step:device:)``), and every record created
    /// before now that it does not hold is gone by that choice (whoever deleted it, or whether
    /// that deletion is given up later), unless a device merges it back.
    func replaceContainer(holding ids: [ObjectID], step: UInt64, device: Int) {
        revive(ids, step: step, device: device)
        state.withLock { state in
            let index = state.saves.count - 1
            state.replacements.append(index)
            let held = Set(ids)
            for id in state.created.keys where !held.contains(id) { state.superseded[id] = index }
        }
    }

    /// Notes that a repair policy acted on `record`'s reference to `target`.
    func repaired(_ record: ObjectID, target: ObjectID, state targetState: MissingTargetState?) {
        state.withLock { $0.repaired.append((record, target, targetState)) }
    }

    /// What breaks the invariants, given every device's final records (empty when all hold).
    /// `replacement` answers, for a device and a record of an entity with a uniqueness policy
    /// missing there, the winner it was folded into as a duplicate (`FolderSync.replacement(forMissing:)`).
    /// `uniqueKeys` gives, for a record of an entity with a uniqueness policy, what makes two of
    /// them duplicates (`nil` for any other record).
    /// Deterministic ids, which several devices make and make again, are left out of the
    /// deletion check: their fate is decided by clocks, not by the order of the steps.
    public func violations(
        finalContents: [[Record]],
        deviceNames: [String],
        replacement: (Int, ObjectID) throws -> ObjectID? = { _, _ in nil },
        uniqueKeys: (Record) -> [Value]? = { _ in nil }
    ) rethrows -> [String] {
        let (saves, created, deleted, repaired, revived, superseded) = state.withLock {
            ($0.saves, $0.created, $0.deleted, $0.repaired, $0.revived, $0.superseded)
        }
        let (writes, lastReplacement, policyMoved, saveClocks) = state.withLock {
            ($0.writes, $0.replacements.max() ?? -1, $0.policyMoved, $0.saveClocks)
        }
        // The clocks of every deletion of each record, given up or not (it was made).
        var deletionClocks: [String: [SyncClock]] = [:]
        var deletedCounts: [String: Int] = [:]
        for (id, indices) in deleted {
            deletionClocks["\(id)"] = indices.compactMap { saveClocks[$0] }
            deletedCounts["\(id)"] = indices.count
        }
        let fieldsByRecord = Dictionary(grouping: writes.keys, by: \.id).mapValues { $0.map(\.key) }
        func kept(_ indices: [Int]?) -> [Int] { (indices ?? []).filter { !saves[$0].givenUp } }
        func describe(_ index: Int) -> String {
            let save = saves[index]
            return "step \(save.step) on device\(save.device)\(save.away ? " (away)" : "")"
        }
        var problems: [String] = []
        for (device, (contents, name)) in zip(finalContents, deviceNames).enumerated() {
            let present = Set(contents.map(\.id))
            for (id, indices) in created.sorted(by: { $0.key < $1.key }) where !present.contains(id) {
                let creations = kept(indices).filter { $0 > superseded[id] ?? -1 }
                guard let first = creations.first, kept(deleted[id]).isEmpty else { continue }
                // A deletion that reached the container before its device gave its data up lives on
                // in a device that applied it and then merged into a replaced container (its
                // tombstones go out with their clocks): it may stand, as it may be undone.
                if (deleted[id] ?? []).contains(where: { saves[$0].exportedBeforeGivenUp }) { continue }
                // A duplicate removed by policy: its winner stands for it (present, or deleted since).
                if let winner = try replacement(device, id), present.contains(winner) || !kept(deleted[winner]).isEmpty
                {
                    continue
                }
                problems.append("\(name) lost \(id), saved at \(describe(first)) and never deleted")
            }
            for (id, indices) in deleted.sorted(by: { $0.key < $1.key })
            where present.contains(id) && !Self.isDeterministic(id) {
                guard let first = kept(indices).first(where: { $0 > revived[id] ?? -1 }) else { continue }
                problems.append("\(name) holds \(id), deleted at \(describe(first))")
            }
            // Every property ends with the value of its last write, by the clocks the merge
            // orders writes by (explicit writes of a value the device's stale store held
            // included). Writes a device gave up promise nothing, and neither does a field
            // written before a replacement of the container (the replacing device's copy wins
            // over what it had not seen).
            // (Relationships too, but not where a policy moved them: a target deleted or folded
            // into a duplicate, a record repaired or that others were folded into.)
            var folded: Set<String> = []
            for id in created.keys where !present.contains(id) {
                guard let winner = try replacement(device, id) else { continue }
                folded.formUnion(["\(id)", "\(winner)"])
            }
            let held = Set(present.map { "\($0)" })
            let mended = Set(repaired.map(\.record))
            for record in contents where !Self.isDeterministic(record.id) {
                for key in (fieldsByRecord[record.id] ?? []).sorted()
                where record.values[key] != nil || key.hasPrefix("->") || key.hasSuffix("]") {
                    guard let all = writes[Field(id: record.id, key: key)],
                        !all.contains(where: { $0.save < lastReplacement })
                    else { continue }
                    let current = SyncSimulator.AttributeWrite.current(key, of: record)
                    if SyncSimulator.AttributeWrite.target(of: key, value: .null) != nil || key.hasPrefix("->") {
                        // A relationship: policies may have moved it.
                        guard !mended.contains(record.id), !folded.contains("\(record.id)"),
                            !policyMoved.contains(where: { $0.id == record.id && key.hasPrefix($0.key + "[") })
                        else { continue }
                        let targets =
                            all.compactMap { SyncSimulator.AttributeWrite.target(of: key, value: $0.value) }
                            + [SyncSimulator.AttributeWrite.target(of: key, value: current)].compactMap { $0 }
                        // A target folded, gone, or deleted (and made again) since the field's
                        // first write: the deletion took the reference away.
                        let first = all.map(\.clock).min()
                        func cleared(_ target: String) -> Bool {
                            guard let deletions = deletionClocks[target] else { return false }
                            // (A deletion whose clock is unknown may be any time.)
                            guard let first, deletions.count == deletedCounts[target] else { return true }
                            return deletions.contains { $0 >= first }
                        }
                        guard !targets.contains(where: { folded.contains($0) || !held.contains($0) || cleared($0) })
                        else { continue }
                    }
                    let kept = all.filter { !saves[$0.save].givenUp }
                    guard let newest = kept.map(\.clock).max() else { continue }
                    // (A write given up promises nothing: a newer one may still have gone out, in
                    // a baseline or a copy the simulation does not follow, and win.)
                    let last = all.filter { $0.clock == newest || ($0.clock > newest && saves[$0.save].givenUp) }
                    guard !last.contains(where: { $0.value == current }) else { continue }
                    let history = all.sorted { $0.clock < $1.clock }.map {
                        "\($0.value)@\($0.clock) \(describe($0.save))\(saves[$0.save].givenUp ? " given up" : "")"
                    }
                    problems.append(
                        "\(name): \(record.id).\(key) is \(current), not \(last[0].value), its last write (\(newest), \(describe(last[0].save))); writes: \(history.joined(separator: ", "))"
                    )
                }
            }
            var groups: [[Value]: [ObjectID]] = [:]
            for record in contents {
                if let key = uniqueKeys(record) {
                    groups[[.string(record.id.entity)] + key, default: []].append(record.id)
                }
            }
            for (key, ids) in groups.sorted(by: { $0.value[0] < $1.value[0] }) where ids.count > 1 {
                problems.append("\(name) holds duplicates \(ids.sorted()) (\(key))")
            }
        }
        // Any deletion, given up or not, explains a repair: it was made.
        for repair in repaired where deleted[repair.target] == nil {
            problems.append(
                "\(repair.record) was repaired for \(repair.target) (\(repair.state.map(\.rawValue) ?? "?")), which nobody deleted"
            )
        }
        return problems
    }

    /// The saves that created and deleted `id`, for a failure's message.
    public func history(of id: ObjectID) -> String {
        state.withLock { state in
            func describe(_ indices: [Int]?) -> String {
                (indices ?? []).map { index in
                    let save = state.saves[index]
                    return
                        "step \(save.step) on device\(save.device)\(save.away ? " away" : "")\(save.givenUp ? " given up" : "")"
                }.joined(separator: ", ")
            }
            return "\(id): created at [\(describe(state.created[id]))], deleted at [\(describe(state.deleted[id]))]"
        }
    }

    static func isDeterministic(_ id: ObjectID) -> Bool {
        (0..<3).contains { id == ObjectID.deterministic(entity: id.entity, name: "shared \($0)") }
    }
}
