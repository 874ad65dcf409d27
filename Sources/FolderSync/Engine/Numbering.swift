import Foundation
import Persistence

/// This device's log numbers: how far its history in the container goes, the leap a restored
/// device's numbering makes past it, and the empty logs that stand for numbers with nothing.
struct Numbering: SyncPart {
    let context: SyncContext
    let identities: ContainerIdentities
    let baselines: BaselineReader
    let acknowledger: Acknowledger
    let registrar: Registrar

    /// Empty logs for the numbers up to `own` of this device id that the container lacks (no
    /// file, no baseline covering them; with `includingPresent`, those it holds too), by number.
    func emptyLogsBelowOwnHistory(_ own: UInt64, includingPresent: Bool = false) throws -> [UInt64: Data] {
        let covered = own > 0 ? baselines.newestBaseline()?.baseline.covers[deviceID] ?? 0 : 0
        guard own > covered else { return [:] }
        let present = includingPresent ? [] : Set((try? layout.logSequences(device: deviceID)) ?? [])
        var logs: [UInt64: Data] = [:]
        for number in (covered + 1)...own where !present.contains(number) {
            logs[number] = try emptyLog(number).encoded()
        }
        return logs
    }

    /// Log `number` of this device, carrying nothing.
    func emptyLog(_ number: UInt64) throws -> LogFile {
        // (The first number after a leap keeps naming the log it follows: see `continueNumbering`.)
        let predecessor = try predecessor(of: number)
        return LogFile(
            device: deviceID,
            sequence: number,
            schemaVersion: coordinator.schema.version,
            created: Date(),
            payload: try SyncPayload(
                changes: [],
                dependencies: predecessor < number - 1 ? [deviceID: predecessor] : [:]
            ).encoded(),
            container: identities.loggedContainer()
        )
    }

    /// The log this device's log `number` follows: the one before it, or, right after a leap,
    /// the last one before the numbers leapt over.
    func predecessor(of number: UInt64) throws -> UInt64 {
        let versions = try versionsApplied(of: [deviceID])[deviceID] ?? LogVersions()
        return versions.voids.first { $0.upperBound == number - 1 }.map { $0.lowerBound - 1 } ?? number - 1
    }

    /// The highest log number of this device id the container knows of: its logs, what its own
    /// acknowledgement says it exported and committed, what the others' say they applied of it,
    /// what baselines cover of it, where its registration says its numbering last leapt to.
    func ownHistoryInContainer() -> UInt64 {
        var highest = max(((try? highestOwnLog()) ?? nil) ?? 0, registrar.historyShown())
        for acknowledgement in acknowledger.acknowledgements() {
            highest = max(highest, acknowledgement.applied[deviceID] ?? 0)
            if acknowledgement.device == deviceID { highest = max(highest, acknowledgement.committed ?? 0) }
        }
        // (The newest baseline is read and checked only when one may raise the answer.)
        if baselines.someBaselineMayCover(where: { ($0[deviceID] ?? 0) > highest }),
            let baseline = baselines.newestBaselineCovers()
        {
            highest = max(highest, baseline.covers[deviceID] ?? 0)
        }
        return highest
    }

    /// How many numbers a restored device's numbering leaps over, past the highest of its own the
    /// container knows of: its old logs that had not reached the container copy it restored
    /// from (a copy still filling on a new machine, a log still on its way) arrive under them,
    /// and are applied when they do, never overwritten by new logs under their names.
    static let restoreLeap: UInt64 = 1024

    /// How long after a device's numbering leapt its old logs may still arrive under the numbers
    /// leapt over, as far as baselines and acknowledgements go (see ``FolderSync/leapWindow``).
    static let leapWindow: TimeInterval = 30 * 24 * 3600

