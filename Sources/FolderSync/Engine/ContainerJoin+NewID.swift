import Foundation
import Persistence

/// A join under a new device id (``FolderSync/assignNewDeviceID(_:to:)``).
extension ContainerJoin {
    /// Before a join under a new device id: refuses an id the container knows (another device's,
    /// or one this store had before), since the join would write under another device's
    /// numbers; then publishes again, under `retired` (the id the store had), the logs its outbox
    /// keeps that were written into this container and are lost or damaged there, as that id
    /// would have healed them: the others may wait for them. The store keeps them, and answers
    /// the others' requests for them after the join (RetiredLogs.swift). Written means below the export mark (``disable()`` moves it past what it
    /// wrote) or acknowledged as applied by another device. A log that may never have been
    /// written stays out: another installation may number under the old id (a copy renamed
    /// before either saw the other), and what it carries goes out under the new id with a
    /// merge, or is given up with a replacement. Nothing goes into another container (one that
    /// replaced the one the logs were written into). A valid log of that id under a name stays.
    func prepareJoinUnderNewID(retiring retired: String) throws {
        let folder = layout.deviceFolder(deviceID)
        let checked = try store.syncMetadata([SyncMetadata.renamedTo]).bytes(SyncMetadata.renamedTo)
        if checked != Data(deviceID.utf8) {
            let holdsFiles = !SyncFiles.names(in: folder).isEmpty
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
                // (Kept to answer the others' requests after the join: see RetiredLogs.swift.)
                try keep.set(SyncMetadata.retiredOutboxLog(retired, number), bytes)
                _ = try retiredLogs.republish(log)
            }
        }
        if !keep.isEmpty { try store.commit(StoreChanges(syncMetadata: keep)) }
    }
}
