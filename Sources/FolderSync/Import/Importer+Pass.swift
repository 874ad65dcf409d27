import Foundation
import Persistence

extension Importer {
    /// Applies the logs available (see ``FolderSync/importAvailable(batchSize:)``); with
    /// `includingOwnLogs`, this device's own logs not yet marked applied too (its store was
    /// replaced with the container's, or lost). The caller did the pass's prelude.
    func apply(
        batchSize: Int,
        includingOwnLogs: Bool,
        holding permit: SyncLock.Permit?
    ) throws -> ImportReport {
        // Local commits, in this process and others of this device, wait while an import reads
        // and rewrites the clocks they also rewrite.
        try syncLock.withLock(permit) { permit in
            // A restored device imports its own earlier logs until it holds them all.
            let marks = try store.syncMetadata([SyncMetadata.restoreThrough, SyncMetadata.applied(deviceID)])
            let restoring =
                (marks[SyncMetadata.restoreThrough] ?? 0) > AppliedLogs.of(deviceID, in: marks).through
            let includingOwnLogs = includingOwnLogs || restoring
            // What is applied, for the devices that have folders (read by key: a store's metadata
            // also holds a clock per record).
            let devices = ((try? FileManager.default.contentsOfDirectory(atPath: layout.devicesFolder.path)) ?? [])
                .filter { ContainerLayout.isValidDeviceID($0) && (includingOwnLogs || $0 != deviceID) }
            let appliedEntries = try store.syncMetadata(devices.map { SyncMetadata.applied($0) })
            var applied: [String: AppliedLogs] = [:]
            for device in devices { applied[device] = AppliedLogs.of(device, in: appliedEntries) }
            // Logs applied empty in place of lost ones: their originals may still turn up.
            let everyDevice = includingOwnLogs ? devices : devices + [deviceID]
            var versionsApplied = try self.versionsApplied(of: everyDevice)
            let report = try scanner.scan(
                after: applied.mapValues(\.through),
                replacedContainers: identities.replacedContainers(),
                versionsApplied: versionsApplied
            )
            for error in report.corrupt {
                logger.warning(
                    "a damaged log; asking its device for it again",
                    metadata: ["concord.file": "\(error.url?.path ?? "?")", "concord.error": "\(error)"]
                )
                emit(.corruptLog(error))
            }
            // Intact logs in a newer file format: kept (never marked applied), reported once per
            // file, applied by a Concord that reads the format.
            for error in report.unsupported {
                logger.warning(
                    "keeping a log in a newer format until Concord is upgraded",
                    metadata: ["concord.file": "\(error.url?.path ?? "?")", "concord.error": "\(error)"]
                )
                emit(.corruptLog(error))
            }
            var result = ImportReport(waiting: report.waiting.count)
            result.filesRead = report.filesRead
            if !report.waiting.isEmpty {
                logger.info(
                    "files still arriving; they are examined again next time",
                    metadata: ["concord.files": "\(report.waiting.count)"]
                )
                emit(.waiting(files: report.waiting.count))
            }
            var candidates: [CausalPlan.Candidate] = []
            var gatedDevices: [String: Int] = [:]
            for item in report.ready where applied[item.log.device]?.contains(item.log.sequence) != true {
                // A log from a newer schema, and every later one of its device, waits for an upgrade.
                if item.log.schemaVersion > coordinator.schema.version {
                    gatedDevices[item.log.device] = max(gatedDevices[item.log.device] ?? 0, item.log.schemaVersion)
                    result.gated += 1
                    continue
                }
                // (Dependencies that could not be read, in a payload damaged beyond its checksum as
                // its writer wrote it, are none: it is applied in order and reported there.)
                candidates.append(
                    CausalPlan.Candidate(
                        url: item.url,
                        log: item.log,
                        dependencies: item.dependencies,
                        size: item.payloadSize
                    )
                )
            }
            for (device, version) in gatedDevices.sorted(by: { $0.key < $1.key }) {
                emit(.newerSchemaFound(device: device, schemaVersion: version))
            }
            var plan = CausalPlan(
                applied: applied,
                candidates: candidates,
                assumedDevice: includingOwnLogs ? nil : deviceID
            )
            // Logs compacted away before this device could apply them come from a baseline.
            let caughtUp = try catchUp(
                missing: plan.missing,
                applied: applied,
                includingOwnLogs: includingOwnLogs,
                holding: permit
            )
            if caughtUp {
                let entries = try store.syncMetadata(devices.map { SyncMetadata.applied($0) })
                for device in devices { applied[device] = AppliedLogs.of(device, in: entries) }
                plan = CausalPlan(
                    applied: applied,
                    candidates: candidates,
                    assumedDevice: includingOwnLogs ? nil : deviceID
                )
            }
            // Writes whose logs were lost with this device's machine, kept in its old baselines.
            // (Either may have shown how far this device's history went: see
            // `noteRestoredHistory`.)
            // (A catch-up also keeps what the baseline carries of the others' logs.)
            if try takeInOldOwnBaselines(holding: permit) || caughtUp {
                versionsApplied = try self.versionsApplied(of: everyDevice)
            }
            let ownDue = try healer.noteMissing(plan.missing, gated: Set(gatedDevices.keys), applied: applied)
            // This device's own missing logs are published again at once.
            for sequence in ownDue { _ = try? outbox.republish(sequence) }
            result.blocked = plan.blocks.count
            // Other versions of logs applied already go after what the plan applies (each change
            // keeps its clock: the order does not matter), once their log is applied in some
            // version; those of a newer schema wait. (This device's own mark is read too, when
            // a version of its own turned up: the batch writes the marks of what it applies.)
            let unmarked = Set(report.lateVersions.map(\.log.device)).filter { plan.applied[$0] == nil }
            if !unmarked.isEmpty {
                let entries = try store.syncMetadata(unmarked.map { SyncMetadata.applied($0) })
                for device in unmarked {
                    applied[device] = AppliedLogs.of(device, in: entries)
                    plan.applied[device] = applied[device]
                }
            }
            // (This device's own logs it wrote are applied here whatever the marks say.)
            let ownWritten =
                report.lateVersions.contains { $0.log.device == deviceID }
                ? try store.syncMetadataValue(SyncMetadata.sequence) ?? 0 : 0
            // (A number leapt over that a baseline has just shown to be history is not applied again.)
            let late = report.lateVersions.filter { version in
                versionsApplied[version.log.device].map {
                    $0.digests[version.log.sequence] != nil || version.log.sequence > ($0.historyThrough ?? 0)
                } ?? true
            }.filter {
                $0.log.schemaVersion <= coordinator.schema.version
                    && (plan.applied[$0.log.device]?.contains($0.log.sequence) == true
                        || ($0.log.device == deviceID && $0.log.sequence <= ownWritten))
            }.map {
                CausalPlan.Candidate(
                    url: $0.url,
                    log: $0.log,
                    dependencies: $0.dependencies,
                    size: $0.payloadSize,
                    late: true
                )
            }
            let order = plan.order + late
            guard !order.isEmpty else { return result }
            emit(.importStarted(logs: order.count))
            var next = order.startIndex
            var anotherInstallation: URL?
            while next < order.endIndex, anotherInstallation == nil {
                let batch = CausalPlan.batch(of: order[next...], logs: max(batchSize, 1), bytes: Self.batchBytes)
                // A file that changed since the scan (replaced, removed) ends this pass: the rest
                // is planned again at the next one.
                guard
                    let applied = try applyBatch(
                        batch,
                        applied: &applied,
                        versionsApplied: &versionsApplied,
                        result: &result,
                        anotherInstallation: &anotherInstallation,
                        of: order.count
                    )
                else { break }
                next += applied
            }
            logger.debug(
                "imported",
                metadata: ["concord.logs": "\(result.logs)", "concord.changes": "\(result.changes)"]
            )
            emit(.imported(logs: result.logs, changes: result.changes))
            return result
        }
    }

