import ConcordSystem
import FileCoordination
import Foundation
import Persistence

/// What devices say they applied: this device's acknowledgement (published in its own folder),
/// everyone's as read, and the positions that baselines and compaction go by.
struct Acknowledger: SyncPart {
    let context: SyncContext
    let identities: ContainerIdentities

    /// The contiguous prefix of each device's logs this store has applied, and this device's own
    /// last exported log.
    func appliedPositions() throws -> [String: UInt64] {
        var positions: [String: UInt64] = [:]
        for entry in try appliedEntries().entries(in: SyncMetadata.applied) {
            positions[String(entry.suffix)] = (entry.value ?? AppliedLogs()).through
        }
        positions[deviceID] = try highestOwnLog() ?? 0
        return try leapAware(positions)
    }

    /// `positions`, each stopped before the numbers its device's numbering leapt over while old
    /// logs may still arrive there (see ``LogVersions/position(_:at:)``).
    func leapAware(_ positions: [String: UInt64]) throws -> [String: UInt64] {
        let versions = try versionsApplied(of: Array(positions.keys))
        let now = now()
        return Dictionary(
            uniqueKeysWithValues: positions.map { device, through in
                (device, versions[device]?.position(through, at: now) ?? through)
            }
        )
    }

    /// The devices whose acknowledgements compaction waits for: every device with a folder in the
    /// container or a registration (a device still joining has a folder before it registers),
    /// except those that left (``FolderSync/disable()`` says so in its acknowledgement) and did not
    /// register again: if one comes back, it joins anew. With a sentinel that cannot be read in
    /// full, nobody counts as having left.
    func devicesHoldingBack() throws -> [String] {
        let folders = SyncFiles.names(in: layout.devicesFolder)
            .filter(ContainerLayout.isValidDeviceID)
        let contents = try? sentinel.contents()
        let registered = Set(contents?.registrations.map(\.device) ?? [])
        // Without a readable sentinel, a device that says it left may be registered again.
        guard let contents, contents.problems.isEmpty else { return Array(Set(folders).union(registered)) }
        let left = Set(acknowledgements().filter { $0.left == true }.map(\.device))
        return Array(Set(folders).union(registered).filter { registered.contains($0) || !left.contains($0) })
    }

    /// What a baseline this device writes now covers: what it has applied, and every log it
    /// committed. The store holds the effect of every log this device committed, whether or not
    /// it is still in the container (compacted away) or already written: a baseline covers them
    /// all. (Counting only the files present made a second compaction write a baseline that
    /// claimed none of this device's compacted logs, and a device restored from it waited for
    /// them.) The caller has written the outbox (see ``compact()``).
    func baselinePositions() throws -> [String: UInt64] {
        var positions = try appliedPositions()
        positions[deviceID] = max(positions[deviceID] ?? 0, try lastLocalSequence())
        return try leapAware(positions)
    }

    /// Writes this device's acknowledgement (what it has applied) into its own folder.
    func publishAcknowledgement(left: Bool) throws -> SyncAcknowledgement {
        // Read together, between commits and imports: the clock then covers every log committed
        // up to `committed` and every change applied.
        let acknowledgement = try syncLock.withLock { _ in
            let marks = try store.syncMetadata([SyncMetadata.sequence, SyncMetadata.leapFrom])
            // (After a leap and before the first log past it, the last log committed is the one
            // the leap started from: the numbers leapt over carry nothing of this store's.)
            let committed = marks[SyncMetadata.leapFrom] ?? marks[SyncMetadata.sequence] ?? 0
            return SyncAcknowledgement(
                device: deviceID,
                applied: try appliedPositions(),
                left: left ? true : nil,
                committed: committed,
                clock: clock.latest,
                container: identities.loggedContainer()
            )
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let url = layout.deviceFolder(deviceID).appendingPathComponent(ContainerLayout.acknowledgementName)
        do {
            // This device's folder gone from a store folder still there (a replacement arriving
            // file by file, a folder deleted by hand) is made again, as an export does.
            if ContainerAvailability.of(layout.devicesFolder) == .available,
                ContainerAvailability.of(layout.deviceFolder(deviceID)) == .missing
            {
                try FileSystem.createDirectoryDurably(at: layout.deviceFolder(deviceID).path)
            }
            try FileCoordinator().replaceContentsOfItem(at: url, with: try encoder.encode(acknowledgement))
        } catch {
            throw SyncError(.ioFailed, "cannot publish this device's acknowledgement", url: url, underlying: error)
        }
        return acknowledgement
    }

    /// Every device's published acknowledgement (unreadable ones are skipped, and so are those
    /// found in another device's folder than their own, and those published for a container that
    /// another device replaced: a device that had not seen the
    /// replacement yet wrote them, and they say nothing of what it applied here).
    func acknowledgements() -> [SyncAcknowledgement] {
        let folders = SyncFiles.names(in: layout.devicesFolder)
        let replaced = identities.replacedContainers()
        return folders.sorted().compactMap { device in
            guard ContainerLayout.isValidDeviceID(device) else { return nil }
            let url = layout.deviceFolder(device).appendingPathComponent(ContainerLayout.acknowledgementName)
            // (One in another device's folder than its own is misplaced or forged: passed over.)
            return Data(contentsOf: url, atMost: 1 << 20).flatMap {
                try? JSONDecoder().decode(SyncAcknowledgement.self, from: $0)
            }.flatMap { $0.device != device || $0.container.map(replaced.contains) == true ? nil : $0 }
        }
    }
}
