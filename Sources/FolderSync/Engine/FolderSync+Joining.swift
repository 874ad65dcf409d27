import Dispatch
import FileCoordination
import FileWatching
import Foundation
import Logging
import Persistence
import Synchronization

extension FolderSync {
    // MARK: Enabling

    func performEnable() throws -> SyncEnabling {
        if machine.withLock({ $0.state }) == .syncing { return SyncEnabling(state: .syncing) }
        // (The app goes on after another installation under this device's id was found.)
        try clearAnotherInstallation()
        // Saves from now on keep their history, also while the container is awaited.
        coordinator.addSaveParticipant(self)
        let availability = containerAvailability
        guard availability == .available else {
            perform(machine.withLock { $0.containerUnavailable(availability) } ?? [])
            scheduleAvailabilityCheck()
            return SyncEnabling(state: .waitingForContainer(availability))
        }
        // A pause, disable or stop while joining (from an event observer, or another thread)
        // wins: the join's work stays (each step is idempotent), but the device is not registered
        // and sync does not start.
        let started = machine.withLock { $0.generation }
        func interrupted() -> SyncError {
            SyncError(
                .invalidState,
                "sync was paused, disabled or stopped while it was being enabled",
                url: layout.container
            )
        }
        let policy = lifecycle.settings.withLock { $0.policy }
        // Another process of this device may be enabling the same store: one joins, the other
        // then finds it registered and resumes.
        let join = try syncLock.withLock { permit in
            let join = try joinContainer(policy: policy, holding: permit)
            guard machine.withLock({ $0.generation == started }) else { throw interrupted() }
            try registrar.register()
            // The container joined: the smallest of its ids (its identity file, or a conflict copy).
            // (Every id found: two devices that start a container at once each write one, and a
            // sync engine keeps one of them as a conflict copy, which may arrive later.)
            // (No identity in sight, from a copy of the container still filling, is no other
            // container: the ids recorded stay, so that a replacement is still recognised.)
            let ids = identities.containerIDs()
            var marks = SyncMetadataChanges()
            marks.mark(SyncMetadata.contributed)
            marks.remove(SyncMetadata.joining)
            marks.remove(SyncMetadata.disabled)
            marks.remove(SyncMetadata.renamedFrom)
            marks.remove(SyncMetadata.renamedTo)
            marks.remove(SyncMetadata.containerGone)
            if !ids.isEmpty { try marks.set(SyncMetadata.container, ids.sorted()) }
            // Only the marks that change are committed: a launch that resumes finds them all as it
            // leaves them, and a commit costs a write to disk (a whole-file store rewrites itself).
            let stored = try store.metadataEntries(forKeys: Array(marks.metadataEntries.keys))
            let changed = marks.metadataEntries.filter { key, value in stored[key] != value }
            if !changed.isEmpty { try store.commit(StoreChanges(metadataEntries: changed)) }
            return join
        }
        guard let actions = machine.withLock({ $0.joined(since: started) }) else { throw interrupted() }
        sweepStaleTemporaries()
        if lifecycle.settings.withLock({ $0.live }) {
            do {
                try startWatching()
                try start()
            } catch {
                perform(machine.withLock { $0.startFailed() })
                throw error
            }
        }
        logger.debug("sync enabled", metadata: ["concord.device": "\(deviceID)", "concord.join": "\(join)"])
        emit(.enabled(join))
        perform(actions)
        return SyncEnabling(state: .syncing, join: join)
    }

