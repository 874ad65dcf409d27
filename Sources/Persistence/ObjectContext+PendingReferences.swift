import Foundation

extension Notification.Name {
    /// Posted by a context whose save found references to records that have not arrived yet
    /// (``MissingTargetState/notArrived``) for the first time; `userInfo["violations"]` holds the
    /// ``ValidationViolation``s. They wait (``EntityPolicies/pendingReferenceTimeout``) before
    /// repair policies see them.
    public static let concordReferencesAwaitingTargets = Notification.Name("ConcordReferencesAwaitingTargets")
}

extension ObjectContext {
    /// What the save participants (the sync layer) know of `id`, a target no store holds:
    /// without an answer, a missing target is a deleted one.
    func missingTargetState(_ id: ObjectID) throws -> MissingTargetState {
        for participant in coordinator.saveParticipants {
            if let state = try participant.state(ofMissing: id) { return state }
        }
        return .deleted
    }

    /// The record a participant says replaced `target` (a removed duplicate's winner), when a
    /// store holds it.
    private func heldReplacement(forMissing target: ObjectID) throws -> ObjectID? {
        for participant in coordinator.saveParticipants {
            guard let winner = try participant.replacement(forMissing: target) else { continue }
            return try coordinator.store(forEntity: winner.entity).records(with: [winner]).isEmpty ? nil : winner
        }
        return nil
    }

    /// Under the commit's locks, after validation: the references this save adds to records of an
    /// entity with a uniqueness policy that no store holds any more (another process's import
    /// removed them as duplicates after this save validated) go to their winners, as validation
    /// would have sent them. Otherwise this device would keep a reference every other device
    /// reads as the winner.
    func redirectReferencesToLateRemovedDuplicates() throws {
        let unique = Set(coordinator.policies.uniqueEntities)
        guard !unique.isEmpty else { return }
        var added = Set<ObjectID>()
        func collect(_ record: Record, base: Record?) {
            for relationship in schema.entity(record.id.entity)?.relationships ?? []
            where unique.contains(relationship.destination) {
                let now = Self.targets(of: record, relationship)
                added.formUnion(base.map { now.subtracting(Self.targets(of: $0, relationship)) } ?? now)
            }
        }
        for record in inserted.values { collect(record, base: nil) }
        for pair in updated.values { collect(pair.current, base: pair.base) }
        added.subtract(inserted.keys)
        guard !added.isEmpty else { return }
        var held = Set<ObjectID>()
        for (entity, ids) in Dictionary(grouping: added, by: \.entity) {
            held.formUnion(try coordinator.store(forEntity: entity).records(with: ids).map(\.id))
        }
        var winners: [ObjectID: ObjectID] = [:]
        for target in added.subtracting(held).sorted() { winners[target] = try heldReplacement(forMissing: target) }
        guard !winners.isEmpty else { return }
        for id in Set(inserted.keys).union(updated.keys).sorted() {
            guard var record = try current(id) else { continue }
            let before = record
            for (name, target) in record.toOne { if let winner = winners[target] { record.toOne[name] = winner } }
            for (name, set) in record.toMany where !set.isDisjoint(with: winners.keys) {
                record.toMany[name] = Set(set.map { winners[$0] ?? $0 })
            }
            if record != before { try updateWithoutHooks(record) }
        }
    }

    /// Rewrites each reference `violations` find to a missing record that a participant says was
    /// replaced (a removed duplicate's winner, when it exists); returns whether it changed any.
    func redirectRemovedDuplicates(_ violations: [ValidationViolation]) throws -> Bool {
        var changed = false
        for violation in violations where violation.rule == .missingDestination && violation.targetState == .deleted {
            guard let target = violation.target, var record = try record(with: violation.object),
                let winner = try heldReplacement(forMissing: target)
            else { continue }
            if record.toOne[violation.property] == target { record.toOne[violation.property] = winner }
            if var set = record.toMany[violation.property], set.remove(target) != nil {
                set.insert(winner)
                record.toMany[violation.property] = set
            }
            try update(record)
            changed = true
        }
        return changed
    }
}

/// The references validation found waiting for targets that have not arrived, with when each was
/// first seen, kept in the metadata of the store that holds the referring record and committed
/// with the save that found them: a reference waits the same bound across launches.
struct PendingReferences {
    static let metadataKey = "concord.pendingReferences"

    let context: ObjectContext
    let now = Date()
    let timeout: Double
    /// "object.property>target" → first seen, per store.
    private var since: [ObjectIdentifier: (store: any PersistentStore, entries: [String: Double])] = [:]

    init(context: ObjectContext) throws {
        self.context = context
        let limit = context.coordinator.policies.pendingReferenceTimeout.components
        timeout = Double(limit.seconds) + Double(limit.attoseconds) / 1e18
        for store in context.coordinator.stores {
            let data = try store.metadataEntries(forKeys: [Self.metadataKey])[Self.metadataKey]
            let entries = data.flatMap { try? JSONDecoder().decode([String: Double].self, from: $0) } ?? [:]
            since[ObjectIdentifier(store)] = (store, entries)
        }
    }

    static func key(_ violation: ValidationViolation) -> String {
        "\(violation.object).\(violation.property)>\(violation.target?.description ?? "")"
    }

    private func firstSeen(_ violation: ValidationViolation) -> Double? {
        guard let store = try? context.coordinator.store(forEntity: violation.object.entity) else { return nil }
        return since[ObjectIdentifier(store)]?.entries[Self.key(violation)]
    }

    /// Whether repair policies may see this waiting reference now.
    func hasWaitedLongEnough(_ violation: ValidationViolation) -> Bool {
        guard let first = firstSeen(violation) else { return timeout <= 0 }
        return now.timeIntervalSince1970 - first >= timeout
    }

    /// Records the references that wait after this validation (and forgets those that no longer
    /// do), in the save; announces the new ones.
    func record(_ waiting: [ValidationViolation]) throws {
        var next: [ObjectIdentifier: [String: Double]] = [:]
        var fresh: [ValidationViolation] = []
        for violation in waiting {
            let store = try context.coordinator.store(forEntity: violation.object.entity)
            let first = firstSeen(violation)
            if first == nil { fresh.append(violation) }
            next[ObjectIdentifier(store), default: [:]][Self.key(violation)] = first ?? now.timeIntervalSince1970
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        for (key, entry) in since {
            let entries = next[key] ?? [:]
            guard entries != entry.entries else { continue }
            context.setMetadata(
                entries.isEmpty ? nil : try encoder.encode(entries),
                forKey: Self.metadataKey,
                in: entry.store
            )
        }
        if !fresh.isEmpty {
            context.coordinator.logger.info(
                "references wait for records that have not arrived",
                metadata: ["concord.references": "\(fresh.count)"]
            )
            NotificationCenter.default.post(
                name: .concordReferencesAwaitingTargets,
                object: context,
                userInfo: ["violations": fresh]
            )
        }
    }
}
