import Foundation
import Synchronization

/// A scratch pad of changes to the records of a ``StoreCoordinator``'s stores: insert, update,
/// delete and fetch, then ``save()`` them all at once.
///
/// A context belongs to one thread or actor at a time (like Core Data's); it is not `Sendable`.
/// Records are values: fetch one, change it, hand it back with ``update(_:)-(Record)``. The context keeps
/// relationships consistent on both sides (setting a note's folder adds the note to the
/// folder's notes and removes it from the old folder's) and applies delete rules when a record
/// is deleted. Fetches see the context's unsaved changes.
///
/// Every context has an ``origin``: `.local` for the app's own edits, `.import` for changes from
/// elsewhere. ``save()`` runs the pipeline: hooks (`willSave`), validation (skipped for
/// `.import`: the records an import changed are listed in the store's metadata and validated,
/// with the local changes, at the next local save), repair through
/// ``validationRepairer`` if validation fails, an atomic commit to each store concerned, then the
/// ``ChangeSet`` is published to ``changeSets()``, to the coordinator's save listeners and as
/// a `NotificationCenter` post (`Notification.Name.concordContextDidSave`).
public final class ObjectContext {
    /// The stores this context reads and writes.
    public let coordinator: StoreCoordinator
    /// Where this context's changes come from.
    public let origin: ChangeOrigin
    /// A name for logs and change sets.
    public var name: String?
    /// Per-entity hooks, by entity name.
    public private(set) var hooks: [String: any EntityHooks] = [:]
    /// Repairs what validation finds wrong during a save (see ``ValidationRepairing``). By
    /// default it hands each invalid record to its entity's ``ValidationRepairPolicy`` among the
    /// coordinator's ``StoreCoordinator/policies``; `nil` fails the save at once.
    public var validationRepairer: (any ValidationRepairing)?
    /// What a save does with records another writer changed since this context read them.
    public var mergePolicy: MergePolicy = .mineWins
    /// How many times a save asks the repairer before it fails with the remaining violations.
    public var maximumRepairPasses = 3

    private var schema: Schema { coordinator.schema }
    private var inserted: [ObjectID: Record] = [:]
    private var updated: [ObjectID: (base: Record, current: Record)] = [:]
    private var deleted: [ObjectID: Record] = [:]
    /// The store's version of each record as this context last read it: the base an update is
    /// compared with, so a save commits only what this context changed.
    private var snapshots: [ObjectID: Record] = [:]
    /// Ids read ahead by ``prefetch(_:)``: their store version is in `snapshots`, or the store
    /// did not hold them; lookups need no store read until the next save or reset.
    private var prefetched = Set<ObjectID>()
    private var pendingMetadata: [ObjectIdentifier: (store: any PersistentStore, entries: [String: Data?])] = [:]
    /// The records ``resolveDuplicates(of:)`` removed since the last save or rollback, each with
    /// the winner it was folded into: a save participant (the sync layer) records them, so that a
    /// reference to a removed duplicate that arrives later goes to the winner.
    public internal(set) var duplicateRedirects: [ObjectID: ObjectID] = [:]
    /// The records of ``duplicateRedirects`` as they were just before their removal (the sync
    /// layer keeps them, to undo a removal that later writes make wrong).
    package internal(set) var removedDuplicates: [ObjectID: Record] = [:]
    /// For each record whose relationship ``resolveDuplicates(of:)`` moved from a removed
    /// duplicate to its winner: the relationship's name and the removed duplicate.
    package internal(set) var duplicateRelinks: [ObjectID: [String: ObjectID]] = [:]
    /// The winners of ``duplicateRedirects`` as they were before the first duplicate was merged
    /// into them (the sync layer undoes what a policy's merge changed when it undoes a removal).
    package internal(set) var winnersBeforeMerge: [ObjectID: Record] = [:]
    /// Records whose references wait for targets that have not arrived (set by validation).
    var keptForValidation = Set<ObjectID>()
    /// The records of the deferred-validation lists that this save's validation looked at.
    var validatedDeferred = Set<ObjectID>()
    private let inbox: Inbox
    private let listenerToken: UInt64

