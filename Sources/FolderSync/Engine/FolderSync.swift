import Dispatch
import FileCoordination
import Foundation
import Logging
import Persistence
import Synchronization

/// Keeps one store in step with the same store on other devices through a shared container
/// directory that a file-sync engine (Syncthing, Dropbox, NFS, rclone) carries between them.
///
/// Each local save becomes a log: an immutable, numbered, checksummed file in this device's
/// own folder of the container (a device never writes another device's files). Other devices'
/// logs are applied in an `.import` context. Merges are last-writer-wins per attribute, per
/// owning relationship and per to-many element, decided by hybrid logical clocks; a deletion is
/// final. Every device that has applied the same set of logs holds the same data, whatever the
/// order the logs arrived in. See `Docs/Sync.md` for the container format and the rules.
///
/// Everything the merge needs (per-record clocks, the outgoing logs not yet written, which logs
/// were applied) lives in the store's metadata and is committed in the same atomic write as the
/// data it describes, so a crash at any point resumes correctly.
///
/// From its creation until ``stop()`` it takes part in every save of its coordinator, and the
/// coordinator keeps it (like a presenter added to a file coordinator): letting go of the last
/// reference does not end it. Call ``stop()`` when done: it stops watching and leaves saves, and
/// once nothing else holds it, its lock file is closed.
public final class FolderSync: SaveParticipant, SyncPart, SyncEventRecipient, Sendable {
    /// What the parts of sync work with (the store, the layout, this device, the clock, the lock).
    let context: SyncContext
    /// This installation's device id (kept in the store's metadata).
    public var deviceID: String { context.deviceID }
    /// Where the logs live.
    public var layout: ContainerLayout { context.layout }
    /// The store kept in step.
    public var store: any PersistentStore { context.store }
    /// The coordinator whose contexts write the store.
    public var coordinator: StoreCoordinator { context.coordinator }
    /// Where sync logs (lifecycle at debug, benign conditions at info, failures at warning).
    public var logger: Logger { context.logger }
    /// The record of which devices take part (``enable(policy:live:)`` registers this one).
    public var sentinel: any SyncSentinel { context.sentinel }
    /// Where sync stands and what live sync has queued (``SyncMachine``): the one lock every
    /// transition takes; what a transition asks is done after it is released.
    let machine = Mutex(SyncMachine())
    /// Where exports, imports, checks and timers run, one at a time.
    let queue = DispatchQueue(label: "concord.sync", qos: .utility)
    /// The store's one inotify watcher, shared by live sync and reset watching.
    let syncWatcher: SyncWatcher
    /// The lifecycle: enabled, paused, reset, waiting for the container.
    let lifecycle = Lifecycle()
    /// The parts of sync (``SyncParts``).
    let parts: SyncParts
    /// Where delegate calls are made, one at a time.
    let delegateQueue = DispatchQueue(label: "concord.sync.delegate")

