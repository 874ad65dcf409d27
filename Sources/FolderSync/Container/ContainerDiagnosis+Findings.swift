import Foundation

/// The findings of one store folder, gathered topic by topic.
struct FindingsBuilder {
    let reading: StoreFolderReading
    let layout: ContainerLayout
    let now: Date
    let stale: TimeInterval
    var diagnosis: StoreFolderDiagnosis { reading.diagnosis }
    var store: String { layout.storeName }
    /// The devices registered in the sentinel.
    let registered: Set<String>
    /// The devices whose acknowledgement says they left.
    let left: Set<String>
    /// The devices that left logs or baselines.
    let withLogs: [DeviceDiagnosis]
    var found: [DiagnosisFinding] = []

    init(reading: StoreFolderReading, layout: ContainerLayout, now: Date, stale: TimeInterval) {
        self.reading = reading
        self.layout = layout
        self.now = now
        self.stale = stale
        let diagnosis = reading.diagnosis
        registered = Set(diagnosis.registrations.map(\.device))
        left = Set(diagnosis.devices.filter { $0.acknowledgement?.left == true }.map(\.device))
        withLogs = diagnosis.devices.filter { $0.logCount > 0 || !$0.baselines.isEmpty }
    }

    mutating func add(
        _ severity: DiagnosisSeverity,
        _ code: String,
        device: String? = nil,
        path: String? = nil,
        _ message: String,
        _ advice: String
    ) {
        found.append(
            DiagnosisFinding(severity, code, store: store, device: device, path: path, message: message, advice: advice)
        )
    }

    /// The sentinel: its kind, its damaged files, devices with data and no registration.
    mutating func sentinel() {
        if diagnosis.sentinel == "none" && !withLogs.isEmpty && withLogs.contains(where: { !left.contains($0.device) })
        {
            add(
                .problem,
                "sentinel.missing",
                path: layout.storeFolder.appendingPathComponent("sentinels").path,
                "devices have logs here but the sentinel (sentinels/ or devices.plist) is gone",
                "Every device that syncs sees its registration gone and stops (a container reset), keeping its local "
                    + "data. If the container was reset on purpose, enable sync on each device and choose what "
                    + "happens to its data. If the sentinel was deleted by mistake, restore it from the sync "
                    + "engine's versions or trash."
            )
        }
        if diagnosis.sentinel == "device list" {
            let names = SyncFiles.names(in: layout.storeFolder)
            for name in names.sorted() where DeviceListSentinel.isConflictCopy(name) {
                add(
                    .info,
                    "sentinel.conflictCopy",
                    path: layout.storeFolder.appendingPathComponent(name).path,
                    "a sync engine's conflict copy of the device list",
                    "Nothing to do: readers merge it with the list, and the next registration folds it in and "
                        + "removes it."
                )
            }
        }
        for problem in reading.sentinelProblems {
            add(
                .problem,
                "sentinel.damaged",
                path: problem.url?.path,
                problem.message,
                "Move the damaged file aside (keep a copy); each device registers again when sync is next enabled on "
                    + "it."
            )
        }
        for device in diagnosis.devices where !registered.contains(device.device) && diagnosis.sentinel != "none" {
            if left.contains(device.device) {
                add(
                    .info,
                    "sentinel.left",
                    device: device.device,
                    "\(device.device) left (disabled sync); its logs stay for the others",
                    "Nothing to do. If it comes back it joins again as a returning device."
                )
            } else if device.logCount > 0 || device.acknowledgement != nil {
                add(
                    .warning,
                    "sentinel.unregistered",
                    device: device.device,
                    path: layout.deviceFolder(device.device).path,
                    "\(device.device) has files here but no registration",
                    "If \(device.device) still syncs, it will take this as a reset and stop, keeping its data: "
                        + "enable sync on it again and choose to merge. If it is gone for good, nothing to do; its "
                        + "logs stay applied everywhere."
                )
            }
        }
    }

    /// The container's identity files.
    mutating func identity() {
        for problem in reading.identityProblems {
            add(
                .problem,
                "identity.damaged",
                path: problem.url?.path,
                problem.message,
                "Move the damaged file aside; a device that joined this container recognises it by its own files too."
            )
        }
        if diagnosis.containerIDs.isEmpty && reading.identityProblems.isEmpty && !withLogs.isEmpty {
            add(
                .warning,
                "identity.missing",
                path: layout.storeFolder.appendingPathComponent("container.plist").path,
                "the store folder has no container identity (container.plist)",
                "A container from before identities, or the file was deleted. Devices cannot then tell this "
                    + "container from a replaced one by its identity (they fall back to their own files). Nothing is "
                    + "lost; a device that starts the container anew writes one."
            )
        } else if diagnosis.containerIDs.count > 1 {
            add(
                .info,
                "identity.several",
                path: layout.storeFolder.path,
                "\(diagnosis.containerIDs.count) container identities (two devices started the container at once)",
                "Nothing to do: every identity found names this container."
            )
        }
    }

