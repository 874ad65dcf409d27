import Foundation
import Persistence

/// One batch of an import pass: its logs read again where the scan did not keep them, decoded,
/// merged into one import context and saved with the bookkeeping.
extension Importer {
    /// Applies one batch of logs in one import save, with the clocks, the applied marks and the
    /// dependencies of the next local log. The batch ends early, between two logs, once its
    /// changes reach ``batchUpdatedRecords`` existing records or ``batchHeldMembers`` to-many
    /// members (each record holds its to-many sets whole: the inverse sides of what arrives),
    /// looked at every few hundred changes; the rest goes into the next.
    /// Returns how many of the batch's logs it applied (or passed over); `nil` when a log of the
    /// batch could not be read again (the batch's earlier logs are applied).
    func applyBatch(
        _ batch: ArraySlice<CausalPlan.Candidate>,
        applied: inout [String: AppliedLogs],
        versionsApplied: inout [String: LogVersions],
        result: inout ImportReport,
        anotherInstallation: inout URL?,
        of total: Int
    ) throws -> Int? {
        var saving = BatchSave(context: ObjectContext(coordinator: coordinator, origin: .import, name: "sync import"))
        var complete = true
        var consumed = 0
        // (Looked at every few hundred changes: what the context holds is counted afresh each time.)
        var changesSinceCheck = 0
        for candidate in batch {
            if consumed > 0, changesSinceCheck >= 256 {
                changesSinceCheck = 0
                if Self.batchIsFull(saving.context) { break }
            }
            consumed += 1
            guard let log = reread(candidate, result: &result) else {
                complete = false
                break
            }
            guard let payload = decodedPayload(of: log, url: candidate.url) else {
                // Passed over (marked applied), so the device's later logs still apply; a late
                // version that cannot be applied is not looked at again.
                applied[log.device, default: AppliedLogs()].insert(log.sequence)
                if candidate.late || versionsApplied[log.device]?.digests[log.sequence] != nil {
                    versionsApplied[log.device, default: LogVersions()].noteApplied(
                        log.sequence,
                        digest: LogScanner.digest(log.payload)
                    )
                }
                continue
            }
            // A stand-in for a log its device lost (the original is applied if it turns up), a
            // log met in another version: the version is noted.
            let standIn = payload.changes.isEmpty && payload.dependencies[log.device] != nil
            if standIn || candidate.late || versionsApplied[log.device]?.digests[log.sequence] != nil {
                versionsApplied[log.device, default: LogVersions()].noteApplied(
                    log.sequence,
                    digest: LogScanner.digest(log.payload)
                )
            }
            try merge(payload, into: &saving)
            result.changes += payload.changes.count
            changesSinceCheck += payload.changes.count
            // (The first log after its device's numbering leapt: the numbers leapt over are void,
            // and watched for old logs that still arrive under them.)
            if let void = applied[log.device, default: AppliedLogs()].insert(
                log.sequence,
                following: payload.dependencies[log.device]
            ) {
                versionsApplied[log.device, default: LogVersions()].noteLeap(void, at: now())
            }
            saving.note(log, url: candidate.url, payload: payload, ownDevice: deviceID)
            result.logs += 1
        }
        if anotherInstallation == nil {
            anotherInstallation = try noteAnotherInstallation(in: saving.following, saving.context)
        }
        try save(saving, devices: Set(batch.map(\.log.device)), applied: applied, versionsApplied: versionsApplied)
        conflicts.report(saving.conflicts)
        result.creationConflicts += saving.conflicts
        emit(.importProgress(applied: result.logs, of: total))
        return complete ? consumed : nil
    }

    /// What one batch's import save gathers as its logs are applied.
    struct BatchSave {
        /// The import context the batch's changes go into.
        let context: ObjectContext
        /// The clocks of the records the batch touched.
        var clocks: [ObjectID: RecordClocks] = [:]
        /// This device's own logs that it applies (a restored store catching up on its history).
        var ownLogs: [(log: LogFile, url: URL)] = []
        /// Those that follow an own log their writer leapt past (see Importer+Twins.swift).
        var following: [OwnLogFollowing] = []
        /// The containers the applied logs were written for.
        var containers = Set<String>()
        /// Records created under one id by two devices, both kept (told once the batch is saved).
        var conflicts: [CreationConflict] = []

        /// Notes the log `log` (read from `url`) as applied in this batch.
        mutating func note(_ log: LogFile, url: URL, payload: SyncPayload, ownDevice: String) {
            if log.device == ownDevice {
                ownLogs.append((log, url))
                if let follows = payload.dependencies[ownDevice], !payload.changes.isEmpty {
                    following.append(OwnLogFollowing(url: url, sequence: log.sequence, follows: follows))
                }
            }
            if let container = log.container { containers.insert(container) }
        }
    }

