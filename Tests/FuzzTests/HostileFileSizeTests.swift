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
        // the save nor the export reads it whole. This process made the last number, so the save
        // takes the next one; the export finds a damaged copy of that log there and replaces it.
        let own = sync.layout.logURL(device: "alpha", sequence: 2)
        try makeHuge(own)
        let again = ObjectContext(coordinator: coordinator)
        _ = try again.insert(entity: "Tag", values: ["label": .string("after the huge file")])
        try again.save()
        #expect(try sync.exportPending() == 1)
        #expect(try FileManager.default.attributesOfItem(atPath: own.path)[.size] as? Int ?? 0 < 1 << 20)
        let second = try LogFile.decode(Data(contentsOf: own), url: own)
        #expect(try SyncPayload.decode(from: second).changes.count == 1, "log 2 is the save's")

        // The same under the number a process that did not make the last one takes next (the
        // first save of a new process, here): the file counts as history of this device id the
        // store lacks, so the process numbers its log after it, past a restore's leap.
        let third = sync.layout.logURL(device: "alpha", sequence: 3)
        try makeHuge(third)
        sync.stop()
        let relaunched = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: container,
            storeName: "notes",
            deviceID: "alpha",
            settleInterval: .zero
        )
        defer { relaunched.stop() }
        try relaunched.enable(live: false)
        let later = ObjectContext(coordinator: coordinator)
        _ = try later.insert(entity: "Tag", values: ["label": .string("after a relaunch")])
        try later.save()
        let next = 3 + FolderSync.restoreLeap + 1
        #expect(try relaunched.lastLocalSequence() == next)
        #expect(try relaunched.exportPending() == 1)
        let fourth = sync.layout.logURL(device: "alpha", sequence: next)
        #expect((try? LogFile.decode(Data(contentsOf: fourth), url: fourth)) != nil, "the log is in the container")
    }

    /// A sparse 64 GiB file at `url`.
    private func makeHuge(_ url: URL) throws {
        #expect(FileManager.default.createFile(atPath: url.path, contents: Data("{".utf8)))
        let handle = try FileHandle(forWritingTo: url)
        try handle.truncate(atOffset: 64 << 30)
        try handle.close()
    }
}