    /// Sets up sync of `store` (one of `coordinator`'s stores) through the folder `storeName` of
    /// `container`. The device id is read from the store's metadata, or made (from `deviceID`
    /// when given) and recorded there. Without a `logger`, sync logs to `concord.sync` at the
    /// level `CONCORD_DEBUG` sets (see ``environmentLogger(label:)``). `sentinel` makes the
    /// sentinel for the store's layout (default: ``DeviceFileSentinel``). The container need not
    /// exist yet: ``enable(policy:live:)`` waits for it.
    public init(
        coordinator: StoreCoordinator,
        store: any PersistentStore,
        container: URL,
        storeName: String,
        deviceID: String? = nil,
        settleInterval: Duration = .seconds(2),
        wallClock: @escaping @Sendable () -> UInt64 = { UInt64(Date().timeIntervalSince1970 * 1000) },
        now: @escaping @Sendable () -> Date = Date.init,
        sentinel: (@Sendable (ContainerLayout) -> any SyncSentinel)? = nil,
        logger: Logger? = nil
    ) throws {
        // Two on one store and coordinator would each take part in its saves, each with its own
        // hold of the sync lock: the second would wait for the first forever inside one save.
        if coordinator.saveParticipants.contains(where: { ($0 as? FolderSync)?.store === store }) {
            throw SyncError(
                .invalidState,
                "sync is set up for this store on this coordinator already: stop() that FolderSync first",
                url: store.url
            )
        }
        let logger = logger ?? Self.environmentLogger()
        syncWatcher = SyncWatcher(logger: logger)
        let renamed: Bool
        (context, renamed) = try SyncContext.open(
            store: store,
            coordinator: coordinator,
            layout: ContainerLayout(container: container, storeName: storeName),
            deviceID: deviceID,
            settleInterval: settleInterval,
            wallClock: wallClock,
            now: now,
            sentinel: sentinel,
            logger: logger
        )
        let (device, layout) = (context.deviceID, context.layout)
        parts = SyncParts(context: context, watcher: syncWatcher)

        // A container that is not there yet is not an error: ``enable(policy:live:)`` waits for it.
        // (Not for a new id not joined yet: its join first checks that nobody uses it, and an id
        // given up before it joined leaves no folder behind to hold compaction back.)
        if ContainerAvailability.of(container) == .available, !renamed {
            try? FileManager.default.createDirectory(at: layout.deviceFolder(device), withIntermediateDirectories: true)
        }
        try moveRenamedEntries()
        parts.host.attach(self)
        queue.setSpecific(key: onSyncQueue, value: ObjectIdentifier(self))
        context.events.deliver(through: self)
        coordinator.addSaveParticipant(self)
        logger.debug(
            "sync set up",
            metadata: ["concord.device": "\(device)", "concord.container": "\(container.path)"]
        )
    }

    /// Stops taking part in saves, and stops live sync and watching, leaving the registration in
    /// the container as it is (the next ``enable(policy:live:)`` resumes). Logs already written stay.
    /// Work live sync had begun (an export, an import) ends before this returns: from then on
    /// sync writes nothing, in the container or the store. (Called under the sync lock, from an
    /// entity policy of an import's save say, it returns at once: that work may be waiting for
    /// the lock. Events reach observers only after the lock is released.) An import or a commit
    /// under way on another thread, or the import whose save called this, ends with sync still
    /// taking part in its saves: what it removes as duplicates is recorded.
    public func stop() {
        let stopped = machine.withLock { machine in
            let actions = machine.stop()
            return (actions, machine.generation)
        }
        perform(stopped.0)
        context.events.finish()
        // An import or a commit under way (on any thread, or later in the import whose event
        // called this) keeps its part in saves to the end: the bookkeeping of what it removes
        // is in its commit. Sync leaves saves once the lock is free, unless enabled again since.
        let leave: @Sendable () -> Void = { [weak self] in
            guard let self, self.machine.withLock({ $0.generation == stopped.1 }) else { return }
            self.coordinator.removeSaveParticipant(self)
        }
        do {
            try syncLock.whenFree(leave)
        } catch {
            logger.warning(
                "cannot take the sync lock to stop: leaving saves at once",
                metadata: ["concord.error": "\(error)"]
            )
            leave()
        }
        // (Not when called under the sync lock, from an entity policy of an import's save, say:
        // the work may be waiting for that lock.)
        if !syncLock.isHeldByCurrentThread { onQueue {} }
    }

    static func makeDeviceID() -> String {
        let alphabet = Array("abcdefghijkmnpqrstuvwxyz23456789")
        return String((0..<12).map { _ in alphabet[Int.random(in: 0..<alphabet.count)] })
    }

    // MARK: Events

    /// Sync's events from now until the loop ends.
    public func events() -> AsyncStream<SyncEvent> { context.events.stream() }

    /// Delivers what every part emits (``SyncEvents``) once the sync lock is released, in order:
    /// the notifications (``Foundation/Notification/Name/concordSyncEvent`` for every event,
    /// ``Foundation/Notification/Name/concordSyncContainerReset`` for a reset) on the emitting
    /// thread, and the delegate (a state change, a reset) on a serial queue of its own. (The
    /// ``events()`` streams have the event already.)
    func deliver(_ event: SyncEvent) {
        NotificationCenter.default.post(name: .concordSyncEvent, object: self, userInfo: ["event": event])
        if case .containerReset(let reason) = event {
            NotificationCenter.default.post(
                name: .concordSyncContainerReset,
                object: self,
                userInfo: ["reason": reason]
            )
        }
        switch event {
        case .stateChanged(let state):
            guard let delegate = lifecycle.settings.withLock({ $0.delegate }) else { return }
            delegateQueue.async { delegate.folderSync(self, didChangeState: state) }
        case .containerReset(let reason):
            guard let delegate = lifecycle.settings.withLock({ $0.delegate }) else { return }
            delegateQueue.async { delegate.folderSync(self, didStopAfterReset: reason) }
        default:
            break
        }
    }
}

