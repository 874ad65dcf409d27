import SyncTestKit
import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import Testing

@Suite("Compaction")
struct CompactionTests {
    /// Size in bytes of every regular file under `url` (folders, whose size is the file system's
    /// business, not counted).
    static func size(of url: URL) -> Int {
        let enumerator = FileManager.default.enumerator(at: url, includingPropertiesForKeys: [.fileSizeKey, .isRegularFileKey])
        var total = 0
        while let file = enumerator?.nextObject() as? URL {
            guard let values = try? file.resourceValues(forKeys: [.fileSizeKey, .isRegularFileKey]), values.isRegularFile == true else { continue }
            total += values.fileSize ?? 0
        }
        return total
    }

    /// Devices that share one container directory (as NFS would give them).
    final class SharedContainer {
        let directory = TemporaryDirectory("compaction")
        let registry = StoreRegistry()
        let time = SimulatedTime()
        var devices: [(coordinator: StoreCoordinator, store: any PersistentStore, sync: FolderSync)] = []
        var container: URL { directory.makeDirectory("container") }

        init() { registry.register(SimulatedStore.self) }

        @discardableResult
        func addDevice(_ name: String) throws -> Int {
            let coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: registry)
            let store = try coordinator.addStore(
                ofType: "simulated", at: directory.makeDirectory("stores").appendingPathComponent("\(name).json"),
                options: StoreOptions(presentsFiles: false))
            let time = self.time
            let sync = try FolderSync(
                coordinator: coordinator, store: store, container: container, storeName: "notes", deviceID: name,
                wallClock: { time.now }, now: { Date(timeIntervalSince1970: Double(time.now) / 1000) })
            devices.append((coordinator, store, sync))
            return devices.count - 1
        }

        func contents(_ index: Int) throws -> [Record] {
            try SyncSimulator.schema.entities.flatMap { try devices[index].store.fetch(FetchRequest(entity: $0.name)) }
        }

        /// Each device makes `rounds` edits to the same few notes (history, not new data).
        func churn(rounds: Int) throws {
            for round in 0..<rounds {
                for (index, device) in devices.enumerated() {
                    time.advance(by: 7)
                    let context = ObjectContext(coordinator: device.coordinator)
                    let notes = try context.fetch(FetchRequest(entity: "Note"))
                    if notes.count < 5 {
                        try context.insert(entity: "Note", values: ["title": .string("note \(index)-\(round)")])
                    } else {
                        var note = notes[round % notes.count]
                        note["rank"] = .integer(Int64(round))
                        note["title"] = .string("edited \(index)-\(round)")
                        try context.update(note)
                    }
                    try context.save()
                    try device.sync.exportPending()
                }
                for device in devices { try device.sync.importAvailable() }
            }
        }
    }

    @Test("Once every device has applied a prefix, it folds into a baseline; a new device starts from it; the container stays small")
    func compactionKeepsTheContainerSmall() throws {
        let shared = SharedContainer()
        for name in ["alpha", "beta", "gamma"] { try shared.addDevice(name) }
        try shared.churn(rounds: 30)
        for device in shared.devices { try device.sync.importAvailable() }
        let before = CompactionTests.size(of: shared.container)

        // An acknowledgement missing holds everything back.
        try shared.devices[0].sync.publishAcknowledgement()
        try shared.devices[1].sync.publishAcknowledgement()
        #expect(try shared.devices[0].sync.compact() == 0)

        try shared.devices[2].sync.publishAcknowledgement()
        var removed = 0
        for device in shared.devices { removed += try device.sync.compact() }
        #expect(removed == 90)
        let after = CompactionTests.size(of: shared.container)
        print("container: \(before) bytes before compaction, \(after) after (90 logs folded)")
        #expect(after < before / 2)

        // A new device starts from the baseline plus the rest, and converges.
        let newcomer = try shared.addDevice("delta")
        #expect(try shared.devices[newcomer].sync.startFromBaseline() > 0)
        try shared.churn(rounds: 3)
        for _ in 0..<2 { for device in shared.devices { try device.sync.importAvailable() } }
        let reference = try shared.contents(0)
        #expect(!reference.isEmpty)
        for index in 1..<shared.devices.count { #expect(try shared.contents(index) == reference, "device \(index) differs") }

        // History keeps growing, the container does not: it tracks live data.
        try shared.churn(rounds: 30)
        for device in shared.devices { try device.sync.importAvailable() }
        for device in shared.devices { try device.sync.publishAcknowledgement() }
        for device in shared.devices { try device.sync.compact() }
        let later = CompactionTests.size(of: shared.container)
        print("container after 30 more rounds and compaction: \(later) bytes")
        #expect(later < after * 3 / 2, "the container grew with history")
    }
}