    /// One device's leftovers: sync engines' temporary files, conflict copies, files nobody
    /// wrote.
    mutating func leftovers(of device: DeviceDiagnosis) {
        let name = device.device
        for file in device.temporaries {
            let old = (file.age ?? 0) >= stale
            let ours = file.reason.hasPrefix("Concord")
            add(
                old && ours ? .warning : .info,
                "file.temporary",
                device: name,
                path: file.path,
                "\(file.reason)\(file.age.map { ", last modified \(ContainerDiagnosis.seconds($0)) ago" } ?? "")",
                old && ours
                    ? "Left by a write that was interrupted (a crash or a kill). It is never a log: delete it "
                        + "when no process of \(name) is running."
                    : "A write in progress, or a sync engine's transfer: look again later."
            )
        }
        for file in device.conflictCopies {
            let different = file.reason.hasPrefix("a different")
            let damaged = file.reason.hasPrefix("damaged")
            let misnamed = file.reason.hasPrefix("misnamed")
            add(
                different ? .problem : damaged || misnamed ? .warning : .info,
                "log.conflictCopy",
                device: name,
                path: file.path,
                "a sync engine's conflict copy: \(file.reason)",
                misnamed
                    ? "Sync does not read a copy under another log's name: delete it (if the log it holds is missing "
                        + "from its place, move the copy there instead)."
                    : different
                        ? "Two installations write under the device id \(name) (a store copied to another machine?). "
                            + "Give one of them a fresh store (see the README's \"Bringing a device back\"), then "
                            + "delete the copy."
                        : damaged
                            ? "Delete it: it is not needed."
                            : "Harmless (sync reads it only if the original is missing); you may delete it."
            )
        }
        for path in device.unrecognized {
            add(
                .info,
                "file.unrecognized",
                device: name,
                path: path,
                "a file sync does not know",
                "Sync ignores it; you may move it elsewhere."
            )
        }
    }

    /// One device's requests for others' logs, and its acknowledgement.
    mutating func requestsAndAcknowledgement(of device: DeviceDiagnosis) {
        let name = device.device
        for (owner, sequences) in device.requests.sorted(by: { $0.key < $1.key }) {
            let answerable = registered.contains(owner) && !left.contains(owner)
            add(
                answerable ? .warning : .problem,
                "healing.request",
                device: name,
                path: layout.deviceFolder(name).appendingPathComponent(FolderSync.requestsName).path,
                "\(name) asks \(owner) for log\(sequences.count == 1 ? "" : "s") "
                    + "\(sequences.map(String.init).joined(separator: ", "))",
                answerable
                    ? "Run the app on \(owner) with sync on: it publishes those logs again from its store, and "
                        + "the request is withdrawn once applied."
                    : "\(owner) is not registered and cannot answer. Restore the logs from a backup or the sync "
                        + "engine's versions; failing that, the app on \(name) can give up on them "
                        + "(FolderSync.skipMissingLog), losing what they held."
            )
        }
        let acknowledgementURL = layout.deviceFolder(name).appendingPathComponent(ContainerLayout.acknowledgementName)
        let acknowledgementAge = ContainerDiagnosis.modificationDate(acknowledgementURL).map {
            now.timeIntervalSince($0)
        }
        if device.acknowledgement == nil && registered.contains(name) {
            add(
                .warning,
                "compaction.noAcknowledgement",
                device: name,
                "\(name) is registered but has published no acknowledgement (applied.json)",
                "Compaction keeps every log until \(name) says what it applied. If \(name) is gone for good, "
                    + "disable sync on it, or remove its registration from the sentinel."
            )
        } else if registered.contains(name), let age = acknowledgementAge, age > 7 * 86400 {
            add(
                .warning,
                "compaction.stale",
                device: name,
                path: acknowledgementURL.path,
                "\(name) last said what it applied \(ContainerDiagnosis.seconds(age)) ago",
                "Compaction waits for \(name). If it is gone for good, disable sync on it (or remove its "
                    + "registration)."
            )
        }
    }

    /// Schema versions against the local store's.
    mutating func schemaVersions() {
        let versions = Set(diagnosis.devices.flatMap(\.schemaVersions))
        if let local = diagnosis.local {
            for device in diagnosis.devices {
                guard let newest = device.schemaVersions.max(), newest > local.schemaVersion else { continue }
                add(
                    .problem,
                    "schema.newer",
                    device: device.device,
                    "\(device.device) writes schema version \(newest); the local store has \(local.schemaVersion)",
                    "This device stops importing those logs (it keeps working on what it can read): upgrade the app "
                        + "here."
                )
            }
        } else if versions.count > 1 {
            add(
                .warning,
                "schema.mixed",
                "logs of schema versions \(versions.sorted().map(String.init).joined(separator: ", "))",
                "Devices on an older version stop importing newer logs until they are upgraded: upgrade every device."
            )
        }
    }

    /// Clock skews between devices.
    mutating func clocks() {
        for skew in diagnosis.clockSkews {
            add(
                skew.seconds >= 5 ? .warning : .info,
                "clock.skew",
                device: skew.behind,
                "\(skew.behind)'s clock is behind \(skew.ahead)'s by at least \(ContainerDiagnosis.seconds(skew.seconds)): "
                    + "\(skew.evidence)",
                "Merges stay consistent (hybrid clocks), but the device whose clock is ahead wins concurrent edits: "
                    + "turn on time synchronisation (NTP) on both machines."
            )
        }
    }

    /// Compaction and tombstones.
    mutating func compaction() {
        let tombstones = diagnosis.devices.flatMap(\.baselines).map(\.tombstones).max() ?? 0
        let logCount = diagnosis.devices.map(\.logCount).reduce(0, +)
        if logCount > 10_000 && diagnosis.devices.allSatisfy({ $0.baselines.isEmpty }) {
            add(
                .info,
                "compaction.none",
                "\(logCount) logs and no baseline",
                "A new device reads every log: have the app call FolderSync.compact() now and then."
            )
        }
        if tombstones > 0 {
            add(
                .info,
                "compaction.tombstones",
                "the newest baselines keep up to \(tombstones) tombstones",
                "Nothing to do: compaction collects tombstones once every device has seen the deletions and the "
                    + "tombstone lifetime passed."
            )
        }
    }
}