    /// Makes the next local log number come after `sequence` and ``restoreLeap`` more: the
    /// first log after the leap names `sequence` as its predecessor (a dependency on its own
    /// device), so that nobody waits for the numbers leapt over, which are watched instead.
    /// The restored device's own history is imported through `sequence` by every import until it
    /// is (its logs may wait for others' first).
    /// Past a join (`resending`), when this store has numbered logs since its last leap (or at
    /// all, when it never leapt), their names may be an earlier life's that the others passed
    /// over as applied: its writes go out again at the next import (``SyncMetadata/resendOwnWrites``).
    func continueNumbering(after sequence: UInt64, resending: Bool = true) throws {
        let versions = try versionsApplied(of: [deviceID])[deviceID] ?? LogVersions()
        let numbered = try store.syncMetadataValue(SyncMetadata.sequence) ?? 0
        var (next, entries) = try leap(after: sequence, versions: versions)
        if resending, numbered > (versions.voids.last?.upperBound ?? 0) {
            try entries.set(SyncMetadata.resendOwnWrites, next)
        }
        try entries.set(SyncMetadata.sequence, next - 1)
        try entries.set(SyncMetadata.outboxFrom, next)
        try entries.set(SyncMetadata.leapFrom, sequence)
        try store.commit(StoreChanges(syncMetadata: entries))
        // (The registration says where the numbering went: an installation that restores this
        // id later, before the logs reach its copy of the container, leaps past it.)
        if (try? registrar.isRegistered()) == true {
            do {
                try registrar.register()
            } catch {
                logger.warning(
                    "cannot note the leap in this device's registration",
                    metadata: ["concord.device": "\(deviceID)", "concord.error": "\(error)"]
                )
            }
        }
    }

    /// The metadata entries that make this device's next log number `from` +
    /// ``restoreLeap`` + 1, the numbers between leapt over (`versions` notes them), with its
    /// history still to import through `from`.
    func leap(after from: UInt64, versions: LogVersions) throws -> (next: UInt64, entries: SyncMetadataChanges) {
        var versions = versions
        versions.noteLeap((from + 1)...(from + Self.restoreLeap), at: now())
        var entries = SyncMetadataChanges()
        try entries.set(SyncMetadata.restoreThrough, from)
        try Self.setVersionsApplied(versions, of: deviceID, in: &entries)
        // (What this store numbered since its first leap: see Importer+Twins.swift.)
        entries.merge(try numberingRunEntries(startingAt: from + Self.restoreLeap + 1))
        return (from + Self.restoreLeap + 1, entries)
    }

    /// How far the container shows this device id's history, for a device whose numbering
    /// leapt within ``FolderSync/leapWindow`` (`nil` otherwise): the other devices' acknowledgements, its
    /// own from before it was restored (what it had committed), its registration's last leap
    /// (``DeviceRegistration/numberingFrom``), and the newest baseline as the
    /// last catch-up check read it (if it is still the newest). A device restored knowing less of
    /// its history than there was learns the rest this way when the logs themselves are gone
    /// (compacted into baselines). Numbers past ``plausibleSequences`` (a damaged or hostile
    /// acknowledgement) are passed over. Also returns this device's versions, whose last void is
    /// its last leap.
    func historyShown() throws -> (shown: UInt64, versions: LogVersions, leap: ClosedRange<UInt64>)? {
        guard let own = try versionsApplied(of: [deviceID])[deviceID], let leap = own.voids.last,
            let leapt = own.leapt, now().timeIntervalSince(leapt) < Numbering.leapWindow
        else { return nil }
        var shown: UInt64 = 0
        func note(_ number: UInt64?) {
            if let number, number < Self.plausibleSequences { shown = max(shown, number) }
        }
        for acknowledgement in acknowledger.acknowledgements() {
            note(acknowledgement.applied[deviceID])
            if acknowledgement.device == deviceID { note(acknowledgement.committed) }
        }
        note(registrar.historyShown())
        let total = baselines.newestBaselineTotal()
        if let checked = baselines.state.withLock({ $0.checkedBaseline }), checked.total == total {
            note(checked.covers[deviceID])
        }
        return (shown, own, leap)
    }
}
