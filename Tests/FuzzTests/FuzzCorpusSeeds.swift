import FolderSync
import Foundation
import FuzzTargets
import JSONStore
import Persistence
import PlistStore
import SyncTestKit
import Testing

/// Makes the seed corpus (`make fuzz-seeds`): real files written by the real code, two devices
/// (a JSON store and a property-list store) syncing through one container, with edits,
/// deletions, an acknowledgement, a compaction and a request for a missing log. Skipped unless
/// CONCORD_FUZZ_SEEDS names the folder to fill (normally Fuzz/Corpus).
@Suite("Fuzz corpus seeds")
struct FuzzCorpusSeeds {
    static let output = ProcessInfo.processInfo.environment["CONCORD_FUZZ_SEEDS"].map {
        URL(fileURLWithPath: $0, isDirectory: true)
    }

    struct Device {
        let coordinator: StoreCoordinator
        let store: any PersistentStore
        let sync: FolderSync
    }

    @Test("Seed corpus from a real two-device run", .enabled(if: output != nil))
    func makeSeeds() throws {
        let output = try #require(Self.output)
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "concord-fuzz-seeds-\(UUID().uuidString.prefix(8))"
        )
        defer { try? FileManager.default.removeItem(at: root) }
        let container = root.appendingPathComponent("container", isDirectory: true)
        try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
        let registry = StoreRegistry()
        registry.register(JSONStore.self)
        registry.register(PlistStore.self)
        func device(_ name: String, type: String, file: String) throws -> Device {
            let coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: registry)
            let store = try coordinator.addStore(
                ofType: type,
                at: root.appendingPathComponent(file),
                options: StoreOptions(presentsFiles: false)
            )
            let sync = try FolderSync(
                coordinator: coordinator,
                store: store,
                container: container,
                storeName: "notes",
                deviceID: name,
                settleInterval: .zero
            )
            _ = try sync.enable(live: false)
            return Device(coordinator: coordinator, store: store, sync: sync)
        }
        let alpha = try device("alpha", type: "json", file: "alpha.json")
        let beta = try device("beta", type: "plist", file: "beta.plist")

        // Alpha: a folder, tagged notes, then an edit and a deletion, one log per save.
        let context = ObjectContext(coordinator: alpha.coordinator)
        let folder = try context.insert(entity: "Folder", values: ["name": .string("Work")])
        let tag = try context.insert(entity: "Tag", values: ["label": .string("urgent")])
        var notes: [Record] = []
        for index in 0..<3 {
            var note = try context.insert(
                entity: "Note",
                values: [
                    "title": .string("note \(index) \u{e9}"), "rank": .integer(Int64(index) - 1),
                    "pinned": .boolean(index == 0),
                ]
            )
            note.toOne["folder"] = folder.id
            note.toMany["tags"] = [tag.id]
            try context.update(note)
            notes.append(note)
        }
        try context.save()
        try alpha.sync.exportPending()
        var edited = notes[1]
        edited["title"] = .string("edited")
        try context.update(edited)
        try context.save()
        try alpha.sync.exportPending()
        try context.delete(notes[2].id)
        try context.save()
        try alpha.sync.exportPending()

        // Beta imports, edits, and both acknowledge; alpha compacts into a baseline.
        _ = try beta.sync.importAvailable()
        let betaContext = ObjectContext(coordinator: beta.coordinator)
        _ = try betaContext.insert(entity: "Tag", values: ["label": .string("home")])
        try betaContext.save()
        try beta.sync.exportPending()
        _ = try alpha.sync.importAvailable()
        try alpha.sync.publishAcknowledgement()
        try beta.sync.publishAcknowledgement()
        // The logs compaction is about to remove: seeds too.
        let layout = alpha.sync.layout
        var deviceFiles: [String: Data] = [:]
        func keepDeviceFiles() throws {
            for device in ["alpha", "beta"] {
                let folder = layout.deviceFolder(device)
                for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) {
                    deviceFiles["\(device)-\(name)"] = try Data(contentsOf: folder.appendingPathComponent(name))
                }
            }
        }
        try keepDeviceFiles()
        try alpha.sync.compact()

        // Beta asks for a log of alpha's it lost (a gap before a later one).
        let more = ObjectContext(coordinator: alpha.coordinator)
        for index in 0..<2 {
            _ = try more.insert(entity: "Folder", values: ["name": .string("later \(index)")])
            try more.save()
            try alpha.sync.exportPending()
        }
        let lost = try #require(try layout.logSequences(device: "alpha").dropLast().last)
        let lostURL = layout.logURL(device: "alpha", sequence: lost)
        let lostData = try Data(contentsOf: lostURL)
        try FileManager.default.removeItem(at: lostURL)
        beta.sync.missingLogGracePeriod = .zero
        _ = try? beta.sync.importAvailable()
        try lostData.write(to: lostURL)
        try keepDeviceFiles()

        // Collect what the run left, a few files per target.
        let fileManager = FileManager.default
        var written: [String: Int] = [:]
        func seed(_ target: String, _ name: String, _ data: Data) throws {
            let folder = output.appendingPathComponent(target, isDirectory: true)
            try fileManager.createDirectory(at: folder, withIntermediateDirectories: true)
            try data.write(to: folder.appendingPathComponent(name))
            written[target, default: 0] += 1
        }
        func files(_ folder: URL) -> [URL] {
            ((try? fileManager.contentsOfDirectory(atPath: folder.path)) ?? []).sorted().map {
                folder.appendingPathComponent($0)
            }
        }
        for (name, data) in deviceFiles.sorted(by: { $0.key < $1.key }) {
            let url = URL(fileURLWithPath: name)
            switch url.pathExtension {
            case "cclog", "ccbase":
                try seed("log", name, data)
                try seed("log-scanner", name, data)
                let log = try LogFile.decode(data, url: url)
                let version = Data([UInt8(log.formatVersion - 1)])
                if url.pathExtension == "ccbase" {
                    let baseline = try BaselinePayload.decode(from: log)
                    for format in [UInt16(1), 2, 3, 5] {
                        try seed(
                            "baseline",
                            "\(name)-v\(format)",
                            Data([UInt8(format - 1)]) + (try baseline.encoded(formatVersion: format))
                        )
                    }
                    // Format 5 with the versions of a device that leapt.
                    var leapt = baseline
                    leapt.versions = [
                        "alpha": LogVersions(
                            digests: [2: [0, 77]],
                            voids: [3...1026],
                            leapt: Date(timeIntervalSince1970: 1_800_000_000)
                        )
                    ]
                    try seed("baseline", "\(name)-v5-versions", Data([4]) + (try leapt.encoded(formatVersion: 5)))
                } else {
                    let payload = try SyncPayload.decode(from: log)
                    try seed("payload", name, version + log.payload)
                    if log.sequence == 1 {
                        for format in [UInt16(1), 2] {
                            try seed(
                                "payload",
                                "\(name)-v\(format)",
                                Data([UInt8(format - 1)]) + (try payload.encoded(formatVersion: format))
                            )
                        }
                    }
                }
            case "json" where name.hasSuffix(FolderSync.requestsName):
                try seed("requests", name, data)
            case "json":
                try seed("acknowledgement", name, data)
            default:
                break
            }
        }
        for url in files(layout.storeFolder.appendingPathComponent("sentinels")) {
            try seed("sentinel", url.lastPathComponent, Data(contentsOf: url))
        }
        for url in files(layout.storeFolder) where url.lastPathComponent.hasPrefix("container") {
            try seed("container-identity", url.lastPathComponent, Data(contentsOf: url))
        }
        // A device list as the list sentinel writes it.
        let list = DeviceListSentinel(layout: layout)
        try list.register(DeviceRegistration(device: "alpha", host: "seed", schemaVersion: 1))
        try list.register(DeviceRegistration(device: "beta"))
        try list.unregister("beta")
        try seed("sentinel", "devices.plist", Data(contentsOf: list.listURL))

        // The stores' files and metadata.
        for (device, name) in [(alpha, "alpha"), (beta, "beta")] {
            let entries = try device.store.metadata().entries
            for (key, value) in entries.sorted(by: { $0.key < $1.key }) {
                if SyncMetadata.recordClocks.contains(key), written["record-clocks", default: 0] < 6 {
                    try seed("record-clocks", "\(name)-\(written["record-clocks", default: 0])", value)
                    if written["record-clocks", default: 0] == 1 {
                        try seed(
                            "record-clocks",
                            "\(name)-json",
                            try JSONEncoder().encode(try RecordClocks.decode(value))
                        )
                    }
                } else if key == SyncMetadata.clock.name {
                    try seed("hybrid-clock", name, value)
                } else if let device = SyncMetadata.applied.suffix(of: key) {
                    try seed("applied-logs", "\(name)-\(device)", value)
                }
            }
        }
        try seed("json-store", "alpha.json", Data(contentsOf: root.appendingPathComponent("alpha.json")))
        try seed("plist-store", "beta.plist", Data(contentsOf: root.appendingPathComponent("beta.plist")))
        let snapshot = try PlistFormat.decode(
            Data(contentsOf: root.appendingPathComponent("beta.plist")),
            url: root,
            options: StoreOptions()
        )
        try seed(
            "plist-store",
            "beta-xml.plist",
            try PlistFormat.encode(snapshot, options: StoreOptions(settings: ["format": "xml"]))
        )
        for (prefix, name) in [
            (UInt8(0), "json-store/alpha.json"), (1, "plist-store/beta.plist"), (1, "plist-store/beta-xml.plist"),
        ] {
            let url = output.appendingPathComponent(name)
            try seed("store-open", url.lastPathComponent, Data([prefix]) + (try Data(contentsOf: url)))
        }
        for target in FuzzTarget.all {
            #expect(written[target.name, default: 0] > 0, "no seed for \(target.name)")
        }
    }
}
