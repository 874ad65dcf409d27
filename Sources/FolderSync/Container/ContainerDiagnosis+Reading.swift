import Foundation
import Persistence

/// What the diagnosis keeps of one intact log: enough to find gaps and clock skew, not the payload.
struct LogSummary: Sendable {
    var sequence: UInt64
    var created: Date
    var schemaVersion: Int
    var formatVersion: UInt16
    var dependencies: [String: UInt64]
    /// The latest hybrid-clock time (ms) among the changes its own device stamped.
    var newestOwnStamp: UInt64?
    var payloadDigest: UInt64
}

/// Everything read from one store folder before findings are drawn.
struct StoreFolderReading {
    var diagnosis: StoreFolderDiagnosis
    var logs: [String: [UInt64: LogSummary]] = [:]
    var sentinelProblems: [SyncError] = []
    var identityProblems: [SyncError] = []
    var identityFiles: [String] = []
    var unreadable: [(path: String, reason: String)] = []
}

extension ContainerDiagnosis {
    /// Diagnoses `container` without writing anything.
    ///
    /// - Parameters:
    ///   - container: the container folder (or one store's folder in it).
    ///   - storeName: the store folder to look at; `nil` looks at every store folder (a folder
    ///     with a `devices`, a `sentinels` folder, a `devices.plist` or a `container.plist`).
    ///   - local: the metadata of this machine's store of `storeName` (or of the only store
    ///     folder), read by the caller: with it, the diagnosis says what that store has applied
    ///     and what is pending, and compares schema versions and the container's identity.
    ///   - localSchemaVersion: that store's schema version.
    ///   - now: this machine's clock (for ages and clocks in the future).
    ///   - settleInterval: files younger than this that do not decode are taken as still arriving.
    ///   - staleAfter: Concord's own temporary files older than this are reported as left by an
    ///     interrupted write.
    public static func diagnose(
        container: URL,
        storeName: String? = nil,
        local: [String: Data]? = nil,
        localSchemaVersion: Int? = nil,
        now: Date = Date(),
        settleInterval: TimeInterval = 2,
        staleAfter: TimeInterval = 3600
    ) -> ContainerDiagnosis {
        var result = ContainerDiagnosis(container: container.path, date: now)
        guard SyncFiles.isFolder(container) else {
            result.findings.append(
                DiagnosisFinding(
                    .problem,
                    "container.missing",
                    path: container.path,
                    message: "the container is missing or not a folder",
                    advice:
                        "Check the path, and that the volume or the sync engine's folder is there (mounted, not "
                        + "paused). Devices that sync through it wait for it and keep their local data."
                )
            )
            return result
        }
        let names = storeFolderNames(in: container, storeName: storeName, findings: &result.findings)
        if local != nil && storeName == nil && names.count > 1 {
            result.findings.append(
                DiagnosisFinding(
                    .warning,
                    "local.unmatched",
                    path: container.path,
                    message:
                        "the container holds \(names.count) store folders; the local store was not compared with any",
                    advice: "Name the store folder the local store syncs with (--store NAME)."
                )
            )
        }
        for name in names {
            guard !name.isEmpty, name != ".", name != "..", !name.contains("/") else { continue }
            let isLocal = local != nil && (storeName != nil || names.count == 1)
            diagnoseStore(
                ContainerLayout(container: container, storeName: name),
                local: isLocal ? local : nil,
                localSchemaVersion: localSchemaVersion,
                now: now,
                settle: settleInterval,
                stale: staleAfter,
                into: &result
            )
        }
        result.findings.sort {
            ($1.severity, $0.store ?? "", $0.device ?? "") < ($0.severity, $1.store ?? "", $1.device ?? "")
        }
        return result
    }

    /// The store folders to diagnose: `storeName`, or every folder of the container that looks
    /// like one (an empty container is a finding).
    private static func storeFolderNames(
        in container: URL,
        storeName: String?,
        findings: inout [DiagnosisFinding]
    ) -> [String] {
        let names: [String]
        if let storeName {
            names = [storeName]
        } else {
            names = SyncFiles.names(in: container).sorted().filter {
                name in
                ["devices", "sentinels", "devices.plist", "container.plist"].contains {
                    SyncFiles.exists(container.appendingPathComponent(name).appendingPathComponent($0))
                }
            }
            if names.isEmpty {
                findings.append(
                    DiagnosisFinding(
                        .warning,
                        "container.empty",
                        path: container.path,
                        message: "the container holds no store folder",
                        advice:
                            "Nothing has synced through this folder yet, or it is not the container: check the path."
                    )
                )
            }
        }
        return names
    }

    /// Reads and judges the store folder `layout` names (against the local store's metadata,
    /// `local`, when given) into `result`.
    private static func diagnoseStore(
        _ layout: ContainerLayout,
        local: [String: Data]?,
        localSchemaVersion: Int?,
        now: Date,
        settle: TimeInterval,
        stale: TimeInterval,
        into result: inout ContainerDiagnosis
    ) {
        guard SyncFiles.exists(layout.storeFolder) else {
            result.findings.append(
                DiagnosisFinding(
                    .problem,
                    "store.missing",
                    store: layout.storeName,
                    path: layout.storeFolder.path,
                    message: "the container has no folder for the store \(layout.storeName)",
                    advice:
                        "Check the store name (the folder's name in the container). If devices synced this store "
                        + "here before, the container was reset: each device stops syncing and keeps its "
                        + "data; enable sync on one device to start the container again."
                )
            )
            return
        }
        var reading = read(layout, now: now, settle: settle, stale: stale)
        if let local {
            reading.diagnosis.local = localState(local, schemaVersion: localSchemaVersion ?? 0, reading: reading)
        }
        reading.diagnosis.clockSkews = clockSkews(reading, now: now)
        result.findings += findings(reading, layout: layout, now: now, stale: stale)
        result.stores.append(reading.diagnosis)
    }
}