    /// What a context learns from other threads: its coordinator's store events.
    private final class Inbox: Sendable {
        let events = Mutex<[StoreEvent]>([])
        let subscribers = Mutex<[UInt64: AsyncStream<ContextEvent>.Continuation]>([:])
        let next = Atomic<UInt64>(0)

        func publish(_ event: ContextEvent) {
            for continuation in subscribers.withLock({ Array($0.values) }) { continuation.yield(event) }
        }
    }

    /// Something a context tells its observers.
    public enum ContextEvent: Sendable {
        /// A save of this context committed these changes.
        case didSave(ChangeSet)
        /// One of the coordinator's stores reported an event (changed by another process,
        /// removed, moved). After `.removed`, the context has dropped its unsaved changes to
        /// that store's records.
        case storeDidChange(StoreEvent)
    }

    /// A context on `coordinator`'s stores.
    public init(
        coordinator: StoreCoordinator,
        origin: ChangeOrigin = .local,
        name: String? = nil,
        hooks: [any EntityHooks] = []
    ) {
        self.coordinator = coordinator
        self.origin = origin
        self.name = name
        self.validationRepairer = PolicyRepairer(policies: coordinator.policies)
        for hook in hooks { self.hooks[hook.entityName] = hook }
        let inbox = Inbox()
        self.inbox = inbox
        listenerToken = coordinator.addListener { event in
            inbox.events.withLock { $0.append(event) }
            inbox.publish(.storeDidChange(event))
        }
    }

    deinit {
        coordinator.removeListener(listenerToken)
        for continuation in inbox.subscribers.withLock({ Array($0.values) }) { continuation.finish() }
    }

    /// Sets the hooks for their entity, replacing any set before.
    public func setHooks(_ hooks: any EntityHooks) { self.hooks[hooks.entityName] = hooks }

    // MARK: Reading

    /// The record with `id` as this context sees it (its unsaved changes included), or `nil`.
    public func record(with id: ObjectID) throws -> Record? {
        try processInbox()
        return try current(id)
    }

    /// The records `request` selects, this context's unsaved changes included.
    public func fetch(_ request: FetchRequest) throws -> [Record] {
        try processInbox()
        try request.validate(in: schema)
        let store = try coordinator.store(forEntity: request.entity)
        let touched = pendingIDs(of: request.entity)
        if touched.isEmpty { return remember(try store.fetch(request)) }
        var widened = request
        widened.fetchOffset = 0
        widened.fetchLimit = request.fetchLimit.map { request.fetchOffset + $0 + touched.count }
        var merged = remember(try store.fetch(widened).filter { !touched.contains($0.id) })
        for id in touched {
            if let record = try current(id), request.matches(record) { merged.append(record) }
        }
        var paged = request
        paged.predicate = .constant(true)
        return paged.evaluate(over: merged)
    }

    /// How many records `request` selects (limit and offset ignored), unsaved changes included.
    public func count(for request: FetchRequest) throws -> Int {
        try processInbox()
        try request.validate(in: schema)
        let store = try coordinator.store(forEntity: request.entity)
        let touched = pendingIDs(of: request.entity)
        var total = try store.count(for: request)
        if touched.isEmpty { return total }
        total -= try store.count(
            for: FetchRequest(entity: request.entity, predicate: .ids(touched) && request.predicate)
        )
        for id in touched {
            if let record = try current(id), request.matches(record) { total += 1 }
        }
        return total
    }

    /// Whether the context holds unsaved changes.
    public var hasChanges: Bool {
        !inserted.isEmpty || !updated.isEmpty || !deleted.isEmpty || !pendingMetadata.isEmpty
    }

    /// The unsaved inserted, updated and deleted records' ids.
    public var pendingChanges: (inserted: Set<ObjectID>, updated: Set<ObjectID>, deleted: Set<ObjectID>) {
        (Set(inserted.keys), Set(updated.keys), Set(deleted.keys))
    }

    // MARK: Changing