    /// Decides how this device joins and does it, holding the sync lock (`permit`); the device is
    /// not registered yet. Local commits wait meanwhile (the join resets and rewrites what they
    /// would read).
    func joinContainer(policy: SyncJoinPolicy, holding permit: SyncLock.Permit) throws -> SyncJoin {
        // A store given a new device id goes in as a device the container does not know, with
        // the data (and the clocks) it had under the old one.
        let retired = try store.syncMetadataValue(SyncMetadata.renamedFrom)
        if let retired { try prepareJoinUnderNewID(retiring: retired) }
        for folder in [layout.storeFolder, layout.devicesFolder, layout.deviceFolder(deviceID)] {
            do {
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            } catch {
                throw SyncError(.containerUnavailable, "cannot create the folder", url: folder, underlying: error)
            }
        }
        let marks = try store.syncMetadata([SyncMetadata.contributed, SyncMetadata.joining, SyncMetadata.disabled])
        let contributed = marks.contains(SyncMetadata.contributed)
        let renamed = retired != nil
        let pending = marks[SyncMetadata.joining]
        // History of this device id the store does not hold: the store was lost, or restored
        // from a backup. Its numbers are never used again. (A fresh store under a registered
        // id whose logs have not reached this copy of the container yet, a new machine's, is
        // restoring too: its numbering leaps past where its old logs may arrive.)
        let ownLogs = numbering.ownHistoryInContainer()
        let last = try lastLocalSequence()
        let restoring =
            !renamed && identities.isSameContainer()
            && (ownLogs > last
                || (last == 0 && !contributed && pending == nil && (try? registrar.isRegistered()) == true))
        if restoring { try numbering.continueNumbering(after: ownLogs, resending: false) }
        if !restoring, !renamed, contributed, pending == nil, !marks.contains(SyncMetadata.disabled),
            identities.isSameContainer(),
            try registrar.isRegistered()
        {
            return SyncJoin(situation: .resuming)
        }
        let contents = try sentinel.contents()
        reportSentinelProblems(contents.problems)
        // Others are the devices registered, and those that left data in the container (a device
        // still joining registers last; a registration may not have arrived yet).
        let others = Set(contents.registrations.map(\.device)).union(devicesWithData()).subtracting([deviceID])
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let situation: SyncJoinSituation
        if restoring {
            situation = .restoringDevice(others: others, ownLogs: ownLogs)
            // (With no log of it left, its registration says the container knew this device.)
            logger.warning(
                ownLogs > 0
                    ? "this device id has \(ownLogs) log(s) in the container that its store does not hold: restoring"
                    : "this device id is registered in the container, and its store holds none of its history: restoring",
                metadata: [
                    "concord.device": "\(deviceID)", "concord.folder": "\(layout.deviceFolder(deviceID).path)",
                ]
            )
        } else if contributed && !renamed {
            situation = .returningDevice(others: others)
        } else if others.isEmpty {
            situation = .newContainer
        } else {
            situation = .newDevice(others: others)
        }
        var join = SyncJoin(situation: situation)
        if situation == .newContainer {
            let id =
                identities.containerIDs().isEmpty
                ? try identities.startContainerIdentity() : identities.containerIDs().min()
            join.recordsExported = try identities.joining(id) {
                guard renamed else { return try exportExistingData(holding: permit) }
                return try exportUnderNewID(supersedingOwnLogs: false, holding: permit)
            }
            return join
        }
        // A join interrupted (a crash, a failure) goes on with the choice it made, never another.
        let choice = pending ?? policy.choose(situation)
        join.choice = choice
        if choice == .replaceContainerWithLocal, let problem = contents.problems.first {
            throw SyncError(
                .corruptSentinel,
                "will not replace the container while its sentinel cannot be read in full: \(problem.message)",
                url: problem.url
            )
        }
        if pending == nil {
            var changes = SyncMetadataChanges()
            try changes.set(SyncMetadata.joining, choice)
            try store.commit(StoreChanges(syncMetadata: changes))
        }
        logger.info(
            "joining the container",
            metadata: [
                "concord.device": "\(deviceID)", "concord.situation": "\(situation)",
                "concord.choice": "\(choice.rawValue)",
            ]
        )
        // A container this device saw deleted, back with no identity, is another container
        // (empty, or holding what devices put in since), and so is one that shows none of
        // this device's history: this device starts its identity, so that a device that did
        // not see the deletion knows it for another one too.
        if choice != .replaceContainerWithLocal, identities.containerIDs().isEmpty,
            identities.sawContainerDeleted() || !findsRecordedContainer()
        {
            _ = try identities.startContainerIdentity()
        }
        // The logs the join makes carry the identity of the container joined.
        try identities.joining(identities.containerIDs().min()) {
            try perform(
                choice,
                restoring: restoring,
                contributed: contributed,
                renamed: renamed,
                pending: pending,
                join: &join,
                holding: permit
            )
        }
        return join
    }