// MARK: Parts

extension FolderSync {

    /// Whether `id`, a relationship target the store does not hold, was deleted (a tombstone, or
    /// a duplicate removed by policy) or has not arrived: sync delivers records in any order
    /// across devices, and a reference may come before its target.
    public func state(ofMissing id: ObjectID) throws -> MissingTargetState? {
        try parts.duplicates.state(ofMissing: id)
    }

    /// The winner that `id`, a removed duplicate, was folded into (following a winner that lost
    /// in turn), or `nil`.
    public func replacement(forMissing id: ObjectID) throws -> ObjectID? {
        try parts.duplicates.replacement(forMissing: id)
    }
}

extension FolderSync {
    /// How long after a device's numbering leapt (it was restored) its old logs may still arrive
    /// under the numbers leapt over, as far as baselines and acknowledgements go: 30 days (as
    /// ``tombstoneLifetime``). Until then they cover that device's logs only up to the leap. A log
    /// that arrives later is still applied by every device that knows of the leap.
    public static let leapWindow = Numbering.leapWindow
}

// MARK: Acknowledgements

extension FolderSync {
    /// Writes this device's acknowledgement (what it has applied) into its own folder.
    @discardableResult
    public func publishAcknowledgement() throws -> SyncAcknowledgement {
        try parts.acknowledger.publishAcknowledgement(left: false)
    }

    /// Every device's published acknowledgement (unreadable ones are skipped, and so are those
    /// found in another device's folder than their own, and those published for a container that
    /// another device replaced: a device that had not seen the
    /// replacement yet wrote them, and they say nothing of what it applied here).
    public func acknowledgements() -> [SyncAcknowledgement] {
        parts.acknowledger.acknowledgements()
    }
}

// MARK: Compaction

extension FolderSync {
    /// Writes the logs still in the outbox, folds this device's store into a baseline in its own
    /// folder, then removes this device's logs that every registered device has applied and that
    /// a baseline covers. Returns the number of logs removed. The registered devices are the sentinel's (or, for sync driven
    /// without ``enable(policy:live:)``, every device folder); a registered device that has not
    /// published an acknowledgement holds everything back.
    @discardableResult
    public func compact() throws -> Int {
        // Under the sync lock: what this device has applied and exported is read whole, and other
        // processes of the device neither import nor commit meanwhile.
        // The outbox goes out first: a baseline holds what the store holds, so it must cover no
        // log of this device that is not in the container too (a device that applied the logs
        // before it would wait for one that a crash or a lost store kept from ever coming, while
        // devices starting from the baseline had its changes).
        try syncLock.withLock { permit in
            try exportPending(holding: permit)
            let compacted = try parts.compactor.compact(holding: permit, tombstoneLifetime: tombstoneLifetime)
            // Every device has applied them: their outbox copies are no longer needed for healing.
            if compacted.highest > 0 { try parts.outbox.releaseOutbox(through: compacted.highest, holding: permit) }
            try parts.retiredLogs.release()
            return compacted.removed
        }
    }

    /// How many tombstones this store keeps: the clocks of deleted records (kept so that a late
    /// write cannot bring one back), and writes waiting for their record's creation.
    /// ``compact()`` collects those no device can need any more.
    public func tombstoneCount() throws -> Int {
        try parts.compactor.tombstoneCount()
    }
}

// MARK: Healing

extension FolderSync {
    /// The name of the file in which a device asks for logs it cannot read.
    public static let requestsName = Healer.requestsName

    /// How long a log that holds others back may be missing (or damaged) before it is reported
    /// (``SyncEvent/missingLog(device:sequence:url:)``) and asked for. Ten seconds by default: a
    /// file-sync engine usually delivers a device's files within that, in whatever order.
    public var missingLogGracePeriod: Duration {
        get { parts.healer.missingLogGracePeriod }
        set { parts.healer.missingLogGracePeriod = newValue }
    }