    /// Inserts a new record of `entity` with its defaults, then `values`, then runs the entity's
    /// `didInsert` hook. Relationships are set afterwards with ``update(_:)-(Record)``.
    @discardableResult
    public func insert(entity: String, id: ObjectID? = nil, values: [String: Value] = [:]) throws -> Record {
        guard let description = schema.entity(entity) else {
            throw PersistenceError(.invalidRequest, "no entity \(entity) in schema version \(schema.version)")
        }
        var record = Record.new(description, id: id)
        for (key, value) in values { record[key] = value }
        return try insert(record)
    }

    /// Inserts `record` as it is (relationships included, inverses kept consistent), then runs
    /// the entity's `didInsert` hook. A record whose id the store already holds replaces it at
    /// the save.
    @discardableResult
    public func insert(_ record: Record) throws -> Record {
        try processInbox()
        guard schema.entity(record.id.entity) != nil else {
            throw PersistenceError(.invalidRequest, "no entity \(record.id.entity) in schema version \(schema.version)")
        }
        var record = record
        if let hook = hooks[record.id.entity] {
            try hook.didInsert(&record, origin: origin, context: self)
        }
        let previous = try current(record.id)
        deleted[record.id] = nil
        updated[record.id] = nil
        inserted[record.id] = record
        try maintainInverses(from: previous ?? Record(id: record.id), to: record)
        if origin == .local { try hooks[record.id.entity]?.didChangeLocally(record, change: .insert, context: self) }
        return record
    }

    /// Replaces the record with `record.id` by `record`, keeping the inverses of changed
    /// relationships consistent. The save commits only the properties that differ from the
    /// store's version, so another writer's changes to other properties survive.
    public func update(_ record: Record) throws {
        try processInbox()
        // The version the caller's record derives from: pending, or as this context last read it.
        let previous =
            deleted[record.id] != nil
            ? nil : try inserted[record.id] ?? updated[record.id]?.current ?? snapshots[record.id] ?? current(record.id)
        guard let previous else {
            throw PersistenceError(
                .invalidRequest,
                "cannot update \(record.id): no such record (deleted, or never saved)"
            )
        }
        try setRaw(record)
        try maintainInverses(from: previous, to: record)
        if origin == .local { try hooks[record.id.entity]?.didChangeLocally(record, change: .update, context: self) }
    }

    /// Deletes the record with `id` as an imported deletion: no delete rules run and no other
    /// record's owning relationship (``Schema/ownsRelationship(entity:_:)``) is changed; only the
    /// derived sides that pointed at the record forget it. References to it that remain are
    /// reported by validation at the next local save, where repair policies deal with them. The
    /// sync layer applies other devices' deletions this way, so the outcome does not depend on
    /// the order in which changes arrive.
    public func deleteWithoutRules(_ id: ObjectID) throws {
        try processInbox()
        guard let record = try current(id), let entity = schema.entity(id.entity) else { return }
        for relationship in entity.relationships where schema.ownsRelationship(entity: entity.name, relationship.name) {
            try adjustInverse(of: id, relationship, added: [], removed: Self.targets(of: record, relationship))
        }
        if inserted.removeValue(forKey: id) != nil {
            if let stored = try storeRecord(id) { deleted[id] = stored }
        } else {
            deleted[id] = updated[id]?.base ?? record
        }
        updated[id] = nil
    }

    /// Deletes the record with `id`, applying its relationships' delete rules: `nullify` clears
    /// the other side, `cascade` deletes the related records too, `deny` refuses
    /// (``PersistenceError/Code/deleteDenied``) while related records exist. Deleting a record
    /// that does not exist does nothing.
    public func delete(_ id: ObjectID) throws {
        try processInbox()
        guard try current(id) != nil else { return }
        var plan: [ObjectID] = []
        try planDeletion(of: id, into: &plan)
        for victim in plan {
            guard let record = try current(victim) else { continue }
            try hooks[victim.entity]?.willDelete(record, origin: origin, context: self)
        }
        let doomed = Set(plan)
        for victim in plan {
            guard let record = try current(victim), let entity = schema.entity(victim.entity) else { continue }
            for relationship in entity.relationships {
                let targets = Self.targets(of: record, relationship).subtracting(doomed)
                try adjustInverse(of: victim, relationship, added: [], removed: targets)
            }
        }
        for victim in plan {
            guard let record = try current(victim) else { continue }
            if inserted.removeValue(forKey: victim) != nil {
                if let stored = try storeRecord(victim) { deleted[victim] = stored }
            } else {
                deleted[victim] = updated[victim]?.base ?? record
            }
            updated[victim] = nil
        }
        if origin == .local {
            for victim in plan {
                try hooks[victim.entity]?.didChangeLocally(Record(id: victim), change: .delete, context: self)
            }
        }
    }