    /// The candidate's log with its payload: the scan kept only the header of most, and the
    /// payload is read now, one batch at a time. `nil` when the file changed since the scan.
    private func reread(_ candidate: CausalPlan.Candidate, result: inout ImportReport) -> LogFile? {
        guard candidate.log.payload.isEmpty else { return candidate.log }
        result.logsReadAgain += 1
        let url = candidate.url
        guard
            let again = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize).flatMap({
                try? LogFile.decode($0, url: url)
            }),
            again.device == candidate.log.device, again.sequence == candidate.log.sequence
        else { return nil }
        return again
    }

    /// The log's changes, or `nil` when they cannot be applied: a checksummed log carries what its
    /// writer wrote, so one whose changes cannot be read or do not fit the schema never will. It
    /// is reported once.
    private func decodedPayload(of log: LogFile, url: URL) -> SyncPayload? {
        do {
            let payload = try SyncPayload.decode(from: log)
            if let problem = payload.malformation(in: coordinator.schema) {
                throw SyncError(
                    .corruptLog,
                    "the log's changes do not fit schema version \(coordinator.schema.version): \(problem)",
                    url: url
                )
            }
            return payload
        } catch {
            let failure =
                error as? SyncError
                ?? SyncError(.corruptLog, "the log's changes cannot be decoded: \(error)", url: url)
            logger.warning(
                "passing over a log whose writer's changes cannot be applied",
                metadata: ["concord.file": "\(url.path)", "concord.error": "\(failure)"]
            )
            emit(.corruptLog(failure))
            return nil
        }
    }

    /// Merges `payload`'s changes into the batch's context, each into the record its writer
    /// meant (see ``CreationConflicts``).
    private func merge(_ payload: SyncPayload, into saving: inout BatchSave) throws {
        var untouched = payload.changes.map(\.id).filter { saving.clocks[$0] == nil }
        var entries = try store.syncMetadata(untouched.map { SyncMetadata.recordClocks($0) })
        var payload = payload
        let original = payload.changes
        payload.changes = try conflicts.route(
            original,
            incarnations: payload.incarnations,
            in: saving.context,
            clocks: &saving.clocks,
            entries: entries,
            found: &saving.conflicts
        )
        // (Changes that go to a moved record: its clocks are read too.)
        if payload.changes.map(\.id) != original.map(\.id) {
            untouched = payload.changes.map(\.id).filter { saving.clocks[$0] == nil }
            entries = try store.syncMetadata(untouched.map { SyncMetadata.recordClocks($0) })
        }
        let redirects = try self.redirects(for: payload)
        // The records this batch has not touched yet: one read for the log instead of one
        // per record.
        try saving.context.prefetch(untouched)
        for change in payload.changes {
            try merger.applyChange(
                change,
                in: saving.context,
                clocks: &saving.clocks,
                entries: entries,
                redirects: redirects
            )
        }
    }

    /// Saves the batch with its bookkeeping: the clocks, the applied marks and versions of
    /// `devices`, the dependencies of the next local log, the clock, and the containers met.
    private func save(
        _ saving: BatchSave,
        devices: Set<String>,
        applied: [String: AppliedLogs],
        versionsApplied: [String: LogVersions]
    ) throws {
        let context = saving.context
        try outbox.keepInOutbox(saving.ownLogs, in: context)
        for (id, state) in saving.clocks {
            try context.setSyncMetadata(SyncMetadata.recordClocks(id), state, in: store)
        }
        for device in devices {
            try context.setSyncMetadata(
                SyncMetadata.applied(device),
                applied[device, default: AppliedLogs()],
                in: store
            )
            try setVersionsApplied(versionsApplied[device] ?? LogVersions(), of: device, in: context)
        }
        // What the next local log depends on: everything applied now.
        var dependencies = try store.syncMetadataValue(SyncMetadata.dependencies) ?? [:]
        for (device, mark) in applied where device != deviceID && mark.through > 0 {
            dependencies[device] = max(dependencies[device] ?? 0, mark.through)
        }
        try context.setSyncMetadata(SyncMetadata.dependencies, dependencies, in: store)
        try context.setSyncMetadata(SyncMetadata.clock, clock.latest, in: store)
        // A log written for a container this device has not recorded (a device started the folder
        // again after a deletion, and its identity has not reached this copy yet) brought that
        // container's data in. Should another device replace that container, every device that
        // sees the replacement refuses its logs, its writer gives up what they carried, and this
        // device must hear of it as of its own container's replacement: its join then settles
        // what it holds. Otherwise it keeps that data alone, for good.
        let joined = identities.joining
        let met = saving.containers.subtracting(identities.recordedContainerIDs()).filter { $0 != joined }
        let known: Set<String> = met.isEmpty ? [] : identities.metContainerIDs()
        if !met.isSubset(of: known) {
            try context.setSyncMetadata(SyncMetadata.metContainers, known.union(met).sorted(), in: store)
        }
        try context.save()
    }

    /// About how many payload bytes one import save applies (a megabyte: some thousands of
    /// records), whatever the batch's log count.
    static let batchBytes = 1 << 20

    /// About how many existing records one import save changes at most (see
    /// ``applyBatch(_:applied:result:of:)``): memory follows the batch, not the store.
    static let batchUpdatedRecords = 1024

    /// About how many to-many members the records one import save changes hold at most. A
    /// record whose derived side an import changes (the folder of each arriving note) holds its
    /// whole set, so a thousand such records of a large store hold far more than a thousand
    /// small ones: the bound is on what they hold.
    static let batchHeldMembers = 32768

    /// Whether the changes `context` holds reach a batch's bounds (``batchUpdatedRecords``,
    /// ``batchHeldMembers``): the batch is saved before the next log.
    static func batchIsFull(_ context: ObjectContext) -> Bool {
        let footprint = context.pendingFootprint
        return footprint.updatedRecords >= batchUpdatedRecords || footprint.members >= batchHeldMembers
    }

    /// For the targets `payload` refers to that were removed as duplicates here, the winner each
    /// now stands for (following a winner that lost in turn).
    func redirects(for payload: SyncPayload) throws -> [ObjectID: ObjectID] {
        try duplicates.winners(
            of: payload.changes.reduce(into: Set<ObjectID>()) { $0.formUnion(DuplicateLedger.targets(of: $1)) }
        )
    }
}
