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
        let claimed = live.machine.withLock { state -> Bool in
            guard !state.running else { return false }
            state.running = true
            state.generation += 1
            state.rescanInterval = interval
            return true
        }
        guard claimed else { return }
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
            live.machine.withLock { state in
                state.watch = watch
                state.usesSharedWatcher = shared != nil
            }
        } catch {
            _ = live.stop()
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
        scheduleExport()
        scheduleImport()
    }

    /// Ends live sync (``start(watcher:rescanInterval:)``): no more exports after saves, no more
    /// imports on arrival. Work already begun finishes.
    func stopLive() {
        let (wasRunning, watch, sharedWatcher) = live.stop()
        watch?.cancel()
        if sharedWatcher { syncWatcher.release() }
        if wasRunning { logger.debug("live sync stopped", metadata: ["concord.device": "\(deviceID)"]) }
    }

    /// Whether live sync is running.
    public var isLive: Bool { live.machine.withLock { $0.running } }

    /// Waits until the work live sync had queued when this was called (exports of the saves made
    /// before it, imports of the logs seen before it) has run. Returns at once when not started.
    public func waitForQueuedWork() {
        // Saves whose export waits for a pause in saving are exported now.
        let waiting = live.machine.withLock { state -> Bool in
            guard state.running, state.firstWaitingSave != nil else { return false }
            state.firstWaitingSave = nil
            state.lastWaitingSave = nil
            return true
        }
        if waiting { scheduleExport() }
        live.queue.sync {}
    }

    /// The highest sequence of `device`'s logs up to which every log is applied here (0 if none).
    public func importedThrough(device: String) throws -> UInt64 {
        Self.appliedLogs(device, in: try store.syncMetadata([SyncMetadata.applied(device)])).through
    }

    /// The sequence of the last log this device made from a local save (0 if none yet).
    public func lastLocalSequence() throws -> UInt64 {
        try store.syncMetadataValue(SyncMetadata.sequence) ?? 0
    }

    // MARK: The queue

    /// How long saves must pause before live sync writes their logs, and the longest a save's log
    /// waits while saves keep coming: a burst of saves is written by one export, after it, instead
    /// of competing with it for the disk.
    static let exportQuietPeriod: Duration = .milliseconds(25)
    static let exportLongestWait: Duration = .milliseconds(250)
    /// How long the export checks go on after the last save (every ``exportQuietPeriod``): a
    /// save within it wakes no thread.
    static let exportCheckLinger: Duration = .seconds(1)

    /// After a local save: an export once saves pause (see ``exportQuietPeriod``). Called as the
    /// save's log is about to commit; the export takes the sync lock, which the commit holds, so
    /// it comes after it (and finds nothing new if the commit failed).
    func scheduleExportAfterSave() {
        guard let generation = live.machine.withLock({ $0.noteSave(at: .now) }) else { return }
        checkExportAfter(Self.exportQuietPeriod, generation: generation)
    }

    private func checkExportAfter(_ delay: Duration, generation: UInt64) {
        live.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(max(delay.nanoseconds, 1_000_000)))) { [weak self] in
            guard let self else { return }
            let (export, next) = live.machine.withLock {
                $0.exportDue(
                    at: .now,
                    generation: generation,
                    quiet: Self.exportQuietPeriod,
                    longest: Self.exportLongestWait,
                    linger: Self.exportCheckLinger
                )
            }
            if export { scheduleExport() }
            if let next { checkExportAfter(next, generation: generation) }
        }
    }

    func scheduleExport() {
        guard live.machine.withLock({ $0.requestExport() }) else { return }
        live.queue.async { [self] in
            let running = live.machine.withLock { state -> Bool in
                state.exportQueued = false
                return state.running
            }
            // (Queued before a stop: stopped sync writes nothing more.)
            guard running else { return }
            if detectReset() { return }
            do {
                try exportPending()
                succeeded()
            } catch {
                failed("export", error)
                scheduleRescan()
            }
        }
    }

    func scheduleImport() {
        guard live.machine.withLock({ $0.requestImport() }) else { return }
        live.queue.async { [self] in
            let running = live.machine.withLock { state -> Bool in
                state.importQueued = false
                return state.running
            }
            // (Queued before a stop: stopped sync writes nothing more.)
            guard running else { return }
            if detectReset() { return }
            do {
                let report = try importAvailable()
                succeeded()
                if report.waiting > 0 { scheduleRescan() }
            } catch {
                failed("import", error)
                scheduleRescan()
            }
        }
    }

    private func scheduleRescan() {
        guard let (generation, interval) = live.machine.withLock({ $0.requestRescan() }) else { return }
        let nanoseconds = interval.nanoseconds
        live.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) { [weak self] in
            guard let self else { return }
            let current = live.machine.withLock { state -> Bool in
                guard state.generation == generation else { return false }
                state.rescanScheduled = false
                return true
            }
            guard current else { return }
            logger.trace("re-scanning the container", metadata: ["concord.device": "\(deviceID)"])
            // A failed export is retried too: its logs are still in the outbox.
            scheduleExport()
            scheduleImport()
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
            scheduleImport()
        }
    }

    private func succeeded() {
        live.machine.withLock { $0.lastFailure = nil }
        maintainIfDue()
    }

    /// How often live sync publishes this device's acknowledgement and compacts (folds its
    /// history into a baseline, removes its logs every device has applied, collects stable
    /// tombstones), so that a container's log count stays bounded without the app's help: at most
    /// once per interval for the device, whichever of its processes runs live sync. Ten minutes
    /// by default.
    public var maintenanceInterval: Duration {
        get { live.machine.withLock { $0.maintenanceInterval } }
        set { live.machine.withLock { $0.maintenanceInterval = newValue } }
    }

    /// Acknowledges and compacts when ``maintenanceInterval`` has passed (on the sync queue),
    /// for this process and for the device: the time of the last one is kept in the store, so
    /// several processes of a device (one-shot commands included) share the cadence.
    private func maintainIfDue() {
        guard live.machine.withLock({ $0.takeMaintenance(now: .now) }) else { return }
        let interval = live.machine.withLock { $0.maintenanceInterval }
        let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
        do {
            let due = try syncLock.withLock { () -> Bool in
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
    private func failed(_ operation: String, _ error: any Error) {
        let message = "\(operation) failed: \(error)"
        let repeated = live.machine.withLock { state -> Bool in
            defer { state.lastFailure = message }
            return state.lastFailure == message
        }
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