    /// Sets a metadata entry of `store` (or removes it, for `nil`), committed by the next save
    /// in the same atomic write as the data.
    public func setMetadata(_ value: Data?, forKey key: String, in store: any PersistentStore) {
        // Mutated in place: a copy per call would make many entries quadratic.
        pendingMetadata[ObjectIdentifier(store), default: (store, [:])].entries[key] = .some(value)
    }

    /// Forgets every unsaved change.
    public func rollback() {
        duplicateRedirects = [:]
        removedDuplicates = [:]
        duplicateRelinks = [:]
        winnersBeforeMerge = [:]
        keptForValidation = []
        validatedDeferred = []
        inserted = [:]
        updated = [:]
        deleted = [:]
        pendingMetadata = [:]
    }

    /// Forgets every unsaved change and every record read so far: later updates compare with
    /// the store's version at the time they are made. Call it after reading many records you
    /// will not change, to release their snapshots.
    public func reset() {
        rollback()
        snapshots = [:]
        prefetched = []
    }

    /// Reads the records with `ids` from their stores, one read per store instead of one per
    /// record, ahead of changing them. Until this context next saves or is reset, looking one of
    /// these ids up (``record(with:)``, ``insert(_:)->Record``, ``update(_:)-(Record)``, ``delete(_:)-(ObjectID)``) uses what
    /// this read found, including that the store did not hold it; changes that other contexts
    /// save meanwhile are not seen. Call it before touching many records the store may or may
    /// not hold, as an import does.
    public func prefetch(_ ids: some Sequence<ObjectID>) throws {
        try processInbox()
        var unread: [String: [ObjectID]] = [:]
        for id in ids where !prefetched.contains(id) && schema.entity(id.entity) != nil {
            unread[id.entity, default: []].append(id)
        }
        for (entity, group) in unread.sorted(by: { $0.key < $1.key }) {
            let store = try coordinator.store(forEntity: entity)
            for chunk in stride(from: 0, to: group.count, by: 500) {
                let slice = Array(group[chunk..<min(chunk + 500, group.count)])
                let found = try store.records(with: slice)
                for id in slice { snapshots[id] = nil }
                for record in found { snapshots[record.id] = record }
                prefetched.formUnion(slice)
            }
        }
    }

    // MARK: Saving

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
        if origin == .import { try resolveDuplicates() }
        try runWillSaveHooks()
        if origin == .local { try validateAndRepair() }

