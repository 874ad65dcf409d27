import Foundation
import Persistence

// A store's device id, and how a store takes a new one: the way out for an installation that
// stopped because another writes under its id (a copied store, a cloned machine). The store keeps
// its data and its clocks; its next join exports every record with the clocks it has (so saves
// that never reached the others go out, and deletions and newer writes made by others meanwhile
// still win), under the new id numbered from 1. Processes that still have sync open under the old
// id find the change the next time they take the sync lock, and refuse to go on.

extension FolderSync {
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
        let device = deviceID ?? makeDeviceID()
        guard ContainerLayout.isValidDeviceID(device) else {
            throw SyncError(.invalidDeviceID, "\"\(device)\" cannot name a device folder", url: store.url)
        }
        try store.refresh()
        let marks = try store.syncMetadata([SyncMetadata.device, SyncMetadata.renamedFrom])
        let old = marks[SyncMetadata.device]
        guard old != device else {
            throw SyncError(.invalidDeviceID, "the store's device id is \"\(device)\" already", url: store.url)
        }
        var entries = SyncMetadataChanges()
        try entries.set(SyncMetadata.device, device)
        if let old {
            // The next join goes in under the new id as a device the container does not know; a
            // join the old id began (its choice) and its stop are the old id's. (Given a new id
            // twice before joining: the id whose logs the outbox holds stays the one retired.)
            // (An id retired before stays, byte for byte.)
            if let retired = marks.bytes(SyncMetadata.renamedFrom) {
                entries.setBytes(SyncMetadata.renamedFrom, retired)
            } else {
                try entries.set(SyncMetadata.renamedFrom, old)
            }
            entries.remove(SyncMetadata.joining)
            entries.remove(SyncMetadata.deviceIDInUse)
            entries.remove(SyncMetadata.renamedTo)
        }
        try store.commit(StoreChanges(syncMetadata: entries))
        return device
    }

    /// Before a join under a new device id: refuses an id the container knows (another device's,
    /// or one this store had before), since the join would write under another device's
    /// numbers; then publishes again, under `retired` (the id the store had), the logs its outbox
    /// keeps that were written into this container and are lost or damaged there, as that id
    /// would have healed them: the others may wait for them. The store keeps them, and answers
    /// the others' requests for them after the join (FolderSync+RetiredLogs.swift). Written means below the export mark (``disable()`` moves it past what it
    /// wrote) or acknowledged as applied by another device. A log that may never have been
    /// written stays out: another installation may number under the old id (a copy renamed
    /// before either saw the other), and what it carries goes out under the new id with a
    /// merge, or is given up with a replacement. Nothing goes into another container (one that
    /// replaced the one the logs were written into). A valid log of that id under a name stays.
    func prepareJoinUnderNewID(retiring retired: String) throws {
        let folder = layout.deviceFolder(deviceID)
        let checked = try store.syncMetadata([SyncMetadata.renamedTo]).bytes(SyncMetadata.renamedTo)
        if checked != Data(deviceID.utf8) {
            let holdsFiles = !((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).isEmpty
            let registered = try sentinel.isRegistered(deviceID)
            if holdsFiles || registered || devicesWithData().contains(deviceID) {
                throw SyncError(
                    .invalidDeviceID,
                    "the device id \"\(deviceID)\" is in use in the container: give the store another one",
                    url: folder
                )
            }
            var changes = SyncMetadataChanges()
            try changes.set(SyncMetadata.renamedTo, deviceID)
            try store.commit(StoreChanges(syncMetadata: changes))
        }
        guard identities.isSameContainer() else { return }
        let exported = try store.syncMetadataValue(SyncMetadata.outboxFrom) ?? 1
        // What another device says it applied of that id was written, whatever the mark says.
        let applied =
            acknowledger.acknowledgements().filter { $0.device != retired }.compactMap { $0.applied[retired] }.max()
            ?? 0
        var keep = SyncMetadataChanges()
        try store.enumerateSyncMetadata(in: SyncMetadata.outbox, batchSize: 256) { entries in
            for entry in entries {
                let bytes = entry.data
                guard let number = UInt64(entry.suffix),
                    number < exported || number <= applied,
                    let log = try? LogFile.decode(bytes, url: layout.logURL(device: retired, sequence: number)),
                    log.device == retired, log.sequence == number
                else { continue }
                // (Kept to answer the others' requests after the join: see FolderSync+RetiredLogs.swift.)
                try keep.set(SyncMetadata.retiredOutboxLog(retired, number), bytes)
                _ = try retiredLogs.republish(log)
            }
        }
        if !keep.isEmpty { try store.commit(StoreChanges(syncMetadata: keep)) }
    }

    /// Throws when the store was given another device id since this instance opened it.
    func refuseChangedDeviceID() throws {
        try store.refresh()
        let stored = try store.syncMetadata([SyncMetadata.device])
        if Self.isAnotherDevice(stored.bytes(SyncMetadata.device), than: deviceID) {
            throw Self.deviceIDChangedError(stored[SyncMetadata.device], from: deviceID, store: store.url)
        }
    }
}
