import Foundation

// Saving: the save pipeline (hooks, validation and repair, the commit to each store, publishing).
extension ObjectContext {
    /// Commits the context's changes: `willSave` hooks, validation (local origin only), repair,
    /// an atomic commit per store, then the change set is published. On failure nothing is
    /// committed to the failing store and the context keeps its changes.
    ///
    /// With stores for different entities in different files, each store's commit is atomic but
    /// the save as a whole is not: a failure after the first store's commit leaves that commit
    /// in place (and throws).
    @discardableResult
    public func save() throws -> ChangeSet {
        try processInbox()
        // A local save with nothing to commit still validates (and repairs) what imports left
        // for it, so an app's next save, whatever it changes, leaves the store valid.
        guard try hasChanges || (origin == .local && hasDeferredValidation()) else {
            return ChangeSet(origin: origin, contextName: name)
        }
        if origin == .import { try resolveDuplicatesForImport() }
        try runWillSaveHooks()
        if origin == .local { try validateAndRepair() }

        let participants = coordinator.saveParticipants
        func exclusively<T>(_ rest: ArraySlice<any SaveParticipant>, _ body: () throws -> T) throws -> T {
            guard let first = rest.first else { return try body() }
            return try first.performCommits { try exclusively(rest.dropFirst(), body) }
        }
        let updatedKeys = try exclusively(participants[...]) {
            if origin == .local { try redirectReferencesToLateRemovedDuplicates() }
            return try commitChanges(participants)
        }
        return finishSave(updatedKeys: updatedKeys)
    }

