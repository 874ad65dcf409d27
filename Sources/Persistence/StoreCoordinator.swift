import FileCoordination
import Foundation
import Logging
import Synchronization

extension Notification.Name {
    /// Posted by a ``StoreCoordinator`` (the notification's object) for every ``StoreEvent``;
    /// `userInfo["event"]` holds the event.
    public static let concordStoresDidChange = Notification.Name("ConcordStoresDidChange")
}

/// The stores an app's contexts read and write: stores are added by type name and location,
/// each holding the records of some or all entities.
///
/// The coordinator relays every ``StoreEvent`` of its stores to its listeners (contexts,
/// ``events()`` sequences, and `NotificationCenter` under `Notification.Name.concordStoresDidChange`).
/// A store whose files are deleted is dropped from ``stores`` when it says so.
public final class StoreCoordinator: Sendable {
    /// The schema every store of this coordinator follows.
    public let schema: Schema
    /// Where store types are looked up.
    public let registry: StoreRegistry
    /// Where the coordinator logs (lifecycle at debug, failures at warning).
    public let logger: Logger
    /// The entities' repair and uniqueness policies, used by every context on this coordinator.
    public let policies = EntityPolicies()

    private struct Entry {
        var store: any PersistentStore
        var entities: Set<String>?
        var listener: UInt64
    }

    private struct State {
        var entries: [Entry] = []
        var listeners: [UInt64: @Sendable (StoreEvent) -> Void] = [:]
        var saveListeners: [UInt64: @Sendable (ChangeSet) -> Void] = [:]
        var participants: [any SaveParticipant] = []
        var nextListener: UInt64 = 0
    }

    private let state = Mutex(State())

    /// A coordinator for stores of `schema`.
    public init(
        schema: Schema,
        registry: StoreRegistry = .shared,
        logger: Logger = Logger(label: "concord.persistence")
    ) {
        self.schema = schema
        self.registry = registry
        self.logger = logger
    }

    deinit {
        for entry in state.withLock({ $0.entries }) {
            entry.store.events.removeListener(entry.listener)
            entry.store.close()
        }
    }

    /// Opens the store of type `type` at `url` (creating it if there is none) and adds it.
    ///
    /// - Parameter type: the type name the store plugin is registered under (`"sqlite"`, say).
    /// - Parameter url: the store's file.
    /// - Parameter options: the store's options.
    /// - Parameter entities: the entities whose records it holds; `nil` for every entity no
    ///   store added earlier holds.
    @discardableResult
    public func addStore(
        ofType type: String,
        at url: URL,
        options: StoreOptions = StoreOptions(),
        entities: Set<String>? = nil
    ) throws -> any PersistentStore {
        if let entities, let unknown = entities.first(where: { schema.entity($0) == nil }) {
            throw PersistenceError(
                .invalidRequest,
                "no entity \(unknown) in schema version \(schema.version)",
                url: url
            )
        }
        let storeType = try registry.storeType(named: type)
        let store = try storeType.init(url: url, schema: schema, options: options)
        let listener = store.events.addListener { [weak self, weak store] event in
            guard let self, let store else { return }
            self.storeDidReport(event, store: store)
        }
        state.withLock { $0.entries.append(Entry(store: store, entities: entities, listener: listener)) }
        logger.debug("added store", metadata: ["concord.store": "\(url.path)", "concord.storeType": "\(type)"])
        return store
    }

    /// Closes `store` and removes it from the coordinator.
    public func removeStore(_ store: any PersistentStore) {
        let removed = state.withLock { state -> Entry? in
            guard let index = state.entries.firstIndex(where: { $0.store === store }) else { return nil }
            return state.entries.remove(at: index)
        }
        guard let removed else { return }
        removed.store.events.removeListener(removed.listener)
        removed.store.close()
    }

    /// The stores, in the order they were added.
    public var stores: [any PersistentStore] { state.withLock { $0.entries.map(\.store) } }

