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

    /// Throws when the store was given another device id since this instance opened it.
    func refuseChangedDeviceID() throws {
        try store.refresh()
        let stored = try store.syncMetadata([SyncMetadata.device])
        if Self.isAnotherDevice(stored.bytes(SyncMetadata.device), than: deviceID) {
            throw Self.deviceIDChangedError(stored[SyncMetadata.device], from: deviceID, store: store.url)
        }
    }
}
