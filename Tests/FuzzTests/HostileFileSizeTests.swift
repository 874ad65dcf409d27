import FolderSync
import Foundation
import JSONStore
import Persistence
import SyncTestKit
import Testing

/// Files another device writes are read with a bound, whatever size they claim: an
/// acknowledgement, a request for logs, a baseline or a log of 64 GiB (sparse: no disk used) is
/// skipped, never read whole into memory.
@Suite("Hostile file sizes")
struct HostileFileSizeTests {
    @Test("A 64 GiB acknowledgement, request file, baseline and log of a peer are skipped, and sync goes on")
    func hugePeerFilesAreSkipped() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "concord-hostile-\(UUID().uuidString.prefix(8))"
        )
        defer { try? FileManager.default.removeItem(at: root) }
        let container = root.appendingPathComponent("container", isDirectory: true)
        try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
        let registry = StoreRegistry()
        registry.register(JSONStore.self)
        let coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: registry)
        let store = try coordinator.addStore(
            ofType: "json",
            at: root.appendingPathComponent("store.json"),
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: container,
            storeName: "notes",
            deviceID: "alpha",
            settleInterval: .zero
        )
        try sync.enable(live: false)

        let peer = sync.layout.deviceFolder("hostile")
        try FileManager.default.createDirectory(at: peer, withIntermediateDirectories: true)
        for name in [
            "applied.json", FolderSync.requestsName, "baseline-0000000000000009.ccbase", "0000000000000001.cclog",
        ] {
            let url = peer.appendingPathComponent(name)
            #expect(FileManager.default.createFile(atPath: url.path, contents: Data("{".utf8)))
            let handle = try FileHandle(forWritingTo: url)
            try handle.truncate(atOffset: 64 << 30)
            try handle.close()
        }
        #expect(!sync.acknowledgements().contains { $0.device == "hostile" })
        let report = try sync.importAvailable()
        #expect(report.logs == 0)
        #expect(try sync.startFromBaseline() == 0)
        let context = ObjectContext(coordinator: coordinator)
        _ = try context.insert(entity: "Tag", values: ["label": .string("still syncing")])
        try context.save()
        #expect(try sync.exportPending() == 1)

        // A 64 GiB file under this device's own next log name (a sync engine's doing): neither
        // the save nor the export reads it whole; the log is numbered after it.
        let own = sync.layout.logURL(device: "alpha", sequence: 2)
        #expect(FileManager.default.createFile(atPath: own.path, contents: Data("{".utf8)))
        let handle = try FileHandle(forWritingTo: own)
        try handle.truncate(atOffset: 64 << 30)
        try handle.close()
        let again = ObjectContext(coordinator: coordinator)
        _ = try again.insert(entity: "Tag", values: ["label": .string("after the huge file")])
        try again.save()
        #expect(try sync.exportPending() == 1)
        let next = sync.layout.logURL(device: "alpha", sequence: 3)
        #expect((try? LogFile.decode(Data(contentsOf: next), url: next)) != nil, "log 3 is in the container")
    }
}
