import Dispatch
import FileCoordination
import FileWatching
import Foundation
import Logging
import Persistence

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
public final class FolderSync: SaveParticipant, SyncEventRecipient, Sendable {
    /// The engine: the state machine, the queue, the watcher and the parts (``SyncEngine``).
    let engine: SyncEngine
    /// Where delegate calls are made, one at a time.
    private let delegateQueue = DispatchQueue(label: "concord.sync.delegate")

    /// This installation's device id (kept in the store's metadata).
    public var deviceID: String { engine.deviceID }
    /// Where the logs live.
    public var layout: ContainerLayout { engine.layout }
    /// The store kept in step.
    public var store: any PersistentStore { engine.store }
    /// The coordinator whose contexts write the store.
    public var coordinator: StoreCoordinator { engine.coordinator }
    /// Where sync logs (lifecycle at debug, benign conditions at info, failures at warning).
    public var logger: Logger { engine.logger }
    /// The record of which devices take part (``enable(policy:live:)`` registers this one).
    public var sentinel: any SyncSentinel { engine.sentinel }

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
        let (context, renamed) = try SyncContext.open(
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
        engine = SyncEngine(context: context, watcher: SyncWatcher(logger: logger))
        try engine.prepareContainer(renamed: renamed)
        engine.attach(self)
        context.events.deliver(through: self)
        coordinator.addSaveParticipant(self)
        logger.debug(
            "sync set up",
            metadata: ["concord.device": "\(context.deviceID)", "concord.container": "\(container.path)"]
        )
    }

    // MARK: Lifecycle

    /// Sync's state now.
    public var state: SyncState { engine.state }

    /// Told of resets and state changes; held weakly.
    public var delegate: (any FolderSyncDelegate)? {
        get { engine.settings.withLock { $0.delegate } }
        set { engine.settings.withLock { $0.delegate = newValue } }
    }

    /// Turns sync on: checks the sentinel, joins the container as its situation and `policy`
    /// say, registers this device, and starts live sync (``start(watcher:rescanInterval:)``).
    ///
    /// - A device registered since it last synced (after ``pause()`` or a relaunch) resumes: the
    ///   saves it made meanwhile are exported, what arrived is imported.
    /// - An empty container is started with the local data.
    /// - A device that never synced with a container holding data, or a device that synced before
    ///   and is no longer registered (it was disabled, or the container was reset), asks `policy`
    ///   (``SyncJoinChoice``); whatever it chooses keeps the data it says to keep.
    /// - A container that cannot be used (missing, not mounted, read-only) is reported
    ///   (``SyncEvent/containerUnavailable(_:)``), the state becomes
    ///   ``SyncState/waitingForContainer(_:)``, and the container is looked at every
    ///   ``availabilityCheckInterval`` until it can be used; then sync starts by itself.
    ///
    /// While syncing, the container and the sentinel are watched: if the container disappears or
    /// this device's registration is removed, sync stops (``SyncState/reset(_:)``), the local store
    /// stays intact and usable, and the app is told once: the delegate, ``SyncEvent/containerReset(_:)``
    /// and `Notification.Name.concordSyncContainerReset`.
    ///
    /// - Returns: the state reached: ``SyncState/syncing``, or ``SyncState/waitingForContainer(_:)``.
    /// - Throws: the store's errors, ``SyncError`` when the container or the sentinel cannot be
    ///   written or read; sync is then not started, and the local data is as the failed step left
    ///   it (each step is idempotent: enabling again completes it).
    ///
    /// - Parameter policy: what to do in each situation the container can be found in.
    /// - Parameter live: whether sync then runs by itself (exports after saves, imports on
    ///   arrival, reset watching); `false` for a process that drives ``exportPending()`` and
    ///   ``importAvailable(batchSize:)`` itself, such as a one-shot command-line tool.
    @discardableResult
    public func enable(policy: SyncJoinPolicy = .default, live: Bool = true) throws -> SyncEnabling {
        try engine.enable(policy: policy, live: live)
    }

    /// Pauses sync: no exports, no imports, no reset watching; the device stays registered and its
    /// saves keep their history, which ``resume(policy:)`` exports.
    public func pause() {
        engine.pause()
    }

    /// Resumes paused sync: the same as ``enable(policy:live:)``, with the policy last given unless
    /// `policy` is (it is asked only if this device's registration disappeared meanwhile).
    @discardableResult
    public func resume(policy: SyncJoinPolicy? = nil) throws -> SyncEnabling {
        try engine.enable(policy: policy, live: nil)
    }

    /// Turns sync off for this device: live sync stops, this device's registration is removed
    /// from the sentinel (its logs stay for the others). The local data stays, and saves keep their
    /// history: enabling sync again later joins as a returning device, and a merge then exports
    /// what changed meanwhile with the clocks it had.
    public func disable() throws {
        try engine.disable()
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
        engine.stop()
    }

    // MARK: Events