    /// Does what `choice` says, for ``joinContainer(policy:)``.
    private func perform(
        _ choice: SyncJoinChoice,
        restoring: Bool,
        contributed: Bool,
        renamed: Bool,
        pending: SyncJoinChoice?,
        join: inout SyncJoin,
        holding permit: SyncLock.Permit
    ) throws {
        switch choice {
        case .mergeLocalIntoContainer where restoring:
            // This device's own earlier saves come back with everyone else's; then what the
            // store holds that the container lacks (records without clocks) goes out.
            join.changesImported = try importer.startFromBaseline(includingOwnHistory: true, holding: permit)
            join.changesImported += try importAvailable(includingOwnLogs: true, holding: permit).changes
            join.recordsExported = try exportExistingData(holding: permit)
        case .mergeLocalIntoContainer:
            // Another container, or a new device id (what the old one sent may never have
            // reached the others): everything local goes out anew, numbered anew.
            // (When only a container whose logs this device applied was replaced, its own logs are
            // the container's, applied by the others: they stay as they are.)
            if renamed || (contributed && !findsRecordedContainer()) {
                join.recordsExported = try exportUnderNewID(
                    supersedingOwnLogs: !renamed && pending == nil && !findsRecordedContainer(countingMet: false),
                    holding: permit
                )
            } else {
                // In the same container a returning device keeps its clocks: what it changed
                // while away is in its outbox (saves keep their history while sync is off) and
                // goes out with the clocks it had; deletions and newer writes others made
                // meanwhile win.
                join.recordsExported = try joiner.exportLocalData(everyRecord: false, holding: permit)
            }
            // History folded into a baseline (and its logs removed) arrives through the baseline.
            join.changesImported = try importer.startFromBaseline(includingOwnHistory: false, holding: permit)
            join.changesImported += try importAvailable(includingOwnLogs: false, holding: permit).changes
        case .replaceLocalWithContainer:
            join.recordsReplaced = try deleteLocalRecords(holding: permit)
            // In another container (replaced by a device's data) this device's numbering starts
            // anew: its old logs are not there, and the others would wait for them. (Logs it
            // wrote there before it saw the replacement go out empty, with the numbers below
            // them, before the import.)
            // (A new device id numbers from 1 too: the others wait for nothing below its first log.)
            let same = findsRecordedContainer() && !renamed
            // (When only a container whose logs this device applied was replaced, its own logs are
            // the container's, applied by the others: they stay, and come back with the import.)
            let ownLogsGone = !same && (renamed || !findsRecordedContainer(countingMet: false))
            try resetSyncMetadata(
                keepingSequence: same,
                keepingDeletions: false,
                supersedingOwnLogs: ownLogsGone && pending == nil,
                holding: permit
            )
            if !same { try exportPending(holding: permit) }
            // Its own logs come back with every import until all are applied, not only with
            // this one: some may wait (for others' logs, or for a baseline that covers those
            // compacted away and has not arrived yet).
            let last = try lastLocalSequence()
            if last > 0 {
                var changes = SyncMetadataChanges()
                try changes.set(SyncMetadata.restoreThrough, last)
                try store.commit(StoreChanges(syncMetadata: changes))
            }
            join.changesImported = try importer.startFromBaseline(includingOwnHistory: true, holding: permit)
            join.changesImported += try importAvailable(includingOwnLogs: true, holding: permit).changes
        case .replaceContainerWithLocal:
            // The identities it replaces go into the new one: a device of the old container
            // that writes into the new one (its export, its acknowledgement) before it sees
            // the replacement still knows it is another container. The ids this device recorded
            // count only while that container may still be here: a folder with no identity and
            // none of this device's history, or one this device saw deleted, is not the one it
            // recorded (that one is gone from every copy). A device that did not see the deletion
            // joins the folder that came back as its own container, and its logs carry its old
            // id; listing that id would make them rejected by the devices that see this identity
            // and applied by those that do not (they started their own identity after the
            // deletion), and the device would never be told, since nothing was replaced under it.
            // An identity file that cannot be read (cut short by a sync engine still writing it,
            // or damaged) is no folder without identity: it may be the recorded one, and a new
            // identity that did not list it would reach the other copies as a second start of
            // the same container (a conflict copy), not as its replacement, and nobody would stop.
            let inSight = identities.containerIDs()
            let recordedGone =
                inSight.isEmpty
                && (identities.sawContainerDeleted()
                    || (numbering.ownHistoryInContainer() == 0 && !identities.hasIdentityFile()))
            let replaced = recordedGone ? inSight : inSight.union(identities.recordedContainerIDs())
            do {
                try SentinelFiles.coordinator.removeItem(at: layout.storeFolder)
                try FileManager.default.createDirectory(
                    at: layout.deviceFolder(deviceID),
                    withIntermediateDirectories: true
                )
            } catch {
                throw SyncError(
                    .ioFailed,
                    "cannot replace the store's folder in the container",
                    url: layout.storeFolder,
                    underlying: error
                )
            }
            // The records go into the new container with their clocks, not as new creations: a
            // deletion (or a write) made meanwhile by a device that had seen them is newer, even
            // where that device's clock runs behind this one's. Its deletions go in too, with
            // theirs: a device that merges into the new container brings back nothing this one
            // deleted (its copy is older than the deletion, as any write before it).
            try resetSyncMetadata(
                keepingSequence: false,
                keepingDeletions: true,
                keepingLiveClocks: true,
                holding: permit
            )
            let id = try identities.startContainerIdentity(replacing: replaced)
            join.recordsExported = try identities.joining(id) {
                let exported = try joiner.exportLocalData(everyRecord: true, holding: permit)
                _ = try joiner.exportKeptDeletions(holding: permit)
                return exported
            }
        }
    }

