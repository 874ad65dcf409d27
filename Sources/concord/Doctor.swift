import ArgumentParser
import FolderSync
import Foundation
import Persistence

/// `concord doctor CONTAINER`: the troubleshooting steps for a sync container as one command.
struct Doctor: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Diagnose a sync container (and a local store) and say what to do.",
        discussion: """
            Reads the container without writing anything: the devices and their registrations, \
            each device's logs with gaps, damaged, partial and temporary files, sync engines' \
            conflict copies, schema versions, requests for missing logs, clock skew between \
            devices, baselines and tombstones, the sentinel and the container's identity. With \
            --data, it also reads a copy of the local store: what it has applied and what is \
            pending.

            Exit status: 0 when nothing needs attention (information only), 1 when there are \
            warnings, 2 when there are problems, 64 for a usage error.
            """
    )

    @Argument(help: "The container folder (the folder a sync engine shares).")
    var container: String

    @Option(help: "The store folder in the container to look at (default: every store folder).")
    var store: String?

    @Option(help: "This machine's store of that folder: a store file, or a data folder holding one.")
    var data: String?

    @Option(help: "The local store's type (default: from its first bytes).")
    var type: String?

    @Flag(help: "Print the diagnosis as JSON (for scripts).")
    var json = false

    func run() throws {
        var containerURL = URL(fileURLWithPath: container, isDirectory: true).standardizedFileURL
        var store = self.store
        // A store's folder given for the container: diagnose that store of its parent.
        if store == nil,
            ["devices", "sentinels", "container.plist"].contains(where: {
                FileManager.default.fileExists(atPath: containerURL.appendingPathComponent($0).path)
            })
        {
            store = containerURL.lastPathComponent
            containerURL = containerURL.deletingLastPathComponent()
            Output.status("concord: \(container) is the folder of the store \(store!) in \(containerURL.path)")
        }
        var local: LocalStoreReading?
        var localFailure: DiagnosisFinding?
        if let data {
            do {
                local = try LocalStoreReading(path: data, type: type)
            } catch {
                localFailure = DiagnosisFinding(
                    .problem,
                    "local.unreadable",
                    store: store,
                    path: (error as? ToolError)?.url?.path ?? data,
                    message: "the local store cannot be read: \(error)",
                    advice:
                        "Check it with `concord store check`; if it is damaged, `concord store salvage` copies what "
                        + "can be read into a new store (see the README: bringing a device back)."
                )
            }
        }
        var diagnosis = ContainerDiagnosis.diagnose(
            container: containerURL,
            storeName: store,
            local: local?.entries,
            localSchemaVersion: local?.schemaVersion
        )
        if let localFailure { diagnosis.findings.insert(localFailure, at: 0) }
        if let data {
            // Most serious first, the order of the rest kept.
            diagnosis.findings = (diagnosis.findings + Self.dataFolderTemporaries(data, store: store)).enumerated()
                .sorted { ($0.element.severity, $1.offset) > ($1.element.severity, $0.offset) }.map(\.element)
        }
        if json {
            try Output.json(DoctorReport(diagnosis: diagnosis, localStore: local?.summary))
        } else {
            DoctorText(diagnosis: diagnosis, local: local?.summary).print()
        }
        let status = Self.exitStatus(diagnosis.severity)
        if status != 0 { throw ExitCode(status) }
    }

    /// Concord's temporary files in the data folder `path` (or the folder of the store file
    /// `path`): a write in progress, or one a crash interrupted (older than a minute: a JSON or
    /// property-list store removes those when it next opens).
    static func dataFolderTemporaries(_ path: String, store: String?) -> [DiagnosisFinding] {
        var folder = URL(fileURLWithPath: path).standardizedFileURL
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: folder.path, isDirectory: &isDirectory) || !isDirectory.boolValue {
            folder = folder.deletingLastPathComponent()
        }
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
        return names.filter { $0.hasSuffix(ContainerLayout.temporarySuffix) }.map { name in
            let url = folder.appendingPathComponent(name)
            let modified = (try? FileManager.default.attributesOfItem(atPath: url.path))?[.modificationDate] as? Date
            let age = modified.map { Date().timeIntervalSince($0) } ?? 0
            let stale = age >= 60
            return DiagnosisFinding(
                stale ? .warning : .info,
                "data.temporary",
                store: store,
                path: url.path,
                message: "Concord's temporary file in the data folder, last modified \(Int(age)) s ago",
                advice: stale
                    ? "Left by a write that was interrupted (a crash or a kill): a JSON or property-list store "
                        + "removes it when it next opens; or delete it when no process uses the store."
                    : "A write in progress: look again later."
            )
        }
    }

    /// 0 for nothing or information only, 1 for warnings, 2 for problems.
    static func exitStatus(_ severity: DiagnosisSeverity?) -> Int32 {
        switch severity {
        case nil, .info?: return 0
        case .warning?: return 1
        case .problem?: return 2
        }
    }
}

/// The JSON `concord doctor --json` prints: the diagnosis, with the local store's file and type.
struct DoctorReport: Encodable {
    var diagnosis: ContainerDiagnosis
    var localStore: LocalStoreSummary?
    var exitStatus: Int32 { Doctor.exitStatus(diagnosis.severity) }
    var counts: [String: Int] {
        Dictionary(grouping: diagnosis.findings, by: \.severity.rawValue).mapValues(\.count)
    }

    enum Keys: String, CodingKey { case container, date, stores, findings, severity, counts, exitStatus, localStore }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(diagnosis.container, forKey: .container)
        try container.encode(diagnosis.date, forKey: .date)
        try container.encode(diagnosis.stores, forKey: .stores)
        try container.encode(diagnosis.findings, forKey: .findings)
        try container.encode(diagnosis.severity?.rawValue ?? "ok", forKey: .severity)
        try container.encode(counts, forKey: .counts)
        try container.encode(exitStatus, forKey: .exitStatus)
        try container.encodeIfPresent(localStore, forKey: .localStore)
    }
}

/// Which local store was read.
struct LocalStoreSummary: Encodable {
    var path: String
    var type: String
    var storeIdentifier: String
    var schemaVersion: Int
}

/// The metadata of a local store, read from a copy (the original is never opened).
struct LocalStoreReading {
    var entries: [String: Data]
    var schemaVersion: Int
    var summary: LocalStoreSummary

    init(path: String, type: String?) throws {
        let url = try StoreAccess.storeFile(path)
        let storeType = try StoreAccess.type(of: url, named: type)
        let copy = try StoreAccess.copy(url, type: storeType)
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        let schema = try StoreAccess.schema(of: copy, type: storeType.storeType)
        let store: any PersistentStore
        do {
            store = try StoreAccess.open(copy, type: storeType, schema: schema)
        } catch {
            throw ToolError("\(error)", url: url)
        }
        defer { store.close() }
        let metadata = try store.metadata()
        entries = metadata.entries
        schemaVersion = metadata.schemaVersion
        summary = LocalStoreSummary(
            path: url.path,
            type: storeType.storeType,
            storeIdentifier: metadata.storeIdentifier.uuidString.lowercased(),
            schemaVersion: metadata.schemaVersion
        )
    }
}
