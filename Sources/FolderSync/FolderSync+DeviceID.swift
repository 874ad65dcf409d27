import Foundation
import Persistence

// A store's device id, and how a store takes a new one: the way out for an installation that
// stopped because another writes under its id (a copied store, a cloned machine). The store keeps
// its data and its clocks; its next join exports every record with the clocks it has (so saves
// that never reached the others go out, and deletions and newer writes made by others meanwhile
// still win), under the new id numbered from 1. Processes that still have sync open under the old
// id find the change the next time they take the sync lock, and refuse to go on.

extension FolderSync {
    /// Set (to the old id) when the store was given a new device id; removed when a join
    /// under the new id completes.
    static let renamedFromKey = "sync.renamedFrom"

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
    /// export, import and join from the next one on, with ``SyncError/Code/invalidState``, and
    /// stops (``ContainerResetReason/deviceIDChanged``); open a new one.
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
        let old = try store.metadataEntries(forKeys: [deviceKey])[deviceKey].map { String(decoding: $0, as: UTF8.self) }
        guard old != device else {
            throw SyncError(.invalidDeviceID, "the store's device id is \"\(device)\" already", url: store.url)
        }
        var entries: [String: Data?] = [deviceKey: Data(device.utf8)]
        if let old {
            // The next join goes in under the new id as a device the container does not know; a
            // join the old id began (its choice) and its stop are the old id's.
            entries[renamedFromKey] = Data(old.utf8)
            entries[joiningKey] = .some(nil)
            entries[deviceIDInUseKey] = .some(nil)
        }
        try store.commit(StoreChanges(metadataEntries: entries))
        return device
    }

    /// Whether `stored` (the store's device-id entry) names another id than this instance's: the
    /// store was given a new one (``assignNewDeviceID(_:to:)``) since this instance opened it.
    static func isAnotherDevice(_ stored: Data?, than device: String) -> Bool {
        stored.map { $0 != Data(device.utf8) } ?? false
    }

    /// The error for an instance opened under `device` on a store since given `stored`.
    static func deviceIDChangedError(_ stored: Data?, from device: String, store: URL) -> SyncError {
        SyncError(
            .invalidState,
            "the store was given the device id \"\(String(decoding: stored ?? Data(), as: UTF8.self))\" since sync "
                + "opened it as \"\(device)\": open sync on the store again",
            url: store
        )
    }
}