    /// The commit phase of ``save()``: builds each store's changes from the context's, with the
    /// deferred-validation list, and commits them with every participant's part. Returns the
    /// keys each update changed.
    private func commitChanges(_ participants: [any SaveParticipant]) throws -> [ObjectID: Set<String>] {
        var perStore: [ObjectIdentifier: (store: any PersistentStore, changes: StoreChanges)] = [:]
        func add(_ entity: String, _ body: (inout StoreChanges) -> Void) throws {
            let store = try coordinator.store(forEntity: entity)
            // In place: copying the changes out and back for each record would be quadratic.
            body(&perStore[ObjectIdentifier(store), default: (store, StoreChanges())].changes)
        }
        if origin == .local { try checkInsertsAreNew() }
        var updatedKeys: [ObjectID: Set<String>] = [:]
        let insertedRecords = Self.inIDOrder(inserted)
        for record in insertedRecords {
            try add(record.id.entity) { $0.inserts.append(record) }
        }
        // The store's version of the records this save updates, read under every participant's
        // lock: the merge policy compares with it, and so does a to-many set this context
        // changed (only its own additions and removals are committed, on top of the store's).
        var mineWins = false
        if case .mineWins = mergePolicy { mineWins = true }
        var readBackKeys: [ObjectID: Set<String>] = [:]
        for (id, pair) in updated where mineWins {
            // (Sets with elements written explicitly are committed on top of the store's too.)
            let writtenSets = Set((written[id]?.members ?? [:]).filter { !$0.value.isEmpty }.keys)
            guard pair.base.toMany != pair.current.toMany || !writtenSets.isEmpty else { continue }
            readBackKeys[id] = Set(pair.base.toMany.keys).union(pair.current.toMany.keys).filter {
                (pair.base.toMany[$0] ?? []) != (pair.current.toMany[$0] ?? [])
            }
            .union(writtenSets)
        }
        let readBack = mineWins ? Array(readBackKeys.keys) : Array(updated.keys)
        var stored: [ObjectID: Record] = [:]
        for (entity, ids) in Dictionary(grouping: readBack, by: \.entity) {
            for record in try coordinator.store(forEntity: entity).records(with: ids) {
                stored[record.id] = record
            }
        }
        for id in updated.keys.sorted() {
            let pair = updated[id]!
            let change = try resolvedChange(
                base: pair.base,
                current: pair.current,
                stored: stored[id],
                written: written[id]
            )
            if mineWins, let record = stored[id] {
                // What the commit makes of the sets, for the snapshot and the change set.
                for key in readBackKeys[id] ?? [] {
                    let targets = change.update?.toMany[key] ?? record.toMany[key] ?? []
                    updated[id]!.current.toMany[key] = targets.isEmpty ? nil : targets
                }
            }
            if let update = change.update {
                updatedKeys[id] = update.keys
                try add(id.entity) { $0.updates.append(update) }
            }
            if let insert = change.insert {
                updatedKeys[id] = RecordUpdate.difference(from: pair.base, to: insert).keys
                try add(id.entity) { $0.inserts.append(insert) }
            }
            if change.delete { try add(id.entity) { $0.deletes.append(id) } }
        }
        for id in deleted.keys.sorted() {
            try add(id.entity) { $0.deletes.append(id) }
        }
        for (key, entry) in pendingMetadata {
            perStore[key, default: (entry.store, StoreChanges())].changes.metadataEntries.merge(entry.entries) { $1 }
        }
        // A local change to an entity with a uniqueness policy: the next import resolves it.
        if origin == .local {
            for (store, key) in try unmarkDuplicateFree() {
                perStore[ObjectIdentifier(store), default: (store, StoreChanges())].changes.metadataEntries[key] =
                    .some(nil)
            }
        }
        // Imported records are validated at the next local save: remember them, durably, in the
        // same commit (an entry per record, so an import writes what it imported, whatever the
        // list holds already); a local save that validated them takes them off.
        // (Made for the first store that lists a record: most saves list none.)
        var listingKeys: DeferredKeys?
        for store in coordinator.stores {
            let key = ObjectIdentifier(store)
            var listing = Set<ObjectID>()
            // Records listed for some references only (the others were judged when saved): an
            // import that files a note in a folder of 100,000 lists the folder for that note.
            var listedReferences: [ObjectID: Set<ObjectID>] = [:]
            var unlisting: [String] = []
            if origin == .import, let changes = perStore[key]?.changes {
                listing.formUnion(changes.inserts.map(\.id))
                var whole = listing
                for update in changes.updates {
                    listing.insert(update.id)
                    guard let pair = updated[update.id] else {
                        whole.insert(update.id)
                        continue
                    }
                    listedReferences[update.id, default: []].formUnion(Self.addedReferences(by: update, to: pair.base))
                }
                // An imported deletion leaves the records that pointed at the deleted one
                // pointing at nothing: they are validated too, for that reference.
                for id in changes.deletes {
                    guard let record = deleted[id], let entity = schema.entity(id.entity) else { continue }
                    for relationship in entity.relationships {
                        for target in Self.targets(of: record, relationship) {
                            listing.insert(target)
                            listedReferences[target, default: []].insert(id)
                        }
                    }
                }
                for id in whole { listedReferences[id] = nil }
            } else if origin == .local {
                // What this save validated leaves the list: the entries its validation read
                // (those another process's import made since are other keys); records whose
                // references wait for a target that has not arrived stay, unless deleted.
                let kept = keptForValidation.filter { (try? coordinator.store(forEntity: $0.entity)) === store }
                unlisting = (validatedDeferredEntries[key] ?? []).filter {
                    !kept.contains($0.id) || deleted[$0.id] != nil
                }.map(\.key)
                listing = kept.subtracting(validatedDeferred)
                if try store.metadataEntries(forKeys: [Self.deferredValidationKey])[Self.deferredValidationKey] != nil {
                    // The single-entry list older versions wrote: moved to entries.
                    let old = try Self.legacyDeferredValidation(in: store)
                    listing.formUnion(old.subtracting(validatedDeferred))
                    perStore[key, default: (store, StoreChanges())].changes.metadataEntries[
                        Self.deferredValidationKey
                    ] = .some(nil)
                }
            }
            // (A deleted record's entries that no validation read stay until one does: it finds
            // the record gone and takes them off.)
            listing.subtract(deleted.keys)
            guard !listing.isEmpty || !unlisting.isEmpty else { continue }
            var entries = perStore[key, default: (store, StoreChanges())].changes.metadataEntries
            for entry in unlisting { entries[entry] = .some(nil) }
            if !listing.isEmpty {
                let keys = listingKeys ?? DeferredKeys()
                listingKeys = keys
                for id in listing {
                    entries[keys.key(id)] = .some(Self.deferredValue(references: listedReferences[id]))
                }
            }
            perStore[key, default: (store, StoreChanges())].changes.metadataEntries = entries
        }
        let order = coordinator.stores.map(ObjectIdentifier.init)
        for key in perStore.keys.sorted(by: { (order.firstIndex(of: $0) ?? .max) < (order.firstIndex(of: $1) ?? .max) })
        {
            var entry = perStore[key]!
            // Every participant that was asked hears how the commit ended, whatever happened.
            var asked: [any SaveParticipant] = []
            do {
                for participant in participants {
                    asked.append(participant)
                    try participant.willCommit(&entry.changes, to: entry.store, origin: origin, context: self)
                }
                try entry.store.commit(entry.changes)
            } catch {
                for participant in asked.reversed() {
                    participant.didCommit(to: entry.store, origin: origin, succeeded: false)
                }
                throw error
            }
            for participant in asked.reversed() {
                participant.didCommit(to: entry.store, origin: origin, succeeded: true)
            }
        }
        return updatedKeys
    }

