import ConcordSystem
import Foundation
import Persistence

extension ContainerDiagnosis {
    // MARK: - Reading a store folder

    static func read(
        _ layout: ContainerLayout,
        now: Date,
        settle: TimeInterval,
        stale: TimeInterval
    )
        -> StoreFolderReading
    {
        let fileSentinel = DeviceFileSentinel(layout: layout)
        let listSentinel = DeviceListSentinel(layout: layout)
        let strategy: String
        var contents: SentinelContents?
        var sentinelProblems: [SyncError] = []
        if SyncFiles.exists(fileSentinel.folder) {
            strategy = "device files"
            do { contents = try fileSentinel.contents() } catch {
                sentinelProblems.append(asSyncError(error, fileSentinel.folder))
            }
        } else if SyncFiles.exists(listSentinel.listURL) {
            strategy = "device list"
            do { contents = try listSentinel.contents() } catch {
                sentinelProblems.append(asSyncError(error, listSentinel.listURL))
            }
        } else {
            strategy = "none"
        }
        sentinelProblems += contents?.problems ?? []
        let registrations = contents?.registrations ?? []
        var reading = StoreFolderReading(
            diagnosis: StoreFolderDiagnosis(
                name: layout.storeName,
                path: layout.storeFolder.path,
                sentinel: strategy,
                registrations: registrations
            )
        )
        reading.sentinelProblems = sentinelProblems
        readIdentity(layout, into: &reading)

        let folders = SyncFiles.names(in: layout.devicesFolder).sorted()
        var devices = Set(registrations.map(\.device))
        for name in folders {
            guard ContainerLayout.isValidDeviceID(name) else {
                reading.unreadable.append(
                    (layout.devicesFolder.appendingPathComponent(name).path, "not a device folder name")
                )
                continue
            }
            devices.insert(name)
        }
        for device in devices.sorted() {
            var diagnosis = DeviceDiagnosis(device: device, registration: registrations.first { $0.device == device })
            var summaries: [UInt64: LogSummary] = [:]
            readDeviceFolder(layout, device: device, now: now, settle: settle, into: &diagnosis, logs: &summaries)
            reading.logs[device] = summaries
            reading.diagnosis.devices.append(diagnosis)
        }
        let floors = baselineFloors(reading)
        for index in reading.diagnosis.devices.indices {
            let device = reading.diagnosis.devices[index]
            let damaged = Set(
                (device.damaged + device.unsupported).compactMap { file -> UInt64? in
                    guard
                        case .log(let sequence) = ContainerLayout.classify(
                            fileName: URL(fileURLWithPath: file.path).lastPathComponent
                        )
                    else {
                        return nil
                    }
                    return sequence
                }
            )
            reading.diagnosis.devices[index].gaps = gaps(
                logs: reading.logs[device.device] ?? [:],
                floor: floors[device.device] ?? 0,
                damaged: damaged,
                device: device.device
            )
        }
        return reading
    }

    private static func readIdentity(_ layout: ContainerLayout, into reading: inout StoreFolderReading) {
        let names = SyncFiles.names(in: layout.storeFolder)
        var ids: Set<String> = []
        // The same names `FolderSync.containerIDs()` reads.
        for name in names.sorted()
        where name == "container.plist"
            || (name.hasPrefix("container") && name.hasSuffix(".plist") && name.contains("onflict"))
        {
            let url = layout.storeFolder.appendingPathComponent(name, isDirectory: false)
            reading.identityFiles.append(url.path)
            do {
                guard let data = try SentinelFiles.read(url) else { continue }
                let identity: ContainerIdentity = try SentinelFiles.decode(data, url: url)
                ids.insert(identity.id)
            } catch {
                reading.identityProblems.append(asSyncError(error, url))
            }
        }
        reading.diagnosis.containerIDs = ids.sorted()
    }