        let participants = coordinator.saveParticipants
        func exclusively<T>(_ rest: ArraySlice<any SaveParticipant>, _ body: () throws -> T) throws -> T {
            guard let first = rest.first else { return try body() }
            return try first.performCommits { try exclusively(rest.dropFirst(), body) }
        }
        let updatedKeys = try exclusively(participants[...]) { try commitChanges(participants) }
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
        var updatedKeys: [ObjectID: Set<String>] = [:]
        let insertedRecords = Self.inIDOrder(inserted)
        for record in insertedRecords {
            try add(record.id.entity) { $0.inserts.append(record) }
        }
        let stored: [ObjectID: Record]
        if case .mineWins = mergePolicy {
            stored = [:]
        } else {
            var current: [ObjectID: Record] = [:]
            for (entity, ids) in Dictionary(grouping: updated.keys, by: \.entity) {
                for record in try coordinator.store(forEntity: entity).records(with: ids) {
                    current[record.id] = record
                }
            }
            stored = current
        }
        for id in updated.keys.sorted() {
            let pair = updated[id]!
            let change = try resolvedChange(base: pair.base, current: pair.current, stored: stored[id])
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
        // Imported records are validated at the next local save: remember them, durably, in the
        // same commit (an entry per record, so an import writes what it imported, whatever the
        // list holds already); a local save that validated them takes them off.
        for store in coordinator.stores {
            let key = ObjectIdentifier(store)
            var listing = Set<ObjectID>()
            var unlisting = Set<ObjectID>()
            if origin == .import, let changes = perStore[key]?.changes {
                listing.formUnion(changes.inserts.map(\.id))
                listing.formUnion(changes.updates.map(\.id))
                // An imported deletion leaves the records that pointed at the deleted one
                // pointing at nothing: they are validated too.
                for id in changes.deletes {
                    guard let record = deleted[id], let entity = schema.entity(id.entity) else { continue }
                    for relationship in entity.relationships {
                        listing.formUnion(Self.targets(of: record, relationship))
                    }
                }
            } else if origin == .local {
                // What this save validated leaves the list (entries another process's import
                // made since are other keys, or the same key written again after this commit);
                // records whose references wait for a target that has not arrived stay.
                let kept = keptForValidation.filter { (try? coordinator.store(forEntity: $0.entity)) === store }
                unlisting = validatedDeferred.subtracting(kept)
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
            unlisting.formUnion(deleted.keys.filter { (try? coordinator.store(forEntity: $0.entity)) === store })
            listing.subtract(deleted.keys)
            guard !listing.isEmpty || !unlisting.isEmpty else { continue }
            var entries = perStore[key, default: (store, StoreChanges())].changes.metadataEntries
            for id in unlisting { entries[Self.deferredKey(id)] = .some(nil) }
            for id in listing { entries[Self.deferredKey(id)] = .some(Data()) }
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

    /// Every rule the context's inserted and updated records break: the schema's rules, and
    /// relationships that point at records that do not exist.
    public func validationViolations() throws -> [ValidationViolation] {
        var found: [ValidationViolation] = []
        var records = Self.inIDOrder(inserted) + Self.inIDOrder(updated).map(\.current)
        var deferred = Set<ObjectID>()
        for store in coordinator.stores { deferred.formUnion(try Self.deferredValidation(in: store)) }
        validatedDeferred.formUnion(deferred)
        for id in deferred.subtracting(inserted.keys).subtracting(updated.keys).sorted() {
            if let record = try current(id) { records.append(record) }
        }
        for record in records {
            found += schema.violations(of: record)
            for relationship in schema.entity(record.id.entity)?.relationships ?? [] {
                for target in Self.targets(of: record, relationship).sorted()
                where target.entity == relationship.destination {
                    if try current(target) == nil {
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

    /// This context's events (saves and store events) from now until the loop ends.
    public func events() -> AsyncStream<ContextEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: ContextEvent.self, bufferingPolicy: .unbounded)
        let token = inbox.next.add(1, ordering: .relaxed).newValue
        inbox.subscribers.withLock { $0[token] = continuation }
        continuation.onTermination = { [inbox] _ in _ = inbox.subscribers.withLock { $0.removeValue(forKey: token) } }
        return stream
    }

    /// The change sets of this context's saves, from now until the loop ends.
    public func changeSets() -> AsyncCompactMapSequence<AsyncStream<ContextEvent>, ChangeSet> {
        events().compactMap { event in
            if case .didSave(let changes) = event { return changes }
            return nil
        }
    }

    // MARK: Internals

    /// The metadata entry in which older versions listed imported records not validated yet
    /// (read, and moved to entries, for stores they wrote).
    static let deferredValidationKey = "concord.deferredValidation"

    /// The prefix of the metadata entries that each list an imported record not validated yet.
    static let deferredPrefix = "concord.deferred/"

    static func deferredKey(_ id: ObjectID) -> String { deferredPrefix + id.description }

    private func hasDeferredValidation() throws -> Bool {
        try coordinator.stores.contains { store in
            try store.hasMetadataEntries(withPrefix: Self.deferredPrefix)
                || store.metadataEntries(forKeys: [Self.deferredValidationKey])[Self.deferredValidationKey] != nil
        }
    }

    /// The records of `store` that imports listed for validation at the next local save.
    static func deferredValidation(in store: any PersistentStore) throws -> Set<ObjectID> {
        var ids = try legacyDeferredValidation(in: store)
        try store.enumerateMetadataEntries(withPrefix: deferredPrefix, batchSize: 4096) { batch in
            for (key, _) in batch {
                let text = key.dropFirst(deferredPrefix.count)
                guard let slash = text.firstIndex(of: "/"),
                    let uuid = UUID(uuidString: String(text[text.index(after: slash)...]))
                else {
                    continue
                }
                ids.insert(ObjectID(entity: String(text[..<slash]), uuid: uuid))
            }
        }
        return ids
    }

    static func legacyDeferredValidation(in store: any PersistentStore) throws -> Set<ObjectID> {
        guard let data = try store.metadataEntries(forKeys: [deferredValidationKey])[deferredValidationKey] else {
            return []
        }
        if data.first == deferredMarker { return decodeDeferred(data) }
        // Lists written before the compact form: JSON.
        return Set((try? JSONDecoder().decode([ObjectID].self, from: data)) ?? [])
    }

    /// The first byte of the compact form of the deferred-validation list: then, per id, the
    /// entity name's length (2 bytes, big-endian), its UTF-8 bytes and the UUID's 16 bytes, in id
    /// order. (An import can list thousands of ids; JSON made every import save pay for them.)
    static let deferredMarker: UInt8 = 0xC4

    static func encodeDeferred(_ ids: Set<ObjectID>) -> Data {
        var bytes: [UInt8] = [deferredMarker]
        bytes.reserveCapacity(1 + ids.count * 28)
        for id in ids.sorted() {
            let name = id.entity.utf8.prefix(Int(UInt16.max))
            bytes.append(UInt8(name.count >> 8))
            bytes.append(UInt8(name.count & 0xFF))
            bytes.append(contentsOf: name)
            withUnsafeBytes(of: id.uuid.uuid) { bytes.append(contentsOf: $0) }
        }
        return Data(bytes)
    }

    /// The ids of the compact form; what follows a damaged entry is dropped (the list only says
    /// what to validate again: a record left out is validated at its next change).
    static func decodeDeferred(_ data: Data) -> Set<ObjectID> {
        let bytes = [UInt8](data)
        var ids = Set<ObjectID>()
        var offset = 1
        while bytes.count - offset >= 2 {
            let length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
            offset += 2
            guard bytes.count - offset >= length + 16,
                let entity = String(validating: bytes[offset..<offset + length], as: UTF8.self)
            else { break }
            offset += length
            var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &uuid) { $0.copyBytes(from: bytes[offset..<offset + 16]) }
            offset += 16
            ids.insert(ObjectID(entity: entity, uuid: UUID(uuid: uuid)))
        }
        return ids
    }

    private func processInbox() throws {
        let events = inbox.events.withLock { events in
            defer { events.removeAll() }
            return events
        }
        for event in events where event.kind == .removed {
            prefetched = []
            let live = Set(coordinator.stores.map { ObjectIdentifier($0) })
            pendingMetadata = pendingMetadata.filter { live.contains($0.key) }
            let orphaned: (ObjectID) -> Bool = { id in (try? self.coordinator.store(forEntity: id.entity)) == nil }
            inserted = inserted.filter { !orphaned($0.key) }
            updated = updated.filter { !orphaned($0.key) }
            deleted = deleted.filter { !orphaned($0.key) }
        }
    }

    private func pendingIDs(of entity: String) -> Set<ObjectID> {
        var ids = Set<ObjectID>()
        for id in inserted.keys where id.entity == entity { ids.insert(id) }
        for id in updated.keys where id.entity == entity { ids.insert(id) }
        for id in deleted.keys where id.entity == entity { ids.insert(id) }
        return ids
    }

    /// The values of `dictionary` in id order: the ids are sorted, not the records (which are
    /// costly to move).
    private static func inIDOrder<Value>(_ dictionary: [ObjectID: Value]) -> [Value] {
        dictionary.keys.sorted().map { dictionary[$0]! }
    }

    private func storeRecord(_ id: ObjectID) throws -> Record? {
        if prefetched.contains(id) { return snapshots[id] }
        let record = try coordinator.store(forEntity: id.entity).records(with: [id]).first
        snapshots[id] = record
        return record
    }

    private func remember(_ records: [Record]) -> [Record] {
        for record in records { snapshots[record.id] = record }
        return records
    }

    private func current(_ id: ObjectID) throws -> Record? {
        if deleted[id] != nil { return nil }
        if let record = inserted[id] { return record }
        if let pair = updated[id] { return pair.current }
        guard schema.entity(id.entity) != nil else { return nil }
        return try storeRecord(id)
    }

    /// Records `record` as the current version without touching inverses.
    private func setRaw(_ record: Record) throws {
        if inserted[record.id] != nil {
            inserted[record.id] = record
        } else if let pair = updated[record.id] {
            updated[record.id] = (pair.base, record)
        } else if let base = try snapshots[record.id] ?? storeRecord(record.id) {
            updated[record.id] = (base, record)
        }
    }

    private func modify(_ id: ObjectID, _ body: (inout Record) -> Void) throws {
        guard var record = try current(id) else { return }
        body(&record)
        try setRaw(record)
    }

    static func targets(of record: Record, _ relationship: RelationshipDescription) -> Set<ObjectID> {
        relationship.isToMany
            ? record.toMany[relationship.name] ?? [] : record.toOne[relationship.name].map { [$0] } ?? []
    }

    private func maintainInverses(from old: Record, to new: Record) throws {
        guard let entity = schema.entity(new.id.entity) else { return }
        for relationship in entity.relationships {
            let before = Self.targets(of: old, relationship)
            let after = Self.targets(of: new, relationship)
            if before == after { continue }
            try adjustInverse(
                of: new.id,
                relationship,
                added: after.subtracting(before),
                removed: before.subtracting(after)
            )
        }
    }

    /// Makes the records at the other end of `relationship` agree that `source` now points at
    /// `added` and no longer at `removed`.
    private func adjustInverse(
        of source: ObjectID,
        _ relationship: RelationshipDescription,
        added: Set<ObjectID>,
        removed: Set<ObjectID>
    ) throws {
        guard let inverse = schema.entity(relationship.destination)?.relationship(relationship.inverse) else { return }
        for target in removed.sorted() {
            try modify(target) { record in
                if inverse.isToMany {
                    record.toMany[inverse.name]?.remove(source)
                    if record.toMany[inverse.name]?.isEmpty == true { record.toMany[inverse.name] = nil }
                } else if record.toOne[inverse.name] == source {
                    record.toOne[inverse.name] = nil
                }
            }
        }
        for target in added.sorted() {
            var displaced: ObjectID?
            try modify(target) { record in
                if inverse.isToMany {
                    record.toMany[inverse.name, default: []].insert(source)
                } else {
                    if let previous = record.toOne[inverse.name], previous != source { displaced = previous }
                    record.toOne[inverse.name] = source
                }
            }
            // The target left its previous owner, whose side of the relationship must drop it.
            if let displaced {
                try modify(displaced) { record in
                    if relationship.isToMany {
                        record.toMany[relationship.name]?.remove(target)
                        if record.toMany[relationship.name]?.isEmpty == true { record.toMany[relationship.name] = nil }
                    } else if record.toOne[relationship.name] == target {
                        record.toOne[relationship.name] = nil
                    }
                }
            }
        }
    }

    private func planDeletion(of id: ObjectID, into plan: inout [ObjectID]) throws {
        guard !plan.contains(id), let record = try current(id), let entity = schema.entity(id.entity) else { return }
        plan.append(id)
        for relationship in entity.relationships {
            let targets = Self.targets(of: record, relationship)
            switch relationship.deleteRule {
            case .deny where !targets.isEmpty:
                throw PersistenceError(
                    .deleteDenied,
                    "cannot delete \(id): its \(relationship.name) relationship still holds \(targets.count) record(s) and its delete rule is deny"
                )
            case .cascade:
                for target in targets.sorted() { try planDeletion(of: target, into: &plan) }
            default:
                break
            }
        }
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
