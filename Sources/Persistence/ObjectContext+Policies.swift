import Foundation

extension ObjectContext {
    /// Resolves the duplicates of `entities` (every entity with a ``UniquenessPolicy`` when
    /// `nil`) among the records this context sees, as the policies say: the same winner on every
    /// device that holds the same records. Runs automatically when an `.import` context saves.
    ///
    /// - Returns: the ids of the records removed as duplicates, in the order they were removed.
    @discardableResult
    public func resolveDuplicates(of entities: [String]? = nil) throws -> [ObjectID] {
        var removed: [ObjectID] = []
        for entity in entities ?? coordinator.policies.uniqueEntities {
            guard let policy = coordinator.policies.uniquenessPolicy(for: entity),
                let description = coordinator.schema.entity(entity)
            else { continue }
            let records = try fetch(FetchRequest(entity: entity))
            var groups: [[Value]: [Record]] = [:]
            for record in records {
                let key: [Value]?
                switch policy.uniqueness {
                case .singleton: key = []
                case .key(let attributes): key = attributes.map { record[$0] }
                case .custom(let function): key = function(record)
                }
                if let key { groups[key, default: []].append(record) }
            }
            // Groups in a fixed order (by winner), the same on every device: a loser's
            // relationships moved to one winner may name the loser of another group.
            let orderedGroups = groups.values.filter { $0.count > 1 }
                .map { $0.sorted { Self.precedes($0, $1, stamp: policy.creationStampAttribute) } }
                .sorted { $0[0].id < $1[0].id }
            for ordered in orderedGroups {
                let winnerID = ordered[0].id
                for loser in ordered.dropFirst() {
                    guard var winner = try record(with: winnerID), let loser = try record(with: loser.id) else {
                        continue
                    }
                    removedDuplicates[loser.id] = removedDuplicates[loser.id] ?? loser
                    let unmerged = winner
                    // The winner's own references to the loser end with it (before the loser's
                    // relationships move over: a to-one so emptied takes the loser's).
                    for relationship in description.relationships
                    where coordinator.schema.ownsRelationship(entity: entity, relationship.name) {
                        if relationship.isToMany {
                            winner.toMany[relationship.name]?.remove(loser.id)
                            if winner.toMany[relationship.name]?.isEmpty == true {
                                winner.toMany[relationship.name] = nil
                            }
                        } else if winner.toOne[relationship.name] == loser.id {
                            winner.toOne[relationship.name] = nil
                        }
                    }
                    try policy.merge(loser, into: &winner, in: self)
                    var emptied = loser
                    for relationship in description.relationships {
                        let targets = Self.targets(of: loser, relationship).subtracting([winnerID])
                        guard !targets.isEmpty else { continue }
                        for target in targets {
                            duplicateRelinks[target, default: [:]][relationship.inverse] =
                                duplicateRelinks[target]?[relationship.inverse] ?? loser.id
                        }
                        if relationship.isToMany {
                            winner.toMany[relationship.name, default: []].formUnion(targets)
                        } else if winner.toOne[relationship.name] == nil {
                            winner.toOne[relationship.name] = targets.first
                        }
                        emptied.toOne[relationship.name] = nil
                        emptied.toMany[relationship.name] = nil
                    }
                    winnerMerges[winnerID, default: []].append(WinnerMerge(before: unmerged, after: winner))
                    try update(emptied)
                    try update(winner)
                    try delete(loser.id)
                    removed.append(loser.id)
                    duplicateRedirects[loser.id] = winnerID
                }
            }
        }
        return removed
    }

    /// The deterministic order of duplicates: the creation stamp (earliest first, `null` last),
    /// then the id.
    static func precedes(_ a: Record, _ b: Record, stamp: String?) -> Bool {
        if let stamp {
            let (x, y) = (a[stamp], b[stamp])
            if x == .null, y != .null { return false }
            if y == .null, x != .null { return true }
            switch x.compare(to: y) ?? .orderedSame {
            case .orderedAscending: return true
            case .orderedDescending: return false
            case .orderedSame: break
            }
        }
        return a.id < b.id
    }

