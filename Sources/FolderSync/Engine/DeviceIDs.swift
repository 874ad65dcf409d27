import ConcordSystem
import Foundation
import Persistence

// A store's device id, and how a store takes a new one: the way out for an installation that
// stopped because another writes under its id (a copied store, a cloned machine). The store keeps
// its data and its clocks; its next join exports every record with the clocks it has (so saves
// that never reached the others go out, and deletions and newer writes made by others meanwhile
// still win), under the new id numbered from 1. Processes that still have sync open under the old
// id find the change the next time they take the sync lock, and refuse to go on.

enum DeviceIDs {
    /// A new random device id: 12 of 32 letters and digits that cannot be misread (60 bits from
    /// the kernel's random source, ``RandomSource``, which stops the process rather than repeat).
    static func make() -> String {
        let alphabet = Array("abcdefghijkmnpqrstuvwxyz23456789")
        let uuid = RandomSource.uuid().uuid
        // (Bytes 6 and 8 carry the UUID's version and variant: the others are random.)
        let random = withUnsafeBytes(of: uuid) { bytes in Array(bytes[0..<6]) + Array(bytes[9..<16]) }
        return String(random.prefix(12).map { alphabet[Int($0 & 0x1F)] })
    }

    /// Gives `store` a new device id (see ``FolderSync/assignNewDeviceID(_:to:)``).
    static func assign(_ deviceID: String?, to store: any PersistentStore) throws -> String {
        let device = deviceID ?? make()
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
}