    /// The end of ``save()``: the change set, the context's snapshots, the hooks and the
    /// notifications.
    private func finishSave(updatedKeys: [ObjectID: Set<String>]) -> ChangeSet {
        let insertedRecords = Self.inIDOrder(inserted)
        let changes = ChangeSet(
            origin: origin,
            contextName: name,
            inserted: insertedRecords,
            updated: Self.inIDOrder(updated.filter { updatedKeys[$0.key] != nil }).map(\.current),
            updatedKeys: updatedKeys,
            deleted: deleted.keys.sorted()
        )
        for record in changes.inserted { snapshots[record.id] = record }
        for record in changes.updated { snapshots[record.id] = record }
        for id in changes.deleted { snapshots[id] = nil }
        prefetched = []
        readAbsent = []
        rollback()
        for record in changes.inserted {
            hooks[record.id.entity]?.didSave(record, change: .insert, origin: origin, context: self)
        }
        for record in changes.updated {
            hooks[record.id.entity]?.didSave(record, change: .update, origin: origin, context: self)
        }
        for id in changes.deleted {
            hooks[id.entity]?.didSave(Record(id: id), change: .delete, origin: origin, context: self)
        }
        inbox.publish(.didSave(changes))
        coordinator.contextDidSave(changes)
        NotificationCenter.default.post(name: .concordContextDidSave, object: self, userInfo: ["changes": changes])
        return changes
    }

    /// Every rule the context's inserted and updated records (and the records an import left
    /// for validation) break: the schema's rules, and references to records that do not exist.
    /// An updated record's references are looked up only where this save adds them: those its
    /// stored version holds were judged when they were saved.
    public func validationViolations() throws -> [ValidationViolation] {
        var found: [ValidationViolation] = []
        var records = Self.inIDOrder(inserted) + Self.inIDOrder(updated).map(\.current)
        var deferred = Set<ObjectID>()
        // Listed records whose every entry names the references to look up (the rest are
        // judged whole).
        var listedReferences: [ObjectID: Set<ObjectID>] = [:]
        var judgedWhole = Set<ObjectID>()
        for store in coordinator.stores {
            let entries = try Self.deferredEntries(in: store)
            validatedDeferredEntries[ObjectIdentifier(store)] = entries
            for entry in entries {
                deferred.insert(entry.id)
                if let references = entry.references {
                    listedReferences[entry.id, default: []].formUnion(references)
                } else {
                    judgedWhole.insert(entry.id)
                }
            }
            let legacy = try Self.legacyDeferredValidation(in: store)
            deferred.formUnion(legacy)
            judgedWhole.formUnion(legacy)
        }
        for id in judgedWhole { listedReferences[id] = nil }
        // Whether each target exists, looked up once: 100,000 imported notes all name one folder,
        // and reading the folder (which holds them all) once per note made the save after a large
        // import cost the square of what it brought.
        var known: [ObjectID: Bool] = [:]
        func exists(_ id: ObjectID) throws -> Bool {
            if let found = known[id] { return found }
            let found = try current(id) != nil
            known[id] = found
            return found
        }
        validatedDeferred.formUnion(deferred)
        for id in deferred.subtracting(inserted.keys).subtracting(updated.keys).sorted() {
            if let record = try current(id) { records.append(record) }
        }
        for record in records {
            found += schema.violations(of: record)
            // An updated record's references that its stored version holds already were judged
            // when they were saved, and a deletion of their targets since was validated with the
            // records it left pointing at them (inverses, the deferred list): only the references
            // this save adds are looked up, so a save costs what it changes, not what the record
            // holds (a folder of 100,000 notes). Records on the deferred list add the references
            // their imports added (all of them where an entry does not say which).
            let listed = deferred.contains(record.id) ? listedReferences[record.id] : []
            let stored = updated[record.id]?.base
            for relationship in schema.entity(record.id.entity)?.relationships ?? [] {
                var targets = Self.targets(of: record, relationship)
                if let listed {
                    var looked = listed.filter { targets.contains($0) }
                    if let stored {
                        let before = Self.targets(of: stored, relationship)
                        looked.formUnion(targets.lazy.filter { !before.contains($0) })
                    } else if !deferred.contains(record.id) {
                        looked = targets
                    }
                    targets = looked
                }
                for target in targets.sorted()
                where target.entity == relationship.destination {
                    if try !exists(target) {
                        let state = try missingTargetState(target)
                        found.append(
                            ValidationViolation(
                                object: record.id,
                                property: relationship.name,
                                rule: .missingDestination,
                                message: state == .notArrived
                                    ? "\(target) has not arrived" : "\(target) does not exist",
                                target: target,
                                targetState: state
                            )
                        )
                    }
                }
            }
        }
        return found
    }

