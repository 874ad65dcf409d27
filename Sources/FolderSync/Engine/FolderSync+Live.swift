import Dispatch
import FileWatching
import Foundation
import Logging
import Persistence
import Synchronization

extension FolderSync {
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
        let interval = rescanInterval ?? max(scanner.settleInterval / 2, .milliseconds(50))
        guard let run = machine.withLock({ $0.startRun(rescanInterval: interval) }) else { return }
        do {
            do {
                try FileManager.default.createDirectory(
                    at: layout.deviceFolder(deviceID),
                    withIntermediateDirectories: true
                )
            } catch {
                throw SyncError(
                    .containerUnavailable,
                    "cannot create this device's folder",
                    url: layout.deviceFolder(deviceID),
                    underlying: error
                )
            }
            let shared = watcher == nil ? try syncWatcher.acquire() : nil
            let watch: InotifyWatcher.Watch
            do {
                watch = try (watcher ?? shared!).watch(layout.devicesFolder, recursive: true) { [weak self] events in
                    self?.filesChanged(events)
                }
            } catch {
                if shared != nil { syncWatcher.release() }
                throw error
            }
            // (Local saves schedule their export as they commit their log: see
            // ``willCommit(_:to:origin:context:)``.)
            // (A stop meanwhile ended the run: what it would have held is released here.)
            if !machine.withLock({ $0.runWatches(watch, sharedWatcher: shared != nil, run: run) }) {
                release(SyncMachine.RunRelease(watch: watch, sharedWatcher: shared != nil))
                return
            }
        } catch {
            // (The run held no watch yet.)
            _ = machine.withLock { $0.endRun(run) }
            logger.warning("live sync could not start", metadata: ["concord.error": "\(error)"])
            emit(.failed("live sync could not start: \(error)"))
            throw error
        }
        logger.debug(
            "live sync started",
            metadata: ["concord.device": "\(deviceID)", "concord.folder": "\(layout.devicesFolder.path)"]
        )
        emit(.setUp(device: deviceID, container: layout.container))
        // Whatever is already waiting: logs not yet written, logs already arrived.
        perform(machine.withLock { $0.requestExport() + $0.requestImport() })
    }

    /// Releases what a live run held once it ended.
    func release(_ ended: SyncMachine.RunRelease) {
        ended.watch?.cancel()
        if ended.sharedWatcher { syncWatcher.release() }
        logger.debug("live sync stopped", metadata: ["concord.device": "\(deviceID)"])
    }

    /// Whether live sync is running.
    public var isLive: Bool { machine.withLock { $0.isLive } }

    /// Waits until the work live sync had queued when this was called (exports of the saves made
    /// before it, imports of the logs seen before it) has run. Returns at once when not started.
    public func waitForQueuedWork() {
        // Saves whose export waits for a pause in saving are exported now.
        perform(machine.withLock { $0.flushWaitingSaves() })
        queue.sync {}
    }

    /// The highest sequence of `device`'s logs up to which every log is applied here (0 if none).
    public func importedThrough(device: String) throws -> UInt64 {
        AppliedLogs.of(device, in: try store.syncMetadata([SyncMetadata.applied(device)])).through
    }

    /// The sequence of the last log this device made from a local save (0 if none yet).
    public func lastLocalSequence() throws -> UInt64 {
        try store.syncMetadataValue(SyncMetadata.sequence) ?? 0
    }

    // MARK: The queue

    /// When live sync writes a local save's log: once saves pause for 25 ms, or once the first
    /// has waited 250 ms while saves keep coming (a burst of saves is written by one export, after
    /// it, instead of competing with it for the disk); the checks go on for a second after the
    /// last save, so that a save within it wakes no thread.
    static let exportSchedule = SyncMachine.ExportSchedule(
        quiet: .milliseconds(25),
        longest: .milliseconds(250),
        linger: .seconds(1)
    )

    /// After a local save: an export once saves pause (see ``exportSchedule``). Called as the
    /// save's log is about to commit; the export takes the sync lock, which the commit holds, so
    /// it comes after it (and finds nothing new if the commit failed).
    func scheduleExportAfterSave() {
        perform(machine.withLock { $0.noteSave(at: .now, schedule: Self.exportSchedule) })
    }

    /// Runs `body` on the sync queue after `delay` (at least a millisecond).
    func onQueue(after delay: Duration, _ body: @escaping @Sendable (FolderSync) -> Void) {
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(max(delay.nanoseconds, 1_000_000)))) { [weak self] in
            guard let self else { return }
            body(self)
        }
    }

    /// On the sync queue: a queued export.
    private func runExport(run: UInt64) {
        // (Queued before a stop: stopped sync writes nothing more.)
        guard machine.withLock({ $0.exportBegins(run: run) }) else { return }
        if detectReset() { return }
        do {
            try exportPending(holding: nil, containerChecked: true)
            succeeded()
        } catch {
            failed("export", error)
            perform(machine.withLock { $0.requestRescan() })
        }
    }

    /// On the sync queue: a queued import.
    private func runImport(run: UInt64) {
        guard machine.withLock({ $0.importBegins(run: run) }) else { return }
        if detectReset() { return }
        do {
            let report = try importPass(containerChecked: true)
            succeeded()
            if report.waiting > 0 { perform(machine.withLock { $0.requestRescan() }) }
        } catch {
            // (Stopped after the pass began and before it took the sync lock: nothing to say.)
            if !takesPartInSaves { return }
            failed("import", error)
            perform(machine.withLock { $0.requestRescan() })
        }
    }

    /// Does what the machine asks of the live engine.
    func performLive(_ action: SyncMachine.Action) {
        switch action {
        case .export(let run):
            queue.async { [self] in runExport(run: run) }
        case .importAvailable(let run):
            queue.async { [self] in runImport(run: run) }
        case .checkExports(let delay, let run):
            onQueue(after: delay) { sync in
                sync.perform(
                    sync.machine.withLock { $0.checkExports(at: .now, run: run, schedule: Self.exportSchedule) }
                )
            }
        case .rescan(let delay, let run):
            onQueue(after: delay) { sync in
                let due = sync.machine.withLock { $0.rescanDue(run: run) }
                guard !due.isEmpty else { return }
                sync.logger.trace("re-scanning the container", metadata: ["concord.device": "\(sync.deviceID)"])
                sync.perform(due)
            }
        default:
            assertionFailure("\(action) is not the live engine's")
        }
    }

    /// Events from the devices folder: anything that may be a log arriving or completing.
    private func filesChanged(_ events: [FileSystemEvent]) {
        let relevant = events.contains { event in
            switch event {
            case .rescanned: return true
            case .removed: return false
            case .appeared(let url), .changed(let url), .moved(_, let url):
                // This device's own logs are never imported; copies of them are compared.
                let inOwnFolder = url.deletingLastPathComponent().lastPathComponent == deviceID
                switch ContainerLayout.classify(fileName: url.lastPathComponent) {
                case .temporary: return false
                case .conflictCopy: return true
                // A log, or a device folder arriving whole, or anything a scan should judge.
                case .log, .other: return !inOwnFolder
                }
            }
        }
        if relevant {
            logger.trace("container changed", metadata: ["concord.events": "\(events.count)"])
            perform(machine.withLock { $0.requestImport() })
        }
    }

    private func succeeded() {
        if machine.withLock({ $0.succeeded(at: .now) }) { maintain() }
    }

    /// How often live sync publishes this device's acknowledgement and compacts (folds its
    /// history into a baseline, removes its logs every device has applied, collects stable
    /// tombstones), so that a container's log count stays bounded without the app's help: at most
    /// once per interval for the device, whichever of its processes runs live sync. Ten minutes
    /// by default.
    public var maintenanceInterval: Duration {
        get { machine.withLock { $0.maintenanceInterval } }
        set { machine.withLock { $0.maintenanceInterval = newValue } }
    }

    /// Acknowledges and compacts (on the sync queue, when ``maintenanceInterval`` has passed for
    /// this process) if it has passed for the device too: the time of the last one is kept in the
    /// store, so several processes of a device (one-shot commands included) share the cadence.
    private func maintain() {
        let interval = machine.withLock { $0.maintenanceInterval }
        let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
        do {
            let due = try syncLock.withLock { _ -> Bool in
                let last = try store.syncMetadataValue(SyncMetadata.maintainedAt)
                let now = self.now().timeIntervalSince1970
                if let last, now - last < seconds, now >= last { return false }
                var changes = SyncMetadataChanges()
                try changes.set(SyncMetadata.maintainedAt, now)
                try store.commit(StoreChanges(syncMetadata: changes))
                return true
            }
            guard due else { return }
            try publishAcknowledgement()
            let removed = try compact()
            logger.debug(
                "acknowledged and compacted",
                metadata: ["concord.device": "\(deviceID)", "concord.removed": "\(removed)"]
            )
        } catch {
            failed("compaction", error)
        }
    }

    /// Logs a failure (at warning the first time, at debug while it repeats) and reports it.
    func failed(_ operation: String, _ error: any Error) {
        let message = "\(operation) failed: \(error)"
        let repeated = machine.withLock { $0.failed(message) }
        if repeated {
            logger.debug(
                "sync failed again",
                metadata: ["concord.operation": "\(operation)", "concord.error": "\(error)"]
            )
        } else {
            logger.warning(
                "sync failed; trying again later",
                metadata: ["concord.operation": "\(operation)", "concord.error": "\(error)"]
            )
        }
        emit(.failed(message))
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