    private static func readDeviceFolder(
        _ layout: ContainerLayout,
        device: String,
        now: Date,
        settle: TimeInterval,
        into diagnosis: inout DeviceDiagnosis,
        logs: inout [UInt64: LogSummary]
    ) {
        let folder = layout.deviceFolder(device)
        let names = SyncFiles.names(in: folder).sorted()
        var copies: [(UInt64, URL)] = []
        for name in names {
            let url = folder.appendingPathComponent(name, isDirectory: false)
            let age = modificationDate(url).map { now.timeIntervalSince($0) }
            switch ContainerLayout.classify(fileName: name) {
            case .temporary:
                diagnosis.temporaries.append(DiagnosedFile(path: url.path, reason: temporaryReason(name), age: age))
            case .conflictCopy(let sequence):
                copies.append((sequence, url))
            case .log(let sequence):
                readLog(
                    url,
                    device: device,
                    sequence: sequence,
                    age: age,
                    settle: settle,
                    into: &diagnosis,
                    logs: &logs
                )
            case .other:
                readOther(url, device: device, age: age, into: &diagnosis)
            }
        }
        for (sequence, url) in copies {
            readConflictCopy(url, device: device, sequence: sequence, now: now, into: &diagnosis, logs: &logs)
        }
        let sequences = logs.keys.sorted()
        diagnosis.logCount = sequences.count
        diagnosis.firstLog = sequences.first
        diagnosis.lastLog = sequences.last
        diagnosis.schemaVersions = Set(logs.values.map(\.schemaVersion)).sorted()
        diagnosis.formatVersions = Set(logs.values.map { Int($0.formatVersion) }).sorted()
        diagnosis.newestLogCreated = sequences.last.flatMap { logs[$0]?.created }
    }

    /// Whose temporary file `name` is, in words.
    private static func temporaryReason(_ name: String) -> String {
        let owner = ContainerLayout.temporaryOwner(name) ?? "a sync engine"
        if owner == "Concord" { return "Concord's temporary file" }
        return owner.hasPrefix("a") ? "\(owner)'s temporary file" : "a sync engine's (\(owner)) temporary file"
    }

    /// A log in `device`'s folder: summarized, or found damaged, misplaced or too new to read.
    private static func readLog(
        _ url: URL,
        device: String,
        sequence: UInt64,
        age: TimeInterval?,
        settle: TimeInterval,
        into diagnosis: inout DeviceDiagnosis,
        logs: inout [UInt64: LogSummary]
    ) {
        switch decodeLog(url) {
        case .success(let log) where log.device == device && log.sequence == sequence:
            logs[sequence] = summary(log)
        case .success(let log):
            diagnosis.damaged.append(
                DiagnosedFile(
                    path: url.path,
                    reason:
                        "the header names device \(log.device), sequence \(log.sequence); the file's place "
                        + "says device \(device), sequence \(sequence)",
                    age: age
                )
            )
        case .failure(let error) where error.code == .unsupportedLogVersion:
            diagnosis.unsupported.append(DiagnosedFile(path: url.path, reason: error.message, age: age))
        case .failure(let error):
            let arriving = (age ?? .infinity) < settle
            diagnosis.damaged.append(
                DiagnosedFile(
                    path: url.path,
                    reason: (arriving ? "still arriving? " : "") + error.message,
                    age: age
                )
            )
        }
    }

    /// Any other file in a device folder: its acknowledgement, its requests, a baseline, or a
    /// stray.
    private static func readOther(_ url: URL, device: String, age: TimeInterval?, into diagnosis: inout DeviceDiagnosis)
    {
        let name = url.lastPathComponent
        if name == ContainerLayout.acknowledgementName {
            if let data = try? regularFileData(url, maximum: 1 << 24, what: "an acknowledgement"),
                let acknowledgement = try? JSONDecoder().decode(SyncAcknowledgement.self, from: data)
            {
                diagnosis.acknowledgement = acknowledgement
            } else {
                diagnosis.damaged.append(
                    DiagnosedFile(path: url.path, reason: "the acknowledgement cannot be read", age: age)
                )
            }
        } else if name == FolderSync.requestsName {
            if let data = try? regularFileData(url, maximum: 1 << 24, what: "a request"),
                let requests = try? JSONDecoder().decode(SyncLogRequests.self, from: data)
            {
                diagnosis.requests = requests.logs.filter { !$0.value.isEmpty }
            } else {
                diagnosis.damaged.append(
                    DiagnosedFile(path: url.path, reason: "the requests for logs cannot be read", age: age)
                )
            }
        } else if name.hasPrefix(ContainerLayout.baselinePrefix)
            && name.hasSuffix("." + ContainerLayout.baselineExtension)
        {
            if let baseline = readBaseline(url, device: device) {
                diagnosis.baselines.append(baseline)
            } else {
                diagnosis.damaged.append(
                    DiagnosedFile(path: url.path, reason: "the baseline cannot be read", age: age)
                )
            }
        } else {
            diagnosis.unrecognized.append(url.path)
        }
    }

