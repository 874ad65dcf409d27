import Foundation
import Persistence

/// Every metadata entry sync keeps in the store, by name and by how its value is stored: the
/// only place that spells their names (each value's bytes are what earlier versions wrote, so
/// existing stores keep working). Read them with ``SyncMetadataSnapshot``
/// (`store.syncMetadata(_:)`), write them with ``SyncMetadataChanges``, a commit's
/// `StoreChanges` or an object context.
package enum SyncMetadata {
    /// What every name of sync's entries begins with (a store's other metadata is not sync's).
    package static let namespace = "sync."

    // MARK: The device

    /// The store's device id.
    package static let device = SyncMetadataKey<String>("sync.device", .text)
    /// Set (to the old id) when the store was given a new device id; removed when a join under
    /// the new id completes.
    static let renamedFrom = SyncMetadataKey<String>("sync.renamedFrom", .text)
    /// The new id, once its first join found it unused in the container (a join interrupted
    /// after writing under it goes on without asking again).
    static let renamedTo = SyncMetadataKey<String>("sync.renamedTo", .text)
    /// Set (to the file's path) when an import found a log of another installation that writes
    /// under this device's id now; removed when the app enables sync again.
    static let deviceIDInUse = SyncMetadataKey<String>("sync.deviceIDInUse", .text)

    // MARK: The outbox and numbering
    // (Next to the outbox's newest entries in key order: a save's commit rewrites the number, the
    // clock and the newest outbox entry.)

    /// The number of the last log this store made from a local save.
    package static let sequence = SyncMetadataKey<UInt64>("sync.out/seq", .decimal)
    /// The device's clock, as the last log stamped it (or an import or a catch-up saw it).
    package static let clock = SyncMetadataKey<SyncClock>("sync.out/clock", .json())
    /// The logs this device made, committed with the saves they carry, until compaction knows
    /// every device has applied them: ``outboxLog(_:)``.
    package static let outbox = SyncMetadataPrefix<Data>("sync.out.", .bytes)
    /// The oldest sequence number that may still have to be written into the container (the
    /// export mark).
    static let outboxFrom = SyncMetadataKey<UInt64>("sync.outboxFrom", .decimal)
    /// The oldest outbox entry still kept (entries before it were released by compaction).
    static let keptFrom = SyncMetadataKey<UInt64>("sync.keptFrom", .decimal)
    /// For each other device, the sequence through which its logs are applied here: the
    /// dependencies of the next local log, kept up to date by every import.
    static let dependencies = SyncMetadataKey<[String: UInt64]>("sync.deps", .json(sortedKeys: true))
    /// The number the next local log follows, after a leap (see
    /// ``FolderSync/continueNumbering(after:resending:)``).
    static let leapFrom = SyncMetadataKey<UInt64>("sync.out/leapFrom", .decimal)
    /// The first number of this store's current numbering run: where its last leap went.
    static let runFrom = SyncMetadataKey<UInt64>("sync.out/runFrom", .decimal)
    /// The earlier runs this store numbered since its first leap (`[[first, last]]`, the newest
    /// ``FolderSync/numberedRunsKept``).
    static let numberedRuns = SyncMetadataKey<[[UInt64]]>("sync.out/numberedRuns", .json())
    /// The number this store was to number next when a log first looked like another
    /// installation's (see ``FolderSync/noteAnotherInstallation(in:_:)``).
    static let suspectFrom = SyncMetadataKey<UInt64>("sync.out/suspectFrom", .decimal)
    /// Set when logs this store numbered may have taken names an earlier life of this device id
    /// had used: its writes go out again at the next import (see
    /// ``FolderSync/leapPastHistoryShown()``). The value is the number allocated (or leapt to)
    /// where it was set: a mark set again later differs from one a resend started with.
    static let resendOwnWrites = SyncMetadataKey<UInt64>("sync.out/resendOwnWrites", .decimal)
    /// Set when a restored device's store lacked its own logs through this number.
    static let restoreThrough = SyncMetadataKey<UInt64>("sync.restoreThrough", .decimal)
    /// Where the logs of a retired device id are kept: ``retiredOutboxLog(_:_:)``
    /// (`ID.NUMBER` after the prefix).
    static let retiredOutbox = SyncMetadataPrefix<Data>("sync.retiredOut.", .bytes)

    // MARK: What is applied

    /// Per device (the suffix), which of its logs are applied here.
    package static let applied = SyncMetadataPrefix<AppliedLogs>("sync.applied.", .json())
    /// Per device (the suffix), its ``LogVersions`` (no entry for none).
    package static let versionsApplied = SyncMetadataPrefix<LogVersions>("sync.versions.", .json(sortedKeys: true))
    /// Per record (the suffix, `Entity/uuid`), what this device knows of its history.
    package static let recordClocks = SyncMetadataPrefix<RecordClocks>("sync.r.", .recordClocks)
    /// The newest history among the tombstones this store collected (see
    /// ``BaselinePayload/collectedThrough``).
    static let collectedThrough = SyncMetadataKey<SyncClock>("sync.collectedThrough", .json())

    // MARK: Duplicates

    /// `<winner>|<loser>`: the duplicates removed in favour of a winner
    /// (``loser(winner:loser:)``).
    static let loser = SyncMetadataPrefix<Void>("sync.loser.", .mark(""))
    /// `<removed>|<record>`: records whose references were moved off a removed duplicate (a
    /// hint: the record's clocks say whether it still holds) (``relinked(target:record:)``).
    static let relinked = SyncMetadataPrefix<Void>("sync.relinked.", .mark(""))
    /// `<winner>`: a winner a local save changed; the next import undoes the removals in its
    /// favour and decides again.
    static let reconsider = SyncMetadataPrefix<Void>("sync.reconsider.", .mark(""))
    /// `<loser>`: the winner (`Entity/uuid`) the removed duplicate was folded into.
    static let redirect = SyncMetadataPrefix<String>("sync.redirect.", .text)

    // MARK: The container and the lifecycle

    /// Set once this device contributed its data to the container (a join completed).
    static let contributed = SyncMetadataKey<Void>("sync.contributed", .mark("1"))
    /// The choice of a join begun and not finished.
    static let joining = SyncMetadataKey<SyncJoinChoice>("sync.joining", .rawText)
    /// Set by ``FolderSync/disable()``: the next enable is a returning device's, whatever the
    /// sentinel says.
    static let disabled = SyncMetadataKey<Void>("sync.disabled", .mark("1"))
    /// The identities of the container this device joined (one a line, sorted).
    static let container = SyncMetadataKey<[String]>("sync.container", .lines)
    /// Set when this device saw the container (or its store folder) deleted while it synced;
    /// cleared by the next join. A container back without an identity is then another one.
    static let containerGone = SyncMetadataKey<Void>("sync.containerGone", .mark("1"))
    /// The identities of the containers whose logs this device applied without having recorded
    /// them (one a line, sorted: a device started the folder again and its identity had not
    /// reached this copy yet, or was replaced before it did). Those logs' data is in this
    /// device's store: an identity that replaces one of them replaces what this device holds,
    /// as for its own container (see ``ContainerIdentities/isSameContainer(countingMet:)``). A join that
    /// forgets the applied logs forgets them too.
    static let metContainers = SyncMetadataKey<[String]>("sync.containersMet", .lines)
    /// The identities of the containers this device replaced with its data
    /// (``SyncJoinChoice/replaceContainerWithLocal``). The new identity file says so too, but a
    /// copy of the container may lack it for a while (a sync engine replacing it, a copy still
    /// filling): meanwhile the replaced container's logs, which a device that had not seen the
    /// replacement may still write, are refused all the same, and never counted as met.
    static let replacedContainers = SyncMetadataKey<[String]>("sync.containersReplaced", .lines)
    /// When this device last acknowledged and compacted by itself (seconds since 1970).
    static let maintainedAt = SyncMetadataKey<Double>("sync.maintainedAt", .decimal)

    // MARK: Keys of earlier versions

    /// Where earlier versions kept ``sequence``: the key sorted after every record's clocks, so
    /// each save's commit rewrote a page of its own for it.
    static let legacySequence = SyncMetadataKey<UInt64>("sync.seq", .decimal)
    /// Where earlier versions kept ``clock`` (likewise, before the outbox).
    static let legacyClock = SyncMetadataKey<SyncClock>("sync.clock", .json())
    /// Each key of an earlier version, and the key its entry moved to.
    static let renamed: [(old: SyncMetadataKey<Data>, new: SyncMetadataKey<Data>)] = [
        (legacySequence.raw, sequence.raw), (legacyClock.raw, clock.raw),
    ]
}

