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
            var pass = try startPass(includingOwnLogs: includingOwnLogs)
            let report = try scan(&pass)
            let (candidates, gated) = readyCandidates(report, &pass)
            var plan = try plan(candidates, gated: gated, &pass, holding: permit)
            let late = try lateCandidates(report, plan: &plan, &pass)
            let order = plan.order + late
            guard !order.isEmpty else { return pass.result }
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
                        applied: &pass.applied,
                        versionsApplied: &pass.versionsApplied,
                        result: &pass.result,
                        anotherInstallation: &anotherInstallation,
                        of: order.count
                    )
                else { break }
                next += applied
            }
            logger.debug(
                "imported",
                metadata: ["concord.logs": "\(pass.result.logs)", "concord.changes": "\(pass.result.changes)"]
            )
            emit(.imported(logs: pass.result.logs, changes: pass.result.changes))
            return pass.result
        }
    }

    /// What one import pass knows as it goes: whose logs it looks at, what is applied of each,
    /// and what it did.
    struct Pass {
        /// Whether this device's own logs are applied too (a restored or replaced store).
        var includingOwnLogs: Bool
        /// The devices with folders whose logs the pass looks at.
        var devices: [String]
        /// What is applied of each of them.
        var applied: [String: AppliedLogs]
        /// The versions applied of every device's logs (this one's included).
        var versionsApplied: [String: LogVersions]
        /// What the pass did.
        var result = ImportReport()

        /// Every device whose versions count (this one's too).
        func everyDevice(_ own: String) -> [String] { includingOwnLogs ? devices : devices + [own] }
    }

    /// Reads what is applied, for the devices that have folders (by key: a store's metadata also
    /// holds a clock per record). A restored device imports its own earlier logs until it holds
    /// them all.
    private func startPass(includingOwnLogs: Bool) throws -> Pass {
        let marks = try store.syncMetadata([SyncMetadata.restoreThrough, SyncMetadata.applied(deviceID)])
        let restoring = (marks[SyncMetadata.restoreThrough] ?? 0) > AppliedLogs.of(deviceID, in: marks).through
        let includingOwnLogs = includingOwnLogs || restoring
        let devices = SyncFiles.names(in: layout.devicesFolder)
            .filter { ContainerLayout.isValidDeviceID($0) && (includingOwnLogs || $0 != deviceID) }
        let appliedEntries = try store.syncMetadata(devices.map { SyncMetadata.applied($0) })
        var applied: [String: AppliedLogs] = [:]
        for device in devices { applied[device] = AppliedLogs.of(device, in: appliedEntries) }
        // Logs applied empty in place of lost ones: their originals may still turn up.
        let everyDevice = includingOwnLogs ? devices : devices + [deviceID]
        return Pass(
            includingOwnLogs: includingOwnLogs,
            devices: devices,
            applied: applied,
            versionsApplied: try versionsApplied(of: everyDevice)
        )
    }

    /// Scans the container for what is not applied yet, and reports what it found damaged, in a
    /// newer format, or still arriving.
    private func scan(_ pass: inout Pass) throws -> ScanReport {
        let report = try scanner.scan(
            after: pass.applied.mapValues(\.through),
            replacedContainers: identities.replacedContainers(),
            versionsApplied: pass.versionsApplied
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
        pass.result = ImportReport(waiting: report.waiting.count)
        pass.result.filesRead = report.filesRead
        if !report.waiting.isEmpty {
            logger.info(
                "files still arriving; they are examined again next time",
                metadata: ["concord.files": "\(report.waiting.count)"]
            )
            emit(.waiting(files: report.waiting.count))
        }
        return report
    }

    /// The logs ready to apply, and the devices whose logs wait for a newer schema (each
    /// reported), by the newest schema version met.
    private func readyCandidates(
        _ report: ScanReport,
        _ pass: inout Pass
    ) -> (candidates: [CausalPlan.Candidate], gated: [String: Int]) {
        var candidates: [CausalPlan.Candidate] = []
        var gatedDevices: [String: Int] = [:]
        for item in report.ready where pass.applied[item.log.device]?.contains(item.log.sequence) != true {
            // A log from a newer schema, and every later one of its device, waits for an upgrade.
            if item.log.schemaVersion > coordinator.schema.version {
                gatedDevices[item.log.device] = max(gatedDevices[item.log.device] ?? 0, item.log.schemaVersion)
                pass.result.gated += 1
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
        return (candidates, gatedDevices)
    }

    /// The causal plan for `candidates`, after catching up from a baseline over logs compacted
    /// away and taking in this device's old baselines; missing logs are noted (and this device's
    /// own published again at once).
    private func plan(
        _ candidates: [CausalPlan.Candidate],
        gated: [String: Int],
        _ pass: inout Pass,
        holding permit: SyncLock.Permit
    ) throws -> CausalPlan {
        let assumedDevice = pass.includingOwnLogs ? nil : deviceID
        var plan = CausalPlan(applied: pass.applied, candidates: candidates, assumedDevice: assumedDevice)
        // Logs compacted away before this device could apply them come from a baseline.
        let caughtUp = try catchUp(
            missing: plan.missing,
            applied: pass.applied,
            includingOwnLogs: pass.includingOwnLogs,
            holding: permit
        )
        if caughtUp {
            let entries = try store.syncMetadata(pass.devices.map { SyncMetadata.applied($0) })
            for device in pass.devices { pass.applied[device] = AppliedLogs.of(device, in: entries) }
            plan = CausalPlan(applied: pass.applied, candidates: candidates, assumedDevice: assumedDevice)
        }
        // Writes whose logs were lost with this device's machine, kept in its old baselines.
        // (Either may have shown how far this device's history went: see
        // `noteRestoredHistory`.)
        // (A catch-up also keeps what the baseline carries of the others' logs.)
        if try takeInOldOwnBaselines(holding: permit) || caughtUp {
            pass.versionsApplied = try versionsApplied(of: pass.everyDevice(deviceID))
        }
        let ownDue = try healer.noteMissing(plan.missing, gated: Set(gated.keys), applied: pass.applied)
        // This device's own missing logs are published again at once.
        for sequence in ownDue { _ = try? outbox.republish(sequence) }
        pass.result.blocked = plan.blocks.count
        return plan
    }

    /// Other versions of logs applied already: they go after what the plan applies (each change
    /// keeps its clock: the order does not matter), once their log is applied in some version;
    /// those of a newer schema wait. (This device's own mark is read too, when a version of its
    /// own turned up: the batch writes the marks of what it applies.)
    private func lateCandidates(
        _ report: ScanReport,
        plan: inout CausalPlan,
        _ pass: inout Pass
    ) throws -> [CausalPlan.Candidate] {
        let unmarked = Set(report.lateVersions.map(\.log.device)).filter { plan.applied[$0] == nil }
        if !unmarked.isEmpty {
            let entries = try store.syncMetadata(unmarked.map { SyncMetadata.applied($0) })
            for device in unmarked {
                pass.applied[device] = AppliedLogs.of(device, in: entries)
                plan.applied[device] = pass.applied[device]
            }
        }
        // (This device's own logs it wrote are applied here whatever the marks say.)
        let ownWritten =
            report.lateVersions.contains { $0.log.device == deviceID }
            ? try store.syncMetadataValue(SyncMetadata.sequence) ?? 0 : 0
        let versionsApplied = pass.versionsApplied
        // (A number leapt over that a baseline has just shown to be history is not applied again.)
        return report.lateVersions.filter { version in
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
    }
}