    /// With ``MergePolicy/mineWins``, the records this context updated become what the commit
    /// will make of them: the store's version now, with this context's changes on top (a to-many
    /// set by its additions and removals). Validation then judges those, not elements and values
    /// another writer changed since this context read them (a note deleted meanwhile stays out of
    /// a tag's set instead of failing the save as a missing destination).
    func rebaseUpdatesOnStore() throws {
        guard case .mineWins = mergePolicy, !updated.isEmpty else { return }
        var stored: [ObjectID: Record] = [:]
        for (entity, ids) in Dictionary(grouping: updated.keys, by: \.entity) {
            for record in try coordinator.store(forEntity: entity).records(with: ids) { stored[record.id] = record }
        }
        for (id, pair) in updated {
            // (A record deleted meanwhile is left as this context sees it.)
            guard let theirs = stored[id], theirs != pair.base else { continue }
            let change = try resolvedChange(
                base: pair.base,
                current: pair.current,
                stored: theirs,
                written: written[id]
            )
            updated[id] = (theirs, change.update?.applied(to: theirs) ?? theirs)
        }
    }

    /// The update to commit for one record this context changed, after applying the merge
    /// policy against what the store holds now. `nil` commits nothing for it.
    /// The properties and elements the app wrote explicitly (`written`) are in the update even
    /// where they equal the store's, unless the policy keeps the store's version of them.
    func resolvedChange(
        base: Record,
        current: Record,
        stored: Record?,
        written: WrittenProperties? = nil
    ) throws -> (update: RecordUpdate?, insert: Record?, delete: Bool) {
        let mine = Self.adding(
            written,
            of: current,
            to: RecordUpdate.difference(from: base, to: current),
            schema: schema
        )
        switch mergePolicy {
        case .mineWins:
            var rebased = mine
            if let stored {
                // A to-many set is a set of elements, not one value: this context's additions
                // and removals go on top of what others committed since it read the record, so
                // an element another writer added meanwhile stays (and one it removed stays out).
                for (key, targets) in mine.toMany {
                    let before = base.toMany[key] ?? []
                    let theirs = stored.toMany[key] ?? []
                    // (Nobody else changed it: the usual case, and an import's always.)
                    guard theirs != before else { continue }
                    var merged = theirs.union(targets.subtracting(before)).subtracting(before.subtracting(targets))
                    // Elements written explicitly keep what this context wrote, even where what it
                    // read already agreed and another writer changed them since: the write is the
                    // newer one (it goes out as written, not as the opposite of what the app set).
                    // (A written element whose record is gone meanwhile stays out: the deletion took it.)
                    if let written = mine.writtenMembers[key] {
                        merged.subtract(written.subtracting(targets))
                        for target in written.intersection(targets).sorted() {
                            if try self.current(target) != nil {
                                merged.insert(target)
                            } else {
                                rebased.writtenMembers[key]?.remove(target)
                            }
                        }
                        if rebased.writtenMembers[key]?.isEmpty == true { rebased.writtenMembers[key] = nil }
                    }
                    // (Elements written explicitly are written even where the sets agree.)
                    rebased.toMany[key] = merged == theirs && rebased.writtenMembers[key] == nil ? nil : merged
                }
            }
            return (rebased.isEmpty ? nil : rebased, nil, false)
        case .storeWins:
            guard let stored else { return (nil, nil, false) }
            let theirs = RecordUpdate.difference(from: base, to: stored).keys
            var kept = mine
            for key in theirs {
                kept.values[key] = nil
                kept.toOne[key] = nil
                kept.toMany[key] = nil
                kept.writtenMembers[key] = nil
            }
            return (kept.isEmpty ? nil : kept, nil, false)
        case .custom(let resolver):
            let theirs = stored.map { RecordUpdate.difference(from: base, to: $0).keys } ?? []
            let conflicting = mine.keys.intersection(theirs)
            if stored != nil, conflicting.isEmpty { return (mine.isEmpty ? nil : mine, nil, false) }
            let resolved = try resolver.resolve(
                MergeConflict(base: base, mine: current, stored: stored, conflictingKeys: conflicting)
            )
            switch (resolved, stored) {
            case (nil, nil): return (nil, nil, false)
            case (nil, .some): return (nil, nil, true)
            case (let record?, nil): return (nil, record, false)
            case (let record?, let stored?):
                // (What the app wrote explicitly and the resolver did not decide stays written.)
                let update = Self.adding(
                    written,
                    except: conflicting,
                    of: record,
                    to: RecordUpdate.difference(from: stored, to: record),
                    schema: schema
                )
                return (update.isEmpty ? nil : update, nil, false)
            }
        }
    }
}
