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

    var schema: Schema { coordinator.schema }
    var inserted: [ObjectID: Record] = [:]
    var updated: [ObjectID: (base: Record, current: Record)] = [:]
    var deleted: [ObjectID: Record] = [:]
    /// The properties and to-many elements the app set explicitly in updated records (see
    /// ``setValue(_:forKey:of:)``): the save writes them even where the store already agrees.
    var written: [ObjectID: WrittenProperties] = [:]
    /// The store's version of each record as this context last read it: the base an update is
    /// compared with, so a save commits only what this context changed.
    var snapshots: [ObjectID: Record] = [:]
    /// Ids read ahead by ``prefetch(_:)``: their store version is in `snapshots`, or the store
    /// did not hold them; lookups need no store read until the next save or reset.
    var prefetched = Set<ObjectID>()
    /// Ids this context looked up one by one since its last save or reset that the store did not
    /// hold then.
    var readAbsent = Set<ObjectID>()
    var pendingMetadata: [ObjectIdentifier: (store: any PersistentStore, entries: [String: Data?])] = [:]
    /// The records ``resolveDuplicates(of:)`` removed since the last save or rollback, each with
    /// the winner it was folded into. A save participant reads them in
    /// ``SaveParticipant/willCommit(_:to:origin:context:)``: a sync layer records them, so that a
    /// reference to a removed duplicate that arrives later goes to the winner.
    public internal(set) var duplicateRedirects: [ObjectID: ObjectID] = [:]
    /// The records of ``duplicateRedirects`` as they were just before their removal, since the
    /// last save or rollback (a save participant keeps them to undo a removal that later writes
    /// make wrong, or to report what was folded).
    public internal(set) var removedDuplicates: [ObjectID: Record] = [:]
    /// For each record whose relationship ``resolveDuplicates(of:)`` moved from a removed
    /// duplicate to its winner, since the last save or rollback: the relationship's name and the
    /// removed duplicate it pointed at.
    public internal(set) var duplicateRelinks: [ObjectID: [String: ObjectID]] = [:]
    /// What merging each duplicate changed in its winner (the policy's
    /// ``UniquenessPolicy/merge(_:into:in:)`` and the relationships moved over), one step per
    /// loser in the order they were folded, since the last save or rollback. A save participant
    /// that undoes a removal undoes these changes with it.
    public internal(set) var winnerMerges: [ObjectID: [WinnerMerge]] = [:]
    /// Records whose references wait for targets that have not arrived (set by validation).
    var keptForValidation = Set<ObjectID>()
    /// The records of the deferred-validation lists that this save's validation looked at.
    var validatedDeferred = Set<ObjectID>()
    /// The entries of those lists it read, per store: what the save takes off.
    var validatedDeferredEntries: [ObjectIdentifier: [DeferredEntry]] = [:]
    let inbox: Inbox
    private let listenerToken: UInt64

    /// What a context learns from other threads: its coordinator's store events.
    final class Inbox: Sendable {
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

    /// What the unsaved changes hold in memory: how many records are updated, and how many
    /// to-many members the inserted and updated records hold (a record updated on one side of a
    /// relationship holds its whole set, twice: as read and as changed). Batching code (an import
    /// applying many logs) saves once either passes its bound, so memory follows the save.
    public var pendingFootprint: PendingFootprint {
        var members = 0
        for record in inserted.values { members += record.toMany.values.reduce(0) { $0 + $1.count } }
        for pair in updated.values {
            members += pair.base.toMany.values.reduce(0) { $0 + $1.count }
            members += pair.current.toMany.values.reduce(0) { $0 + $1.count }
        }
        return PendingFootprint(updatedRecords: updated.count, members: members)
    }

    /// The unsaved inserted, updated and deleted records' ids.
    public var pendingChanges: (inserted: Set<ObjectID>, updated: Set<ObjectID>, deleted: Set<ObjectID>) {
        (Set(inserted.keys), Set(updated.keys), Set(deleted.keys))
    }

    // MARK: Observing

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

    func processInbox() throws {
        let events = inbox.events.withLock { events in
            defer { events.removeAll() }
            return events
        }
        for event in events where event.kind == .removed {
            prefetched = []
            readAbsent = []
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

    func storeRecord(_ id: ObjectID) throws -> Record? {
        if prefetched.contains(id) { return snapshots[id] }
        let record = try coordinator.store(forEntity: id.entity).records(with: [id]).first
        snapshots[id] = record
        if record == nil { readAbsent.insert(id) } else { readAbsent.remove(id) }
        return record
    }

    /// Whether this context's last read of `id` (since its last save or reset) found the store
    /// without it: a record it inserts under that id is new there, as far as it read. (A save
    /// participant then need not read the store's version of it again.)
    public func storeLacked(_ id: ObjectID) -> Bool {
        snapshots[id] == nil && (readAbsent.contains(id) || prefetched.contains(id))
    }

    private func remember(_ records: [Record]) -> [Record] {
        for record in records { snapshots[record.id] = record }
        return records
    }

    func current(_ id: ObjectID) throws -> Record? {
        if deleted[id] != nil { return nil }
        if let record = inserted[id] { return record }
        if let pair = updated[id] { return pair.current }
        guard schema.entity(id.entity) != nil else { return nil }
        return try storeRecord(id)
    }
}

/// What merging one removed duplicate changed in its winner (``ObjectContext/winnerMerges``).
public struct WinnerMerge: Sendable, Hashable {
    /// The winner just before the merge.
    public var before: Record
    /// The winner just after it.
    public var after: Record

    /// A merge step.
    public init(before: Record, after: Record) {
        self.before = before
        self.after = after
    }
}

/// What a context's unsaved changes hold in memory (``ObjectContext/pendingFootprint``).
public struct PendingFootprint: Sendable, Hashable {
    /// How many records are updated.
    public var updatedRecords: Int
    /// How many to-many members the inserted and updated records hold.
    public var members: Int

    /// A footprint.
    public init(updatedRecords: Int, members: Int) {
        self.updatedRecords = updatedRecords
        self.members = members
    }
}
