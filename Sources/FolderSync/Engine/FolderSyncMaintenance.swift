import Foundation
import Logging
import Persistence

// The rest of FolderSync's public API: its part in saves, settings, maintenance (compaction,
// acknowledgements, healing), diagnostics, device ids and logging. Every member forwards to the
// engine or a part.

extension FolderSync {
    // MARK: Saves

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
        if try engine.parts.exporter.record(&changes, origin: origin, context: context) {
            engine.scheduleExportAfterSave()
        }
    }

    /// Runs a save's commit phase holding the sync lock (across threads and processes): the log
    /// number, the clocks and the outbox that ``willCommit(_:to:origin:context:)`` reads are
    /// what the commit then writes over, in this process or any other of this device. The save
    /// of an import or a join, made under the sync lock, carries its thread's permit and runs at
    /// once.
    public func performCommits<T>(_ body: () throws -> T) throws -> T {
        try engine.syncLock.withLock(engine.syncLock.currentPermit, catchingUp: false) { _ in try body() }
    }

    // MARK: Settings

    /// How often a container that cannot be used is looked at again (default 2 s).
    public var availabilityCheckInterval: Duration {
        get { engine.settings.withLock { $0.availabilityInterval } }
        set { engine.settings.withLock { $0.availabilityInterval = newValue } }
    }

    /// How long what looks like a container reset must last before sync stops for it (default
    /// 250 ms): a sync engine that replaces a registration by deleting and re-creating it is not
    /// a reset, and a container deleted file by file is reported as deleted.
    public var resetGracePeriod: Duration {
        get { engine.machine.withLock { $0.resetGracePeriod } }
        set { engine.machine.withLock { $0.resetGracePeriod = newValue } }
    }

    /// How long a deleted record's tombstone (the clock of its deletion, kept in the store and in
    /// baselines) is kept at least, counted from the deletion (default 30 days). Compaction
    /// collects a tombstone only once every device has seen its deletion and this device has
    /// applied every log written before that, and then only after this long: a device that was
    /// away for longer and merges its old data back (``SyncJoinChoice/mergeLocalIntoContainer``)
    /// brings back records deleted meanwhile.
    public var tombstoneLifetime: Duration {
        get { engine.settings.withLock { $0.tombstoneLifetime } }
        set { engine.settings.withLock { $0.tombstoneLifetime = newValue } }
    }

    /// How often live sync publishes this device's acknowledgement and compacts (folds its
    /// history into a baseline, removes its logs every device has applied, collects stable
    /// tombstones), so that a container's log count stays bounded without the app's help: at most
    /// once per interval for the device, whichever of its processes runs live sync. Ten minutes
    /// by default.
    ///
    /// Folding reads and writes the whole store, so maintenance folds only when it is worth it:
    /// when there is no baseline yet, when the logs since the newest baseline reach a sixty-fourth
    /// of the changes it holds, or when some of this device's logs can go (the newest baseline
    /// covers them and every device applied them). A store of 100,000 records is then folded
    /// about once per 1,500 logs, not at every launch of a command run now and then.
    /// ``compact()`` folds whenever it is called.
    public var maintenanceInterval: Duration {
        get { engine.machine.withLock { $0.maintenanceInterval } }
        set { engine.machine.withLock { $0.maintenanceInterval = newValue } }
    }

    /// How long a log that holds others back may be missing (or damaged) before it is reported
    /// (``SyncEvent/missingLog(device:sequence:url:)``) and asked for. Ten seconds by default: a
    /// file-sync engine usually delivers a device's files within that, in whatever order.
    public var missingLogGracePeriod: Duration {
        get { engine.parts.healer.missingLogGracePeriod }
        set { engine.parts.healer.missingLogGracePeriod = newValue }
    }

    /// Whether the container can be used now.
    public var containerAvailability: ContainerAvailability { ContainerAvailability.of(layout.container) }

    // MARK: Maintenance

    /// Writes the logs still in the outbox, folds this device's store into a baseline in its own
    /// folder, then removes this device's logs that every registered device has applied and that
    /// a baseline covers. Returns the number of logs removed. The registered devices are the sentinel's (or, for sync driven
    /// without ``enable(policy:live:)``, every device folder); a registered device that has not
    /// published an acknowledgement holds everything back.
    @discardableResult
    public func compact() throws -> Int {
        try engine.compact()
    }

    /// How many tombstones this store keeps: the clocks of deleted records (kept so that a late
    /// write cannot bring one back), and writes waiting for their record's creation.
    /// ``compact()`` collects those no device can need any more.
    public func tombstoneCount() throws -> Int {
        try engine.parts.compactor.tombstoneCount()
    }

    /// Writes this device's acknowledgement (what it has applied) into its own folder.
    @discardableResult
    public func publishAcknowledgement() throws -> SyncAcknowledgement {
        try engine.parts.acknowledger.publishAcknowledgement(left: false)
    }

    /// Every device's published acknowledgement (unreadable ones are skipped, and so are those
    /// found in another device's folder than their own, and those published for a container that
    /// another device replaced: a device that had not seen the
    /// replacement yet wrote them, and they say nothing of what it applied here).
    public func acknowledgements() -> [SyncAcknowledgement] {
        engine.parts.acknowledger.acknowledgements()
    }

    /// Gives up on a log that its device cannot publish again (a device gone for good, its log
    /// lost): it counts as applied, empty, so the logs after it (and those that depend on it) are
    /// applied. What it held is missing on this device until the log turns up (it is applied
    /// then, whenever that is); call it only when the app decides so, for example from the
    /// handler of ``SyncEvent/missingLog(device:sequence:url:)`` after a bound of its own. By
    /// default sync never gives up: it keeps waiting, and asking.
    public func skipMissingLog(device: String, sequence: UInt64) throws {
        try engine.parts.healer.skipMissingLog(device: device, sequence: sequence)
    }

    /// The name of the file in which a device asks for logs it cannot read.
    public static let requestsName = Healer.requestsName

    /// How long after a device's numbering leapt (it was restored) its old logs may still arrive
    /// under the numbers leapt over, as far as baselines and acknowledgements go: 30 days (as
    /// ``tombstoneLifetime``). Until then they cover that device's logs only up to the leap. A log
    /// that arrives later is still applied by every device that knows of the leap.
    public static let leapWindow = Numbering.leapWindow

    /// How many numbers a restored device's numbering leaps over, past the highest of its own the
    /// container knows of: its old logs that had not reached the container copy it restored
    /// from (a copy still filling on a new machine, a log still on its way) arrive under them,
    /// and are applied when they do, never overwritten by new logs under their names.
    public static let restoreLeap = Numbering.restoreLeap

    // MARK: Diagnostics

    /// Compares the store with the history sync keeps for its records. Every import and save
    /// keeps the two in step, so a mismatch is a divergence that no later log repairs (a device
    /// that lacks a record the others hold, or holds one they deleted): a check for tests,
    /// diagnostics and support, not for every save. It reads every record's history and, for
    /// those the history names, the store.
    public func historyMismatches() throws -> SyncHistoryMismatch {
        try HistoryCheck(context: engine.context).mismatches()
    }

    /// Whether `id`, a relationship target the store does not hold, was deleted (a tombstone, or
    /// a duplicate removed by policy) or has not arrived: sync delivers records in any order
    /// across devices, and a reference may come before its target.
    public func state(ofMissing id: ObjectID) throws -> MissingTargetState? {
        try engine.parts.duplicates.state(ofMissing: id)
    }

    /// The winner that `id`, a removed duplicate, was folded into (following a winner that lost
    /// in turn), or `nil`.
    public func replacement(forMissing id: ObjectID) throws -> ObjectID? {
        try engine.parts.duplicates.replacement(forMissing: id)
    }

    /// The highest sequence of `device`'s logs up to which every log is applied here (0 if none).
    public func importedThrough(device: String) throws -> UInt64 {
        AppliedLogs.of(device, in: try store.syncMetadata([SyncMetadata.applied(device)])).through
    }

    /// The sequence of the last log this device made from a local save (0 if none yet).
    public func lastLocalSequence() throws -> UInt64 {
        try store.syncMetadataValue(SyncMetadata.sequence) ?? 0
    }

    // MARK: Device ids

    /// Gives `store` a new device id for sync, keeping its data.
    ///
    /// Use it for an installation that stopped with ``ContainerResetReason/deviceIDInUse`` (a store
    /// copied to a second machine, a cloned virtual machine, two machines given one device name),
    /// or whenever a store must stop writing under the id it has. Then make a new ``FolderSync``
    /// for the store and enable it: the join finds a device the container does not know
    /// (``SyncJoinSituation/newDevice(others:)``), and with
    /// ``SyncJoinChoice/mergeLocalIntoContainer`` it exports every record with the clocks it has,
    /// so saves that never reached the other devices reach them now, while deletions and newer
    /// writes they made meanwhile win. The logs written under the old id stay in the container
    /// (another installation may be writing them); this store imports them like any device's.
    ///
    /// Call it while no process has sync of the store enabled, or at least while none saves: a
    /// ``FolderSync`` opened under the old id (in this process or another) refuses every commit,
    /// export, import, join and ``FolderSync/disable()`` from the next one on, with
    /// ``SyncError/Code/invalidState``, and stops (``ContainerResetReason/deviceIDChanged``).
    /// Call ``FolderSync/stop()`` on it, then open a new one (one store has one ``FolderSync``
    /// per coordinator). Do not disable sync first when another installation uses the old id
    /// (that removes its registration); do, to retire an id nobody else uses.
    ///
    /// The join under the new id refuses an id the container already knows
    /// (``SyncError/Code/invalidDeviceID``): give the store another.
    ///
    /// - Parameters:
    ///   - deviceID: the new id (it must name a device folder:
    ///     ``ContainerLayout/isValidDeviceID(_:)``), or `nil` for a random one.
    ///   - store: the store, open in this process.
    /// - Returns: the new device id.
    /// - Throws: ``SyncError/Code/invalidDeviceID`` for an id that cannot name a device folder or
    ///   that is the store's id already, and the store's errors. On an error the store is unchanged.
    @discardableResult
    public static func assignNewDeviceID(_ deviceID: String? = nil, to store: any PersistentStore) throws -> String {
        try DeviceIDs.assign(deviceID, to: store)
    }

    // MARK: Logging

    /// A logger labelled `label` whose level comes from the `CONCORD_DEBUG` environment variable:
    /// `0` warning (the default), `1` info, `2` debug, `3` trace. Used when an app passes no logger.
    public static func environmentLogger(label: String = "concord.sync") -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = logLevel(debugSetting: ProcessInfo.processInfo.environment["CONCORD_DEBUG"])
        return logger
    }

    /// The log level a `CONCORD_DEBUG` value stands for; anything unset or unreadable is `warning`.
    public static func logLevel(debugSetting: String?) -> Logger.Level {
        switch debugSetting.flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) }) {
        case .some(let level) where level >= 3: return .trace
        case 2: return .debug
        case 1: return .info
        default: return .warning
        }
    }
}
