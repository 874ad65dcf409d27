import Foundation
import Persistence

/// Each join choice carried out.
extension ContainerJoin {
    /// The facts a join choice is carried out with.
    struct JoinFacts {
        /// The store holds none of this device id's history in the container (lost, restored).
        var restoring: Bool
        /// This device took part in a container before.
        var contributed: Bool
        /// The store was given a new device id.
        var renamed: Bool
        /// The choice of a join that was interrupted, going on.
        var pending: SyncJoinChoice?
    }

    /// Does what `choice` says, for ``join(policy:holding:)``.
    func perform(
        _ choice: SyncJoinChoice,
        _ facts: JoinFacts,
        join: inout SyncJoin,
        holding permit: SyncLock.Permit
    )
        throws
    {
        switch choice {
        case .mergeLocalIntoContainer where facts.restoring:
            try mergeRestored(into: &join, holding: permit)
        case .mergeLocalIntoContainer:
            try merge(facts, into: &join, holding: permit)
        case .replaceLocalWithContainer:
            try replaceLocal(facts, in: &join, holding: permit)
        case .replaceContainerWithLocal:
            try replaceContainer(in: &join, holding: permit)
        }
    }

    /// A restored device merges: its own earlier saves come back with everyone else's.
    private func mergeRestored(into join: inout SyncJoin, holding permit: SyncLock.Permit) throws {
        // This device's own earlier saves come back with everyone else's; then what the
        // store holds that the container lacks (records without clocks) goes out.
        join.changesImported = try importer.startFromBaseline(includingOwnHistory: true, holding: permit)
        join.changesImported += try host.importAvailable(batchSize: 64, includingOwnLogs: true, holding: permit).changes
        join.recordsExported = try joiner.exportLocalData(everyRecord: false, holding: permit)
    }

    /// A merge into the container.
    private func merge(_ facts: JoinFacts, into join: inout SyncJoin, holding permit: SyncLock.Permit) throws {
        let (renamed, contributed, pending) = (facts.renamed, facts.contributed, facts.pending)
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
        join.changesImported += try host.importAvailable(batchSize: 64, includingOwnLogs: false, holding: permit)
            .changes
    }

    /// The local data replaced with the container's.
    private func replaceLocal(_ facts: JoinFacts, in join: inout SyncJoin, holding permit: SyncLock.Permit) throws {
        let (renamed, pending) = (facts.renamed, facts.pending)
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
        if !same { try host.exportPending(holding: permit, containerChecked: false) }
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
        join.changesImported += try host.importAvailable(batchSize: 64, includingOwnLogs: true, holding: permit).changes
    }

    /// The container replaced with the local data.
    private func replaceContainer(in join: inout SyncJoin, holding permit: SyncLock.Permit) throws {
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
            try SyncFiles.createFolder(layout.deviceFolder(deviceID))
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

    /// Sends everything local out anew, numbered anew, with the clocks it has (a write made
    /// meanwhile by a device that had seen it is newer): a join into another container, or
    /// under a new device id. Deletions stay final: their clocks are kept, so the container
    /// cannot bring them back, and go out too (one made after the container was replaced is
    /// newer than the replacing device's copy of the record, which keeps its clocks). With
    /// `supersedingOwnLogs`, this device's logs in a replaced container go out empty first.
    /// Returns how many records were exported.
    func exportUnderNewID(supersedingOwnLogs: Bool, holding permit: SyncLock.Permit) throws -> Int {
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
}