    /// The store that holds the records of `entity`.
    public func store(forEntity entity: String) throws(PersistenceError) -> any PersistentStore {
        let store = state.withLock { state in
            state.entries.first { $0.entities?.contains(entity) ?? true }?.store
        }
        guard let store else {
            throw PersistenceError(.noStore, "no store of this coordinator holds \(entity) records")
        }
        return store
    }

    /// Every event of every store, from now until the loop ends; ending the loop ends the
    /// observation.
    public func events() -> AsyncStream<StoreEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: StoreEvent.self, bufferingPolicy: .unbounded)
        let token = addListener { continuation.yield($0) }
        continuation.onTermination = { [weak self] _ in self?.removeListener(token) }
        return stream
    }

    /// Calls `handler` with every event of every store, on the thread the store reports it.
    public func addListener(_ handler: @escaping @Sendable (StoreEvent) -> Void) -> UInt64 {
        state.withLock { state in
            state.nextListener += 1
            state.listeners[state.nextListener] = handler
            return state.nextListener
        }
    }

    /// Removes a listener added with ``addListener(_:)``.
    public func removeListener(_ token: UInt64) {
        _ = state.withLock { $0.listeners.removeValue(forKey: token) }
    }

    /// Calls `handler` with the change set of every successful save of every context on this
    /// coordinator, synchronously on the saving thread after the commit (the hook the sync layer
    /// exports from).
    public func addSaveListener(_ handler: @escaping @Sendable (ChangeSet) -> Void) -> UInt64 {
        state.withLock { state in
            state.nextListener += 1
            state.saveListeners[state.nextListener] = handler
            return state.nextListener
        }
    }

    /// Adds a participant to every save of every context on this coordinator (see
    /// ``SaveParticipant``), after those added before. Adding one that takes part already
    /// changes nothing (it never leaves saves in between).
    public func addSaveParticipant(_ participant: any SaveParticipant) {
        state.withLock { state in
            guard !state.participants.contains(where: { $0 === participant }) else { return }
            state.participants.append(participant)
        }
    }

    /// Removes a participant.
    public func removeSaveParticipant(_ participant: any SaveParticipant) {
        state.withLock { $0.participants.removeAll { $0 === participant } }
    }

    /// The participants, in the order they take part.
    public var saveParticipants: [any SaveParticipant] { state.withLock { $0.participants } }

    /// Removes a listener added with ``addSaveListener(_:)``.
    public func removeSaveListener(_ token: UInt64) {
        _ = state.withLock { $0.saveListeners.removeValue(forKey: token) }
    }

    /// The change set of every save of every context on this coordinator, from now until the
    /// loop ends.
    public func changeSets() -> AsyncStream<ChangeSet> {
        let (stream, continuation) = AsyncStream.makeStream(of: ChangeSet.self, bufferingPolicy: .unbounded)
        let token = addSaveListener { continuation.yield($0) }
        continuation.onTermination = { [weak self] _ in self?.removeSaveListener(token) }
        return stream
    }

    func contextDidSave(_ changes: ChangeSet) {
        let listeners = state.withLock { $0.saveListeners.sorted { $0.key < $1.key }.map(\.value) }
        for listener in listeners { listener(changes) }
    }

    private func storeDidReport(_ event: StoreEvent, store: any PersistentStore) {
        if event.kind == .removed {
            logger.warning("store files deleted; store torn down", metadata: ["concord.store": "\(event.url.path)"])
            removeStore(store)
        } else {
            logger.debug(
                "store event",
                metadata: ["concord.store": "\(event.url.path)", "concord.event": "\(event.kind)"]
            )
        }
        let listeners = state.withLock { $0.listeners.sorted { $0.key < $1.key }.map(\.value) }
        for listener in listeners { listener(event) }
        NotificationCenter.default.post(name: .concordStoresDidChange, object: self, userInfo: ["event": event])
    }
}

