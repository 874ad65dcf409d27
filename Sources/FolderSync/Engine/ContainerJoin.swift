import Foundation
import Logging
import Persistence

/// How this device joins a container and what the join does: the situation it finds (a new
/// container, a new device, a returning device, a restored one), the app's choice for it
/// (``SyncJoinPolicy``), and that choice carried out under the sync lock: a merge, the local
/// data replaced with the container's, or the container replaced with the local data.
struct ContainerJoin: SyncPart {
    let context: SyncContext
    let identities: ContainerIdentities
    let numbering: Numbering
    let registrar: Registrar
    let acknowledger: Acknowledger
    let retiredLogs: RetiredLogs
    let importer: Importer
    let joiner: Joiner
    /// Exports and imports as the engine does.
    let host: any JoinHost

    /// Decides how this device joins and does it, holding the sync lock (`permit`); the device is
    /// not registered yet. Local commits wait meanwhile (the join resets and rewrites what they
    /// would read).
    func join(policy: SyncJoinPolicy, holding permit: SyncLock.Permit) throws -> SyncJoin {
        // A store given a new device id goes in as a device the container does not know, with
        // the data (and the clocks) it had under the old one.
        let retired = try store.syncMetadataValue(SyncMetadata.renamedFrom)
        if let retired { try prepareJoinUnderNewID(retiring: retired) }
        for folder in [layout.storeFolder, layout.devicesFolder, layout.deviceFolder(deviceID)] {
            do {
                try SyncFiles.createFolder(folder)
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
        let situation = situation(
            contents,
            restoring: restoring ? ownLogs : nil,
            returning: contributed && !renamed
        )
        var join = SyncJoin(situation: situation)
        if situation == .newContainer {
            join.recordsExported = try startNewContainer(renamed: renamed, holding: permit)
            return join
        }
        let choice = try choose(situation, policy: policy, pending: pending, contents: contents)
        join.choice = choice
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
                JoinFacts(restoring: restoring, contributed: contributed, renamed: renamed, pending: pending),
                join: &join,
                holding: permit
            )
        }
        return join
    }

    /// The first device of a new container: it starts the container's identity (unless one is
    /// there) and exports its data (under its new id, for a store given one). Returns how many
    /// records went out.
    private func startNewContainer(renamed: Bool, holding permit: SyncLock.Permit) throws -> Int {
        let id =
            identities.containerIDs().isEmpty
            ? try identities.startContainerIdentity() : identities.containerIDs().min()
        return try identities.joining(id) {
            guard renamed else { return try joiner.exportLocalData(everyRecord: false, holding: permit) }
            return try exportUnderNewID(supersedingOwnLogs: false, holding: permit)
        }
    }

    /// The choice a join in `situation` carries out, recorded before any of it is done: a join
    /// interrupted (a crash, a failure) goes on with the choice it made (`pending`), never
    /// another. A replacement of the container is refused while its sentinel cannot be read in
    /// full.
    private func choose(
        _ situation: SyncJoinSituation,
        policy: SyncJoinPolicy,
        pending: SyncJoinChoice?,
        contents: SentinelContents
    ) throws -> SyncJoinChoice {
        let choice = pending ?? policy.choose(situation)
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
        return choice
    }

    /// The situation a join finds, with the other devices `contents` (the sentinel's) and the
    /// container show: a restoring device (`restoring`: how far its history in the container goes),
    /// a returning one, the first device of a new container, or a new device.
    private func situation(
        _ contents: SentinelContents,
        restoring ownLogs: UInt64?,
        returning: Bool
    )
        -> SyncJoinSituation
    {
        // Others are the devices registered, and those that left data in the container (a device
        // still joining registers last; a registration may not have arrived yet).
        let others = Set(contents.registrations.map(\.device)).union(devicesWithData()).subtracting([deviceID])
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        if let ownLogs {
            // (With no log of it left, its registration says the container knew this device.)
            logger.warning(
                ownLogs > 0
                    ? "this device id has \(ownLogs) log(s) in the container that its store does not hold: restoring"
                    : "this device id is registered in the container, and its store holds none of its history: restoring",
                metadata: [
                    "concord.device": "\(deviceID)", "concord.folder": "\(layout.deviceFolder(deviceID).path)",
                ]
            )
            return .restoringDevice(others: others, ownLogs: ownLogs)
        }
        if returning { return .returningDevice(others: others) }
        return others.isEmpty ? .newContainer : .newDevice(others: others)
    }

    /// The other devices that left data in the container (registered or not): a log or a baseline.
    func devicesWithData() -> [String] {
        let devices = SyncFiles.names(in: layout.devicesFolder)
            .filter { ContainerLayout.isValidDeviceID($0) && $0 != deviceID }
        return devices.filter { device in
            SyncFiles.names(in: layout.deviceFolder(device)).contains {
                name in
                if case .log = ContainerLayout.classify(fileName: name) { return true }
                return name.hasPrefix(ContainerLayout.baselinePrefix)
            }
        }
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