    /// Sends everything local out anew, numbered anew, with the clocks it has (a write made
    /// meanwhile by a device that had seen it is newer): a join into another container, or
    /// under a new device id. Deletions stay final: their clocks are kept, so the container
    /// cannot bring them back, and go out too (one made after the container was replaced is
    /// newer than the replacing device's copy of the record, which keeps its clocks). With
    /// `supersedingOwnLogs`, this device's logs in a replaced container go out empty first.
    /// Returns how many records were exported.
    private func exportUnderNewID(supersedingOwnLogs: Bool, holding permit: SyncLock.Permit) throws -> Int {
        try resetSyncMetadata(
            keepingSequence: false,
            keepingDeletions: true,
            keepingLiveClocks: true,
            supersedingOwnLogs: supersedingOwnLogs,
            holding: permit
        )
        _ = try joiner.exportKeptDeletions(holding: permit)
        return try joiner.exportLocalData(everyRecord: true, holding: permit)
    }

    /// The other devices that left data in the container (registered or not): a log or a baseline.
    func devicesWithData() -> [String] {
        let devices = ((try? FileManager.default.contentsOfDirectory(atPath: layout.devicesFolder.path)) ?? [])
            .filter { ContainerLayout.isValidDeviceID($0) && $0 != deviceID }
        return devices.filter { device in
            ((try? FileManager.default.contentsOfDirectory(atPath: layout.deviceFolder(device).path)) ?? []).contains {
                name in
                if case .log = ContainerLayout.classify(fileName: name) { return true }
                return name.hasPrefix(ContainerLayout.baselinePrefix)
            }
        }
    }

    /// Deletes every local record of the store as an import (nothing is exported); returns how many.
    func deleteLocalRecords(holding permit: SyncLock.Permit) throws -> Int {
        let context = ObjectContext(coordinator: coordinator, origin: .import, name: "sync replace local data")
        var count = 0
        for entity in coordinator.schema.entities {
            try store.enumerateRecords(of: entity.name, batchSize: 1000) { records in
                for record in records { try context.deleteWithoutRules(record.id) }
                count += records.count
            }
        }
        try context.save()
        return count
    }

    /// Whether a join finds the container this device recorded: as ``ContainerIdentities/isSameContainer(countingMet:)``, except
    /// that a folder with no identity is that container only while it shows some of this
    /// device's history (its logs, a baseline or an acknowledgement that counts them, its
    /// registration's numbering). A device that did not see the container deleted (it was
    /// disabled, or not running) finds the folder back empty, or started again by a device whose
    /// identity has not reached this copy yet: its history there is gone, and a join that took
    /// the folder for its old container would send only what changed since, leaving what it had
    /// sent before in its own store alone. (An identity file that cannot be read is no absence
    /// of one: it may be the recorded identity, still arriving.)
    func findsRecordedContainer(countingMet: Bool = true) -> Bool {
        if identities.containerIDs().isEmpty, !identities.hasIdentityFile(), !identities.recordedContainerIDs().isEmpty,
            numbering.ownHistoryInContainer() == 0
        {
            return false
        }
        return identities.isSameContainer(countingMet: countingMet)
    }
}
