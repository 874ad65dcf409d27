import Foundation
import Logging
import Persistence

extension SyncContext {
    /// The context of sync of `store` through `layout`: the device id read from the store's
    /// metadata, or made (from `deviceID` when given) and recorded there; the clock after the one
    /// the store keeps; the sync lock, which catches up with what other processes of this device
    /// committed. Also returns whether the store was given a new device id it has not joined under
    /// yet.
    static func open(
        store: any PersistentStore,
        coordinator: StoreCoordinator,
        layout: ContainerLayout,
        deviceID: String?,
        settleInterval: Duration,
        wallClock: @escaping @Sendable () -> UInt64,
        now: @escaping @Sendable () -> Date,
        sentinel: (@Sendable (ContainerLayout) -> any SyncSentinel)?,
        logger: Logger
    ) throws -> (SyncContext, renamed: Bool) {
        // Read by key: a store's metadata holds an entry per record.
        let entries = try store.syncMetadata(
            [SyncMetadata.device, SyncMetadata.clock, SyncMetadata.legacyClock, SyncMetadata.renamedFrom]
        )
        let device: String
        if let stored = entries.bytes(SyncMetadata.device).flatMap({ String(data: $0, encoding: .utf8) }) {
            device = stored
        } else {
            device = deviceID ?? DeviceIDs.make()
            guard ContainerLayout.isValidDeviceID(device) else {
                throw SyncError(.invalidDeviceID, "\"\(device)\" cannot name a device folder", url: layout.container)
            }
            var changes = SyncMetadataChanges()
            try changes.set(SyncMetadata.device, device)
            try store.commit(StoreChanges(syncMetadata: changes))
        }
        // (The clock under its old key only when there is no entry under the new one.)
        let last =
            entries.contains(SyncMetadata.clock) ? entries[SyncMetadata.clock] : entries[SyncMetadata.legacyClock]
        let clock = HybridClock(device: device, after: last, wallClock: wallClock)
        // Other processes of this device tick the same device's clock: whoever takes the lock
        // first catches up with the clock they committed, so no two writes share a timestamp.
        let storedClock = StoredClock()
        let syncLock = try SyncLock(storeURL: store.url, storeName: layout.storeName) { [store, clock] catchingUp in
            try store.refresh()
            // (A commit catches up in ``willCommit(_:to:origin:context:)``, from the entries it
            // reads there anyway: one read of the store less per save.)
            guard catchingUp else { return }
            try Exporter.catchUp(
                with: store.syncMetadata(Exporter.catchUpKeys),
                clock: clock,
                storedClock: storedClock,
                device: device,
                store: store
            )
        }
        // Payloads are read again as each batch applies: memory follows the batch, not the backlog.
        let scanner = LogScanner(
            layout: layout,
            ownDevice: device,
            settleInterval: settleInterval,
            keepsPayloads: false,
            now: now
        )
        let context = SyncContext(
            deviceID: device,
            layout: layout,
            ownLogFolderPath: layout.deviceFolder(device).path,
            store: store,
            coordinator: coordinator,
            logger: logger,
            clock: clock,
            storedClock: storedClock,
            syncLock: syncLock,
            sentinel: sentinel?(layout) ?? DeviceFileSentinel(layout: layout),
            scanner: scanner,
            now: now,
            events: SyncEvents(syncLock: syncLock)
        )
        return (context, entries.contains(SyncMetadata.renamedFrom))
    }
}