    /// Gives up on a log that its device cannot publish again (a device gone for good, its log
    /// lost): it counts as applied, empty, so the logs after it (and those that depend on it) are
    /// applied. What it held is missing on this device until the log turns up (it is applied
    /// then, whenever that is); call it only when the app decides so, for example from the
    /// handler of ``SyncEvent/missingLog(device:sequence:url:)`` after a bound of its own. By
    /// default sync never gives up: it keeps waiting, and asking.
    public func skipMissingLog(device: String, sequence: UInt64) throws {
        try parts.healer.skipMissingLog(device: device, sequence: sequence)
    }
}

extension FolderSync {
    /// How many numbers a restored device's numbering leaps over, past the highest of its own the
    /// container knows of: its old logs that had not reached the container copy it restored
    /// from (a copy still filling on a new machine, a log still on its way) arrive under them,
    /// and are applied when they do, never overwritten by new logs under their names.
    public static let restoreLeap = Numbering.restoreLeap
}

extension FolderSync {
    /// Compares the store with the history sync keeps for its records. Every import and save
    /// keeps the two in step, so a mismatch is a divergence that no later log repairs (a device
    /// that lacks a record the others hold, or holds one they deleted): a check for tests,
    /// diagnostics and support, not for every save. It reads every record's history and, for
    /// those the history names, the store.
    public func historyMismatches() throws -> SyncHistoryMismatch {
        try HistoryCheck(context: context).mismatches()
    }
}

// MARK: Saves

extension FolderSync {
    /// Records each local save's changes as a log in the store's outbox, in the same commit;
    /// ``exportPending()`` then writes them into the container.
    public func willCommit(
        _ changes: inout StoreChanges,
        to store: any PersistentStore,
        origin: ChangeOrigin,
        context: ObjectContext
    ) throws {
        guard store === self.store else { return }
        // Live sync writes the log once saves pause.
        if try parts.exporter.record(&changes, origin: origin, context: context) { scheduleExportAfterSave() }
    }

    /// Runs a save's commit phase holding the sync lock (across threads and processes): the log
    /// number, the clocks and the outbox that ``willCommit(_:to:origin:context:)`` reads are
    /// what the commit then writes over, in this process or any other of this device. The save
    /// of an import or a join, made under the sync lock, carries its thread's permit and runs at
    /// once.
    public func performCommits<T>(_ body: () throws -> T) throws -> T {
        try syncLock.withLock(syncLock.currentPermit, catchingUp: false) { _ in try body() }
    }
}

// MARK: Joining

extension FolderSync {
    /// Brings data the store held before sync was turned on into sync: every record that has
    /// never been exported (it has no clocks: it was neither saved nor imported while sync was
    /// on) is written to the container as a creation, with every attribute and its owning
    /// relationships, exactly as a local save that inserted it would have been.
    ///
    /// The store is read entity by entity in id order, `batchSize` records at a time, and each
    /// batch becomes one log; after each batch of records with derived to-many sides (folders)
    /// go their members (each folder's notes), so that an importing device rewrites each folder
    /// in few of its saves instead of in every one. Each log is committed to the store's outbox
    /// together with its records' clocks and then written into the container. Memory stays
    /// proportional to the batch (and the members of one batch's records), however large the
    /// store, provided the store reads metadata by key
    /// (`PersistentStore.metadataEntries(forKeys:)`; the SQLite store does).
    ///
    /// Safe to call at any time and any number of times: records already in sync are skipped,
    /// so a second call exports nothing, and a join interrupted by a crash resumes where its
    /// last committed batch ended. Local saves and imports may run meanwhile; each batch waits
    /// for them and they for it. `progress` (and ``SyncEvent/joinProgress(examined:of:)``)
    /// reports after each batch the records examined so far, of the store's total.
    ///
    /// - Returns: how many records were exported.
    /// - Throws: the store's errors, and ``SyncError`` when a log cannot be written (a batch
    ///   committed but not yet written stays in the outbox for ``exportPending()``).
    @discardableResult
    public func exportExistingData(batchSize: Int = 1000, progress: ((Int, Int) -> Void)? = nil) throws -> Int {
        try parts.joiner.exportLocalData(batchSize: batchSize, progress: progress, everyRecord: false)
    }

}
