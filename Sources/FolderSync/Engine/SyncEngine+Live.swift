import Dispatch
import FileWatching
import Foundation
import Logging
import Persistence
import Synchronization

extension SyncEngine {
    /// Starts live sync (see ``FolderSync/start(watcher:rescanInterval:)``).
    func start(watcher: InotifyWatcher? = nil, rescanInterval: Duration? = nil) throws {
        let interval = rescanInterval ?? max(scanner.settleInterval / 2, .milliseconds(50))
        guard let run = machine.withLock({ $0.startRun(rescanInterval: interval) }) else { return }
        do {
            do {
                try SyncFiles.createFolder(layout.deviceFolder(deviceID))
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

    /// Waits until the work live sync had queued when this was called has run.
    func waitForQueuedWork() {
        // Saves whose export waits for a pause in saving are exported now.
        perform(machine.withLock { $0.flushWaitingSaves() })
        queue.sync {}
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

    /// Acknowledges and compacts (on the sync queue, when ``FolderSync/maintenanceInterval`` has passed for
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
            _ = try parts.acknowledger.publishAcknowledgement(left: false)
            let removed = try compact(onlyIfWorthwhile: true)
            logger.debug(
                "acknowledged and compacted",
                metadata: ["concord.device": "\(deviceID)", "concord.removed": "\(removed)"]
            )
        } catch {
            failed("compaction", error)
        }
    }

    /// Writes the outbox, folds this device's store into a baseline and removes the logs every
    /// device has applied (see ``FolderSync/compact()``); returns how many were removed.
    ///
    /// With `onlyIfWorthwhile` (automatic maintenance), nothing is folded or removed while
    /// ``Compactor/isWorthwhile(positions:)`` says the work would outweigh its use.
    func compact(onlyIfWorthwhile: Bool = false) throws -> Int {
        // Under the sync lock: what this device has applied and exported is read whole, and other
        // processes of the device neither import nor commit meanwhile.
        // The outbox goes out first: a baseline holds what the store holds, so it must cover no
        // log of this device that is not in the container too (a device that applied the logs
        // before it would wait for one that a crash or a lost store kept from ever coming, while
        // devices starting from the baseline had its changes).
        let lifetime = settings.withLock { $0.tombstoneLifetime }
        return try syncLock.withLock { permit in
            try exportPending(holding: permit)
            if onlyIfWorthwhile,
                !(try parts.compactor.isWorthwhile(positions: parts.acknowledger.baselinePositions()))
            {
                try parts.retiredLogs.release()
                return 0
            }
            let compacted = try parts.compactor.compact(holding: permit, tombstoneLifetime: lifetime)
            // Every device has applied them: their outbox copies are no longer needed for healing.
            if compacted.highest > 0 { try parts.outbox.releaseOutbox(through: compacted.highest, holding: permit) }
            try parts.retiredLogs.release()
            return compacted.removed
        }
    }
}
