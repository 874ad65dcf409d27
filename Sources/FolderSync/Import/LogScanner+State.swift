import Foundation

// MARK: - What a scan saw

/// What identifies one version of a file's content, as far as `stat` can tell.
struct FileStamp: Sendable, Hashable {
    var size: Int64
    var modified: Date
    var inode: UInt64
}

/// One log or conflict copy, read and decoded.
struct FileObservation: Sendable {
    var url: URL
    var stamp: FileStamp
    var outcome: Result<LogFile, SyncError>
    var dependencies: [String: UInt64] = [:]
    var payloadDigest: UInt64 = 0
    var payloadSize = 0
    var changeCount: Int?
}

/// One device folder's logs (by the sequence in their names) and conflict copies.
struct DeviceObservation: Sendable {
    var device: String
    var logs: [UInt64: FileObservation] = [:]
    var copies: [(sequence: UInt64, file: FileObservation)] = []
    /// Logs at or below this sequence were read only to compare conflict copies with: never ready.
    var floor: UInt64 = 0
    /// The logs present under numbers the device's numbering leapt over.
    var voided: Set<UInt64> = []
}

/// Everything one scan read from the container.
struct Observations: Sendable {
    var devices: [DeviceObservation] = []
    var temporaries = 0
    var unrecognized: [URL] = []
    var filesRead = 0
    /// The payload bytes this scan's ready logs keep (see ``LogScanner/payloadBudget``).
    var payloadKept = 0
    /// The valid logs seen, header only, by path (for the next scan).
    var headers: [String: FileObservation] = [:]
}

// MARK: - Deciding (pure, under the lock)

/// What the scanner remembers between scans.
struct ScanState: Sendable {
    /// Every file seen by the previous scan: its stamp, and when a scan first saw that stamp.
    var seen: [String: (stamp: FileStamp, since: Date)] = [:]
    /// Files reported as corrupt or unsupported, with the stamp they had then.
    var reported: [String: FileStamp] = [:]

    /// Classifies what a scan saw and remembers it. Pure: no I/O.
    mutating func decide(
        _ observations: Observations,
        ownDevice: String,
        replacedContainers: Set<String> = [],
        versionsApplied: [String: LogVersions] = [:],
        now: Date,
        settle: Double
    ) -> ScanReport {
        var decision = ScanDecision(
            previous: self,
            replacedContainers: replacedContainers,
            now: now,
            settle: settle
        )
        decision.report.temporaries = observations.temporaries
        decision.report.filesRead = observations.filesRead
        decision.report.unrecognized = observations.unrecognized
        for device in observations.devices {
            decision.decide(device, isOwn: device.device == ownDevice, watched: versionsApplied[device.device])
        }
        seen = decision.next.seen
        reported = decision.next.reported
        return decision.report
    }
}

/// One scan's decisions in the making: the report, and what the next scan remembers.
private struct ScanDecision {
    /// What the previous scan remembered.
    let previous: ScanState
    let replacedContainers: Set<String>
    let now: Date
    let settle: Double
    var report = ScanReport()
    /// What this scan leaves for the next.
    var next = ScanState()

    init(previous: ScanState, replacedContainers: Set<String>, now: Date, settle: Double) {
        self.previous = previous
        self.replacedContainers = replacedContainers
        self.now = now
        self.settle = settle
    }

    /// Whether the file is stable, remembering it for the next scan.
    mutating func isStable(_ file: FileObservation) -> Bool {
        let path = file.url.path
        let earlier = previous.seen[path]
        let unchanged = earlier?.stamp == file.stamp
        let since = unchanged ? earlier!.since : now
        next.seen[path] = (file.stamp, since)
        // A file not modified for the settle interval is not arriving any more, even at the
        // first scan that sees it (a one-shot process scans once); one that changed since the
        // previous scan is.
        if earlier != nil && !unchanged { return false }
        return now.timeIntervalSince(file.stamp.modified) >= settle || now.timeIntervalSince(since) >= settle
    }

    /// Reports `error` about `file` once per stamp.
    mutating func reportOnce(_ error: SyncError, _ file: FileObservation, unsupported: Bool = false) {
        let path = file.url.path
        next.reported[path] = file.stamp
        if previous.reported[path] == file.stamp { return }
        if unsupported { report.unsupported.append(error) } else { report.corrupt.append(error) }
    }