    /// A sync engine's conflict copy of `device`'s log `sequence`: the same log, another one, a
    /// stand-in for a missing original, misnamed, or damaged.
    private static func readConflictCopy(
        _ url: URL,
        device: String,
        sequence: UInt64,
        now: Date,
        into diagnosis: inout DeviceDiagnosis,
        logs: inout [UInt64: LogSummary]
    ) {
        let age = modificationDate(url).map { now.timeIntervalSince($0) }
        switch decodeLog(url) {
        case .success(let copy) where copy.device == device && copy.sequence == sequence:
            let digest = LogScanner.digest(copy.payload)
            if let original = logs[sequence] {
                let same = original.payloadDigest == digest && original.schemaVersion == copy.schemaVersion
                diagnosis.conflictCopies.append(
                    DiagnosedFile(
                        path: url.path,
                        reason: same
                            ? "same log as the original" : "a different log than the original (both are applied)",
                        age: age
                    )
                )
            } else {
                logs[sequence] = summary(copy)
                diagnosis.conflictCopies.append(
                    DiagnosedFile(path: url.path, reason: "stands in for the missing original", age: age)
                )
            }
        case .success(let copy):
            diagnosis.conflictCopies.append(
                DiagnosedFile(
                    path: url.path,
                    reason: "misnamed: it holds \(copy.device)'s log \(copy.sequence), not \(device)'s log "
                        + "\(sequence) as its name says",
                    age: age
                )
            )
        case .failure(let error):
            diagnosis.conflictCopies.append(
                DiagnosedFile(path: url.path, reason: "damaged: \(error.message)", age: age)
            )
        }
    }

    private static func summary(_ log: LogFile) -> LogSummary {
        let payload = try? SyncPayload.decode(from: log)
        var newest: UInt64?
        for change in payload?.changes ?? [] {
            var stamps = [change.created, change.deleted].compactMap { $0 }
            stamps += change.values.values.map(\.clock) + change.references.values.map(\.clock)
            stamps += change.members.values.flatMap { $0.map(\.clock) }
            for stamp in stamps where stamp.device == log.device { newest = max(newest ?? 0, stamp.time) }
        }
        return LogSummary(
            sequence: log.sequence,
            created: log.created,
            schemaVersion: log.schemaVersion,
            formatVersion: log.formatVersion,
            dependencies: payload?.dependencies ?? [:],
            newestOwnStamp: newest,
            payloadDigest: LogScanner.digest(log.payload)
        )
    }

    /// A baseline's summary, read through a window (a baseline folds a whole store).
    private static func readBaseline(_ url: URL, device: String) -> BaselineSummary? {
        guard let file = try? BaselineFile(url, check: { _ in nil }), file.log.device == device else { return nil }
        var tombstones = 0
        do {
            try file.forEachBatch { changes in
                tombstones +=
                    changes.filter { change in
                        guard let deleted = change.deleted else { return false }
                        return change.created.map { $0 < deleted } ?? true
                    }.count
            }
        } catch {
            return nil
        }
        return BaselineSummary(
            path: url.path,
            covers: file.covers,
            changes: file.changeCount,
            tombstones: tombstones,
            schemaVersion: file.log.schemaVersion
        )
    }

    /// The log in `url`, or why not.
    static func decodeLog(_ url: URL) -> Result<LogFile, SyncError> {
        Result { () throws(SyncError) in
            let data = try regularFileData(url, maximum: LogFile.maximumEncodedSize, what: "a log")
            return try LogFile.decode(data, url: url)
        }
    }

    /// The bytes of the regular file `url` (following no link), at most `maximum` of them: a
    /// folder, a FIFO or a device file named like a log is never opened (reading a FIFO would
    /// wait forever).
    static func regularFileData(_ url: URL, maximum: Int, what: String) throws(SyncError) -> Data {
        let item: FileIdentity?
        do {
            item = try FileSystem.identity(at: url.path)
        } catch {
            throw SyncError(.ioFailed, "cannot read the file: \(error)", url: url)
        }
        guard let item else { throw SyncError(.ioFailed, "cannot read the file: it is not there", url: url) }
        guard item.kind == .regular else {
            throw SyncError(.corruptLog, "not a regular file", url: url)
        }
        let size = Int(item.size)
        guard size <= maximum else {
            throw SyncError(.corruptLog, "\(size) bytes, larger than \(what) can be", url: url)
        }
        do {
            return try Data(contentsOf: url)
        } catch {
            throw SyncError(.ioFailed, "cannot read the file: \(error.localizedDescription)", url: url)
        }
    }

    static func modificationDate(_ url: URL) -> Date? {
        ((try? FileSystem.identity(at: url.path)) ?? nil).map { Date(timeIntervalSince1970: $0.modificationTime) }
    }

    static func asSyncError(_ error: any Error, _ url: URL) -> SyncError {
        (error as? SyncError) ?? SyncError(.ioFailed, "\(error)", url: url)
    }
}
