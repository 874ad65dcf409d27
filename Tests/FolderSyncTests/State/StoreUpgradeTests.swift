import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SQLiteStore
import SyncTestKit
import Testing

/// A store synced by an earlier version of Concord keeps its history when this version sets up
/// sync on it.
@Suite("Store upgrades")
struct StoreUpgradeTests {
    @Test(
        "The log number and clock kept under 0.1.0's keys move to this version's: numbering and the clock go on after them"
    )
    func renamedKeysMove() throws {
        let directory = TemporaryDirectory("store-upgrade")
        let container = directory("container")
        try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        let coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: registry)
        let store = try coordinator.addStore(
            ofType: "sqlite",
            at: directory("notes.sqlite"),
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        // What 0.1.0 left in a store that had made 5 logs, its clock far ahead of this machine's.
        let ahead = SyncClock(
            time: UInt64(Date().timeIntervalSince1970 * 1000) + 3_600_000,
            counter: 7,
            device: "alpha"
        )
        try store.commit(
            StoreChanges(metadataEntries: [
                "sync.device": Data("alpha".utf8),
                "sync.seq": Data("5".utf8),
                "sync.clock": try JSONEncoder().encode(ahead),
            ])
        )

        let sync = try FolderSync(coordinator: coordinator, store: store, container: container, storeName: "notes")
        defer { sync.stop() }
        let entries = try store.metadata().entries
        #expect(entries["sync.seq"] == nil && entries["sync.clock"] == nil, "the old keys are gone")
        #expect(entries["sync.out/seq"] == Data("5".utf8))
        #expect(try entries["sync.out/clock"].map { try JSONDecoder().decode(SyncClock.self, from: $0) } == ahead)
        #expect(try sync.lastLocalSequence() == 5)

        try sync.enable(live: false)
        let context = ObjectContext(coordinator: coordinator)
        let tag = try context.insert(entity: "Tag", values: ["label": .string("after the upgrade")])
        try context.save()
        #expect(try sync.lastLocalSequence() == 6)
        #expect(try sync.exportPending() == 1)
        let url = sync.layout.logURL(device: "alpha", sequence: 6)
        let change = try #require(
            try SyncPayload.decode(from: LogFile.decode(Data(contentsOf: url), url: url)).changes.first
        )
        #expect(change.id == tag.id)
        #expect(try #require(change.created) > ahead, "the clock went on after the one the store kept")

        // Set up again (a relaunch): nothing left to move, nothing changes.
        sync.stop()
        let again = try FolderSync(coordinator: coordinator, store: store, container: container, storeName: "notes")
        defer { again.stop() }
        #expect(try again.lastLocalSequence() == 6)
    }
}