    /// Applies one batch of logs in one import save, with the clocks, the applied marks and the
    /// dependencies of the next local log. The batch ends early, between two logs, once its
    /// changes reach ``batchUpdatedRecords`` existing records or ``batchHeldMembers`` to-many
    /// members (each record holds its to-many sets whole: the inverse sides of what arrives),
    /// looked at every few hundred changes; the rest goes into the next.
    /// Returns how many of the batch's logs it applied (or passed over); `nil` when a log of the
    /// batch could not be read again (the batch's earlier logs are applied).
    private func applyBatch(
        _ batch: ArraySlice<CausalPlan.Candidate>,
        applied: inout [String: AppliedLogs],
        versionsApplied: inout [String: LogVersions],
        result: inout ImportReport,
        anotherInstallation: inout URL?,
        of total: Int
    ) throws -> Int? {
        let context = ObjectContext(coordinator: coordinator, origin: .import, name: "sync import")
        var clocks: [ObjectID: RecordClocks] = [:]
        var complete = true
        var consumed = 0
        // This device's own logs that it applies (a restored store catching up on its history).
        var ownLogs: [(log: LogFile, url: URL)] = []
        // Those that follow an own log their writer leapt past (see FolderSync+Twins.swift).
        var following: [OwnLogFollowing] = []
        // The containers the applied logs were written for (see the end).
        var containers = Set<String>()
        // (Looked at every few hundred changes: what the context holds is counted afresh each time.)
        var changesSinceCheck = 0
        for candidate in batch {
            if consumed > 0, changesSinceCheck >= 256 {
                changesSinceCheck = 0
                if Self.batchIsFull(context) { break }
            }
            consumed += 1
            let url = candidate.url
            // The scan kept only the header: the payload is read now, one batch at a time.
            var log = candidate.log
            if log.payload.isEmpty {
                result.logsReadAgain += 1
                guard
                    let again = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize).flatMap({
                        try? LogFile.decode($0, url: url)
                    }),
                    again.device == log.device, again.sequence == log.sequence
                else {
                    complete = false
                    break
                }
                log = again
            }
            // A checksummed log carries what its writer wrote: one whose changes cannot be read
            // or do not fit the schema never will. It is reported once and passed over (marked
            // applied), so the device's later logs still apply.
            let payload: SyncPayload
            do {
                payload = try SyncPayload.decode(from: log)
                if let problem = payload.malformation(in: coordinator.schema) {
                    throw SyncError(
                        .corruptLog,
                        "the log's changes do not fit schema version \(coordinator.schema.version): \(problem)",
                        url: url
                    )
                }
            } catch {
                let failure =
                    error as? SyncError
                    ?? SyncError(.corruptLog, "the log's changes cannot be decoded: \(error)", url: url)
                logger.warning(
                    "passing over a log whose writer's changes cannot be applied",
                    metadata: ["concord.file": "\(url.path)", "concord.error": "\(failure)"]
                )
                emit(.corruptLog(failure))
                applied[log.device, default: AppliedLogs()].insert(log.sequence)
                // (A late version that cannot be applied is not looked at again.)
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
            let untouched = payload.changes.map(\.id).filter { clocks[$0] == nil }
            let entries = try store.syncMetadata(untouched.map { SyncMetadata.recordClocks($0) })
            let redirects = try self.redirects(for: payload)
            // The records this batch has not touched yet: one read for the log instead of one
            // per record.
            try context.prefetch(untouched)
            for change in payload.changes {
                try merger.applyChange(change, in: context, clocks: &clocks, entries: entries, redirects: redirects)
                result.changes += 1
            }
            changesSinceCheck += payload.changes.count
            // (The first log after its device's numbering leapt: the numbers leapt over are void,
            // and watched for old logs that still arrive under them.)
            if let void = applied[log.device, default: AppliedLogs()].insert(
                log.sequence,
                following: payload.dependencies[log.device]
            ) {
                versionsApplied[log.device, default: LogVersions()].noteLeap(void, at: now())
            }
            if log.device == deviceID {
                ownLogs.append((log, url))
                if let follows = payload.dependencies[deviceID], !payload.changes.isEmpty {
                    following.append(OwnLogFollowing(url: url, sequence: log.sequence, follows: follows))
                }
            }
            if let container = log.container { containers.insert(container) }
            result.logs += 1
        }
        if anotherInstallation == nil { anotherInstallation = try noteAnotherInstallation(in: following, context) }
        try outbox.keepInOutbox(ownLogs, in: context)
        for (id, state) in clocks { try context.setSyncMetadata(SyncMetadata.recordClocks(id), state, in: store) }
        for device in Set(batch.map(\.log.device)) {
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
        let met = containers.subtracting(identities.recordedContainerIDs()).filter { $0 != joined }
        let known: Set<String> = met.isEmpty ? [] : identities.metContainerIDs()
        if !met.isSubset(of: known) {
            try context.setSyncMetadata(SyncMetadata.metContainers, known.union(met).sorted(), in: store)
        }
        try context.save()
        emit(.importProgress(applied: result.logs, of: total))
        return complete ? consumed : nil
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
        let targets = payload.changes.reduce(into: Set<ObjectID>()) { $0.formUnion(DuplicateLedger.targets(of: $1)) }
        var found: [ObjectID: ObjectID] = [:]
        var asking = targets
        for _ in 0..<8 where !asking.isEmpty {
            let entries = try store.syncMetadata(asking.map { SyncMetadata.redirect($0) })
            var next = Set<ObjectID>()
            for id in asking {
                guard let text = entries[SyncMetadata.redirect(id)],
                    let winner = Self.objectID(text, entity: id.entity)
                else { continue }
                found[id] = winner
                next.insert(winner)
            }
            asking = next.subtracting(found.keys)
        }
        // Chains end at the last winner.
        for id in found.keys {
            var end = found[id]!
            var hops = 0
            while let further = found[end], hops < 8 {
                end = further
                hops += 1
            }
            found[id] = end
        }
        return found
    }
}