/// Takes part in saves: sees what each store is about to commit and may add to it (metadata
/// entries, typically), so that what it records commits atomically with the data. The sync layer
/// records its clocks and its outgoing history this way. Throwing fails the save before anything
/// is committed to that store.
///
/// What a participant reads of the save is public: the changes, the context's origin, what
/// duplicate resolution did (``ObjectContext/duplicateRedirects``,
/// ``ObjectContext/removedDuplicates``, ``ObjectContext/duplicateRelinks``,
/// ``ObjectContext/winnerMerges``) and which records the context found absent
/// (``ObjectContext/storeLacked(_:)``): a sync layer of another design needs nothing more.
public protocol SaveParticipant: AnyObject, Sendable {
    /// Called for each store a save commits to, after validation and just before the commit.
    func willCommit(
        _ changes: inout StoreChanges,
        to store: any PersistentStore,
        origin: ChangeOrigin,
        context: ObjectContext
    ) throws
    /// Called after the commit to `store` ended, on the thread that called ``willCommit(_:to:origin:context:)``,
    /// whenever that was called (even if it threw): `succeeded` says whether the store committed.
    /// A participant that serializes commits (holds a lock from `willCommit`) releases it here.
    func didCommit(to store: any PersistentStore, origin: ChangeOrigin, succeeded: Bool)
    /// Runs `body`, the part of a save that reads what the stores hold and commits to them (the
    /// deferred-validation bookkeeping, every ``willCommit(_:to:origin:context:)``, the commits and
    /// every ``didCommit(to:origin:succeeded:)``), inside whatever exclusion the participant needs:
    /// a participant whose state must not change between its read and the commit (the sync
    /// layer's log numbers) holds a lock across processes here. Participants nest in the order
    /// they were added. The default runs `body` as it is.
    func performCommits<T>(_ body: () throws -> T) throws -> T
    /// What the participant knows of `id`, a relationship's target that the stores do not hold:
    /// ``MissingTargetState/deleted``, ``MissingTargetState/notArrived``, or `nil` when it does not
    /// know (the default). With no participant knowing, a missing target counts as deleted.
    func state(ofMissing id: ObjectID) throws -> MissingTargetState?
    /// The record that now stands for `id`, a relationship target the stores do not hold: the
    /// winner a removed duplicate was folded into, or `nil` (the default). A local save rewrites
    /// a reference to such a target before validation fails on it.
    func replacement(forMissing id: ObjectID) throws -> ObjectID?
}

extension SaveParticipant {
    /// Does nothing.
    public func didCommit(to store: any PersistentStore, origin: ChangeOrigin, succeeded: Bool) {}

    /// Runs `body`.
    public func performCommits<T>(_ body: () throws -> T) throws -> T { try body() }

    /// Does not know.
    public func state(ofMissing id: ObjectID) throws -> MissingTargetState? { nil }

    /// Knows of none.
    public func replacement(forMissing id: ObjectID) throws -> ObjectID? { nil }
}

extension StoreCoordinator {
    /// Moves a store that is not open, with all its files (for SQLite the database, `-wal` and
    /// `-shm`), under file coordination: any process coordinating on the files waits.
    public static func moveStore(
        ofType type: String,
        from source: URL,
        to destination: URL,
        registry: StoreRegistry = .shared
    ) throws {
        let storeType = try registry.storeType(named: type)
        let main = storeType.files(at: source)[0]
        let suffixes = storeType.files(at: source).dropFirst().map { String($0.path.dropFirst(main.path.count)) }
        do {
            try FileCoordinator().moveItem(at: main, to: destination, companionSuffixes: suffixes)
        } catch {
            throw PersistenceError(
                .ioFailed,
                "cannot move the store to \(destination.path)",
                url: source,
                underlying: error
            )
        }
    }

    /// Deletes a store that is not open, with all its files, under file coordination.
    public static func destroyStore(ofType type: String, at url: URL, registry: StoreRegistry = .shared) throws {
        let storeType = try registry.storeType(named: type)
        let coordinator = FileCoordinator()
        for file in storeType.files(at: url).reversed() where FileManager.default.fileExists(atPath: file.path) {
            do {
                try coordinator.removeItem(at: file)
            } catch {
                throw PersistenceError(.ioFailed, "cannot remove the store's file", url: file, underlying: error)
            }
        }
    }
}