    /// The file's log if it is a valid log of `device`/`sequence`; otherwise reports it as
    /// waiting, corrupt or unsupported (once) and returns `nil`.
    mutating func validLog(_ file: FileObservation, device: String, sequence: UInt64) -> LogFile? {
        let stable = isStable(file)
        switch file.outcome {
        case .success(let log):
            guard log.device == device, log.sequence == sequence else {
                reportOnce(
                    SyncError(
                        .corruptLog,
                        "header names device \(log.device), sequence \(log.sequence); the file's place says device \(device), sequence \(sequence)",
                        url: file.url
                    ),
                    file
                )
                return nil
            }
            if let container = log.container, replacedContainers.contains(container) {
                reportOnce(
                    SyncError(
                        .corruptLog,
                        "written for container \(container), which another device replaced: its device had not seen the replacement",
                        url: file.url
                    ),
                    file
                )
                return nil
            }
            return log
        case .failure(let error) where error.code == .unsupportedLogVersion:
            reportOnce(error, file, unsupported: true)
            return nil
        case .failure(let error):
            if previous.reported[file.url.path] == file.stamp {
                next.reported[file.url.path] = file.stamp
            } else if stable {
                reportOnce(error, file)
            } else {
                report.waiting.append(file.url)
            }
            return nil
        }
    }

    /// The scanned form of `file`, whose log is `log`.
    static func scanned(_ file: FileObservation, _ log: LogFile) -> ScannedLog {
        ScannedLog(
            url: file.url,
            log: log,
            dependencies: file.dependencies,
            payloadDigest: file.payloadDigest,
            payloadSize: file.payloadSize,
            changeCount: file.changeCount
        )
    }

    /// Decides about one device folder's logs and conflict copies: ready, late versions, copies.
    /// `watched`: the versions of its logs applied so far (logs met in more than one version).
    mutating func decide(_ device: DeviceObservation, isOwn: Bool, watched applied: LogVersions?) {
        var logs: [UInt64: ScannedLog] = [:]
        for (sequence, file) in device.logs.sorted(by: { $0.key < $1.key }) {
            if let log = validLog(file, device: device.device, sequence: sequence) {
                logs[sequence] = Self.scanned(file, log)
            }
        }
        // Logs met in more than one version (or applied empty): every valid version is
        // applied once; one not applied yet is a late version (one per log and scan).
        var watched = applied?.digests ?? [:]
        for sequence in device.voided where watched[sequence] == nil { watched[sequence] = [] }
        var late: [UInt64: ScannedLog] = [:]
        for (sequence, digests) in watched {
            if let log = logs[sequence], !digests.contains(log.payloadDigest), late[sequence] == nil {
                late[sequence] = log
            }
        }
        weighCopies(of: device, logs: &logs, watched: watched, late: &late)
        if !isOwn || device.floor != UInt64.max {
            report.ready += logs.values.filter { $0.log.sequence > device.floor }
                .sorted { $0.log.sequence < $1.log.sequence }
        }
        report.lateVersions += late.values.sorted { $0.log.sequence < $1.log.sequence }
    }

    /// Each conflict copy of `device`: the same log again, a late version, a stand-in for an
    /// original missing or damaged, or another log under the same name (reported, and applied).
    mutating func weighCopies(
        of device: DeviceObservation,
        logs: inout [UInt64: ScannedLog],
        watched: [UInt64: Set<UInt64>],
        late: inout [UInt64: ScannedLog]
    ) {
        for (sequence, file) in device.copies {
            guard let log = validLog(file, device: device.device, sequence: sequence) else { continue }
            let copy = Self.scanned(file, log)
            if let digests = watched[sequence] {
                if digests.contains(copy.payloadDigest) {
                    report.conflictCopies.append(file.url)
                } else if late[sequence] == nil {
                    late[sequence] = copy
                }
                continue
            }
            guard let original = logs[sequence] else {
                // The original is missing, still arriving or damaged: the copy stands in.
                logs[sequence] = copy
                continue
            }
            if original.log.schemaVersion == log.schemaVersion && original.payloadDigest == copy.payloadDigest {
                report.conflictCopies.append(file.url)
            } else if original.isStandIn || copy.isStandIn {
                // An empty log its device published for one it had lost, beside the original
                // that turned up after all: whoever applied the empty one applies the other
                // too (it is watched); whoever applied the original needs nothing more.
                report.conflictCopies.append(file.url)
                if original.isStandIn, sequence > device.floor { logs[sequence] = copy }
            } else {
                // Two logs under one name (two installations sharing the device id, or a
                // device restored on a new machine numbering before its old logs arrived):
                // reported, and both applied, so that every device holds what both carry.
                reportOnce(
                    SyncError(
                        .conflictingLog,
                        "conflict copy holds a different log for device \(device.device), sequence \(sequence) than \(original.url.lastPathComponent): both are applied; two installations may share the device id",
                        url: file.url
                    ),
                    file
                )
                if late[sequence] == nil { late[sequence] = copy }
            }
        }
    }
}