    private func hasDeferredValidation() throws -> Bool {
        try coordinator.stores.contains { store in
            try store.hasMetadataEntries(withPrefix: Self.deferredPrefix)
                || store.metadataEntries(forKeys: [Self.deferredValidationKey])[Self.deferredValidationKey] != nil
        }
    }

    /// The targets `update` adds to `base`'s relationships.
    static func addedReferences(by update: RecordUpdate, to base: Record) -> Set<ObjectID> {
        var added = Set<ObjectID>()
        for (key, target) in update.toOne {
            if let target, base.toOne[key] != target { added.insert(target) }
        }
        for (key, targets) in update.toMany {
            let before = base.toMany[key] ?? []
            added.formUnion(targets.lazy.filter { !before.contains($0) })
        }
        return added
    }

    /// The values of `dictionary` in id order: the ids are sorted, not the records (which are
    /// costly to move).
    private static func inIDOrder<Value>(_ dictionary: [ObjectID: Value]) -> [Value] {
        dictionary.keys.sorted().map { dictionary[$0]! }
    }

    private func runWillSaveHooks() throws {
        guard !hooks.isEmpty else { return }
        for id in inserted.keys.sorted() {
            guard let hook = hooks[id.entity], var record = inserted[id] else { continue }
            try hook.willSave(&record, change: .insert, origin: origin, context: self)
            inserted[id] = record
        }
        for id in updated.keys.sorted() {
            guard let hook = hooks[id.entity], let pair = updated[id] else { continue }
            var record = pair.current
            try hook.willSave(&record, change: .update, origin: origin, context: self)
            updated[id] = (pair.base, record)
        }
    }

    private func validateAndRepair() throws {
        // What other processes committed (an import's list of records to validate among it) is
        // read as it is now.
        for store in coordinator.stores { try store.refresh() }
        try rebaseUpdatesOnStore()
        // References to records that have not arrived wait before repair sees them, and never
        // fail a save; their records stay on the list validated at the next save.
        let waiting = try PendingReferences(context: self)
        func actionable(_ found: [ValidationViolation]) -> [ValidationViolation] {
            found.filter { $0.targetState != .notArrived || waiting.hasWaitedLongEnough($0) }
        }
        var all = try validationViolations()
        // A reference to a record removed as a duplicate goes to its winner (a context that read
        // the loser before another process's import removed it).
        if try redirectRemovedDuplicates(all) { all = try validationViolations() }
        var violations = actionable(all)
        var pass = 0
        while !violations.isEmpty, let repairer = validationRepairer, pass < maximumRepairPasses {
            pass += 1
            guard try repairer.repair(violations, in: self) else { break }
            all = try validationViolations()
            violations = actionable(all)
        }
        try waiting.record(all.filter { $0.targetState == .notArrived })
        keptForValidation = Set(all.filter { $0.targetState == .notArrived }.map(\.object))
        violations.removeAll { $0.targetState == .notArrived }
        guard violations.isEmpty else {
            throw PersistenceError(
                .validationFailed,
                "the save breaks \(violations.count) rule(s)\(pass > 0 ? " after \(pass) repair pass(es)" : "")",
                violations: violations
            )
        }
    }
}