extension SyncMetadata {
    /// The outbox entry of this device's log `sequence` (numbers padded to 16 digits, so that
    /// key order is number order).
    package static func outboxLog(_ sequence: UInt64) -> SyncMetadataKey<Data> {
        outbox(padded(sequence))
    }

    /// The log number an outbox entry's name says (`nil`: not an outbox entry).
    static func outboxSequence(of name: String) -> UInt64? {
        outbox.suffix(of: name).flatMap { UInt64($0) }
    }

    /// The entry that keeps `device`'s log `sequence`, after the store retired that id.
    static func retiredOutboxLog(_ device: String, _ sequence: UInt64) -> SyncMetadataKey<Data> {
        retiredOutbox(device + "." + padded(sequence))
    }

    /// The device id and log number a retired-outbox entry's name says; `nil` for another name.
    static func retiredLog(named name: String) -> (device: String, sequence: UInt64)? {
        guard let rest = retiredOutbox.suffix(of: name), let dot = rest.lastIndex(of: "."),
            let sequence = UInt64(rest[rest.index(after: dot)...])
        else { return nil }
        return (String(rest[..<dot]), sequence)
    }

    /// The mark that `loser` was removed as a duplicate in favour of `winner`.
    static func loser(winner: ObjectID, loser: ObjectID) -> SyncMetadataKey<Void> {
        self.loser("\(winner)|\(loser)")
    }

    /// The marks of the duplicates removed in favour of `winner`.
    static func losers(favouring winner: ObjectID) -> SyncMetadataPrefix<Void> {
        loser.narrowed(to: "\(winner)|")
    }

    /// The hint that `record`'s references were moved off the removed duplicate `target`.
    static func relinked(target: ObjectID, record: ObjectID) -> SyncMetadataKey<Void> {
        relinked("\(target)|\(record)")
    }

    /// The hints of the records whose references were moved off the removed duplicate `target`.
    static func relinks(of target: ObjectID) -> SyncMetadataPrefix<Void> {
        relinked.narrowed(to: "\(target)|")
    }

    /// What follows the last `|` of a duplicate mark's name (the loser, or the record relinked).
    static func lastRecord(of name: String) -> Substring? {
        name.lastIndex(of: "|").map { name[name.index(after: $0)...] }
    }

    private static func padded(_ sequence: UInt64) -> String {
        let digits = String(sequence)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }
}
