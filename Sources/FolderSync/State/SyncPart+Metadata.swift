import Foundation
import Persistence

/// What every part reads of this device's sync state in the store: the versions of each
/// device's logs applied, the last log made, the highest of its own in the container.
extension SyncPart {
    /// For each of `devices` that has any, its ``LogVersions``.
    func versionsApplied(of devices: [String]) throws -> [String: LogVersions] {
        let entries = try store.syncMetadata(devices.map { SyncMetadata.versionsApplied($0) })
        var result: [String: LogVersions] = [:]
        for entry in entries.entries(in: SyncMetadata.versionsApplied) {
            guard let versions = entry.value, !versions.isEmpty else { continue }
            result[String(entry.suffix)] = versions
        }
        return result
    }

    /// Keeps `versions` as `device`'s in `changes` (no entry for nothing).
    static func setVersionsApplied(
        _ versions: LogVersions,
        of device: String,
        in changes: inout some SyncMetadataWritable
    ) throws {
        let key = SyncMetadata.versionsApplied(device)
        if versions.isEmpty { changes.remove(key) } else { try changes.set(key, versions) }
    }

    /// Keeps `versions` as `device`'s, with `context`'s save (no entry for nothing).
    func setVersionsApplied(_ versions: LogVersions, of device: String, in context: ObjectContext) throws {
        let key = SyncMetadata.versionsApplied(device)
        if versions.isEmpty {
            context.removeSyncMetadata(key, in: store)
        } else {
            try context.setSyncMetadata(key, versions, in: store)
        }
    }

    /// The highest number of this device's logs in its folder, passing over numbers from
    /// ``plausibleSequences`` on (a damaged or hostile name): `nil` for none.
    func highestOwnLog() throws(SyncError) -> UInt64? {
        Self.highestPlausible(try layout.logSequences(device: deviceID))
    }

    /// The highest of `sequences` (in ascending order) that a log may plausibly carry.
    static func highestPlausible(_ sequences: [UInt64]) -> UInt64? {
        sequences.last { $0 < plausibleSequences }
    }

    /// Log numbers from here on are taken for damage, wherever one is read: a log name has 16
    /// digits, and no device writes that many logs.
    static var plausibleSequences: UInt64 { 1 << 53 }

    /// The entries saying which logs of each device are applied here.
    func appliedEntries() throws -> SyncMetadataSnapshot {
        var entries: [String: Data] = [:]
        try store.enumerateSyncMetadata(in: SyncMetadata.applied) { batch in
            for entry in batch { entries[entry.name] = entry.data }
        }
        return SyncMetadataSnapshot(entries)
    }

    /// The number of the last log this store made (0: none).
    func lastLocalSequence() throws -> UInt64 {
        try store.syncMetadataValue(SyncMetadata.sequence) ?? 0
    }

    /// How many earlier numbering runs ``SyncMetadata/numberedRuns`` keeps (the newest).
    static var numberedRunsKept: Int { 64 }

    /// The entries that start a numbering run at `next` (a leap), closing the current one.
    func numberingRunEntries(startingAt next: UInt64) throws -> SyncMetadataChanges {
        let marks = try store.syncMetadata([SyncMetadata.runFrom, SyncMetadata.numberedRuns, SyncMetadata.sequence])
        var entries = SyncMetadataChanges()
        try entries.set(SyncMetadata.runFrom, next)
        guard let runFrom = marks[SyncMetadata.runFrom],
            let sequence = marks[SyncMetadata.sequence], runFrom <= sequence
        else { return entries }
        var runs = Self.numberedRuns(marks[SyncMetadata.numberedRuns])
        runs.append(runFrom...sequence)
        try entries.set(
            SyncMetadata.numberedRuns,
            runs.suffix(Self.numberedRunsKept).map { [$0.lowerBound, $0.upperBound] }
        )
        return entries
    }

    static func numberedRuns(_ pairs: [[UInt64]]?) -> [ClosedRange<UInt64>] {
        (pairs ?? []).compactMap { $0.count == 2 && $0[0] <= $0[1] ? $0[0]...$0[1] : nil }
    }

    /// Whether `stored` (the store's device-id entry) names another id than this instance's: the
    /// store was given a new one (``FolderSync/assignNewDeviceID(_:to:)``) since this instance opened it.
    static func isAnotherDevice(_ stored: Data?, than device: String) -> Bool {
        stored.map { $0 != Data(device.utf8) } ?? false
    }

    /// The error for an instance opened under `device` on a store since given `stored`.
    static func deviceIDChangedError(_ stored: String?, from device: String, store: URL) -> SyncError {
        SyncError(
            .invalidState,
            "the store was given the device id \"\(stored ?? "")\" since sync "
                + "opened it as \"\(device)\": open sync on the store again",
            url: store
        )
    }
}