    /// Sync's events from now until the loop ends.
    public func events() -> AsyncStream<SyncEvent> { engine.context.events.stream() }

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
        guard let delegate else { return }
        switch event {
        case .stateChanged(let state):
            delegateQueue.async { delegate.folderSync(self, didChangeState: state) }
        case .containerReset(let reason):
            delegateQueue.async { delegate.folderSync(self, didStopAfterReset: reason) }
        default:
            break
        }
    }

    /// Delivers a creation conflict once the sync lock is released: the notification
    /// ``Foundation/Notification/Name/concordSyncCreationConflict`` on the emitting thread, the
    /// delegate on its queue.
    func deliver(_ conflict: CreationConflict) {
        NotificationCenter.default.post(
            name: .concordSyncCreationConflict,
            object: self,
            userInfo: ["conflict": conflict]
        )
        guard let delegate else { return }
        delegateQueue.async { delegate.folderSync(self, didKeepBothCreations: conflict) }
    }

    // MARK: Driving sync

    /// Keeps the store in step without being asked: after every successful local save the new
    /// logs are written to the container, and every log that arrives from another device is
    /// imported.
    ///
    /// - Exports run on a serial queue of sync's own, never on the saving thread; saves that come
    ///   while an export runs are written together by one more export.
    /// - The store's device folders are watched (inotify, recursively); a log that appears,
    ///   is renamed into place or finishes arriving triggers ``importAvailable(batchSize:)`` on
    ///   the same queue. What was already there is imported at once.
    /// - While files are still arriving (or after a failure) the container is scanned again every
    ///   `rescanInterval`, so a partial file that stops changing is examined without an event.
    /// - Failures are logged and reported as ``SyncEvent/failed(_:)``; the engine keeps going and
    ///   tries again at the next save, arrival or re-scan.
    ///
    /// Calling `start` again while started does nothing. ``stop()`` ends it.
    ///
    /// - Parameter watcher: the inotify watcher to use; by default the store's own, which reset
    ///   watching shares, and which delivers each event as soon as it is read.
    /// - Parameter rescanInterval: how often to look again while files are still arriving; by
    ///   default half the settle interval, at least 50 ms.
    /// - Throws: `WatchError` if the devices folder cannot be watched.
    public func start(watcher: InotifyWatcher? = nil, rescanInterval: Duration? = nil) throws {
        try engine.start(watcher: watcher, rescanInterval: rescanInterval)
    }

    /// Whether live sync is running.
    public var isLive: Bool { engine.machine.withLock { $0.isLive } }

    /// Waits until the work live sync had queued when this was called (exports of the saves made
    /// before it, imports of the logs seen before it) has run. Returns at once when not started.
    public func waitForQueuedWork() {
        engine.waitForQueuedWork()
    }

    /// Writes every outgoing log not yet in the container; returns how many it wrote. A log
    /// that cannot be written (an unmounted or read-only container) stays in the outbox and is
    /// tried again next time: the error thrown then (and the ``SyncEvent/exportDeferred(_:)``
    /// event) is not about the saves, which are committed; nothing needs saving again. A damaged copy of a log in the container is replaced with the log
    /// (``SyncEvent/republished(_:)``). A valid log of other bytes under a log's name is never
    /// overwritten nor taken for the log: it is reported (``SyncEvent/logConflict(_:)`` and a log
    /// line naming the file) and the log is renumbered after the last one, so nothing is lost.
    /// When another device has replaced the container with its data, nothing is written: sync
    /// stops (``SyncEvent/containerReset(_:)``) and ``SyncError/Code/invalidState`` is thrown.
    @discardableResult
    public func exportPending() throws -> Int {
        try engine.exportPending()
    }

    /// Applies every complete log of other devices that this device has not applied yet, in an
    /// `.import` context, `batchSize` logs per save, under causal delivery: a device's logs apply
    /// in their order, each after what its writer had applied when it wrote it. Partial files wait
    /// for the next import. A log that is missing (a gap before later logs of its device, or a
    /// log another one depends on) or damaged holds back what comes after it: it is asked for
    /// (a request in this device's folder, which its owner answers by publishing it again) and,
    /// once it has been missing for ``missingLogGracePeriod``, reported
    /// (``SyncEvent/missingLog(device:sequence:url:)``, once per process); the app may give up on
    /// it with ``skipMissingLog(device:sequence:)``. Logs from a newer schema are kept for after an
    /// upgrade (``SyncEvent/newerSchemaFound(device:schemaVersion:)``), and so are logs in a newer
    /// file format (``SyncEvent/corruptLog(_:)`` with ``SyncError/Code/unsupportedLogVersion``).
    /// Applying a log twice changes nothing. When another device has replaced the container with
    /// its data, nothing is applied: sync stops (``SyncEvent/containerReset(_:)``) and
    /// ``SyncError/Code/invalidState`` is thrown.
    @discardableResult
    public func importAvailable(batchSize: Int = 64) throws -> ImportReport {
        try engine.importPass(batchSize: batchSize, containerChecked: false)
    }

    /// For a device that has applied nothing yet: starts from the newest baseline, if there is
    /// one, marking the logs it covers as applied. Returns the number of changes applied.
    @discardableResult
    public func startFromBaseline() throws -> Int {
        try engine.startFromBaseline()
    }

    /// Looks at the container now, as live sync does before each export and import, for an app
    /// that drives sync itself (``enable(policy:live:)`` with `live: false`): when the container
    /// was deleted or moved away, replaced by another device, or this device's registration was
    /// removed, sync stops with local data kept, the app is told once (the delegate and
    /// ``SyncEvent/containerReset(_:)``), and the reason is returned; `nil` while the container is as it
    /// was (or sync is not on). Unlike live sync it does not wait out ``resetGracePeriod``: call
    /// it when the container has had time to settle.
    @discardableResult
    public func checkForReset() -> ContainerResetReason? {
        engine.checkForReset()
    }

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
        try engine.parts.joiner.exportLocalData(batchSize: batchSize, progress: progress, everyRecord: false)
    }
}
