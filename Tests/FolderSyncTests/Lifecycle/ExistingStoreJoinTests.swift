import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SQLiteStore
import SyncTestKit
import Testing

@Suite("Existing store joins")
struct ExistingStoreJoinTests {
    /// One device: a store and the coordinator that writes it; sync is turned on later.
    final class Device {
        let coordinator: StoreCoordinator
        let store: any PersistentStore
        let url: URL

        init(type: String, url: URL, registry: StoreRegistry) throws {
            self.url = url
            coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: registry)
            store = try coordinator.addStore(ofType: type, at: url, options: StoreOptions(presentsFiles: false))
        }

        func sync(_ name: String, container: URL) throws -> FolderSync {
            try FolderSync(
                coordinator: coordinator,
                store: store,
                container: container,
                storeName: "notes",
                deviceID: name
            )
        }

        /// Every record, entity by entity, in id order.
        func contents() throws -> [Record] {
            try SyncSimulator.schema.entities.flatMap { try store.fetch(FetchRequest(entity: $0.name)) }
        }

        /// The outbox entries still in the store's metadata.
        func outbox() throws -> [String] {
            try store.metadata().entries.keys.filter { SyncMetadata.outbox.contains($0) }.sorted()
        }
    }

    static func registry() -> StoreRegistry {
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        registry.register(SimulatedStore.self)
        return registry
    }

    /// Saves (without sync) `folders` folders, `tags` tags and `notes` notes, each note in a
    /// folder and with up to three tags.
    static func fill(_ device: Device, folders: Int, tags: Int, notes: Int) throws {
        var random = SimulationRandom(seed: 7)
        let context = ObjectContext(coordinator: device.coordinator, name: "before sync")
        var folderIDs: [ObjectID] = []
        var tagIDs: [ObjectID] = []
        for index in 0..<folders {
            folderIDs.append(try context.insert(entity: "Folder", values: ["name": .string("folder \(index)")]).id)
        }
        for index in 0..<tags {
            tagIDs.append(try context.insert(entity: "Tag", values: ["label": .string("tag \(index)")]).id)
        }
        for index in 0..<notes {
            var note = try context.insert(
                entity: "Note",
                values: [
                    "title": .string("note \(index)"), "rank": .integer(Int64(index % 10)),
                    "pinned": .boolean(index % 3 == 0),
                ]
            )
            if index % 7 != 0 { note.toOne["folder"] = random.pick(folderIDs) }
            let chosen = Set((0..<random.below(4)).compactMap { _ in random.pick(tagIDs) })
            if !chosen.isEmpty { note.toMany["tags"] = chosen }
            try context.update(note)
        }
        try context.save()
    }

    static func logs(in sync: FolderSync) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: sync.layout.deviceFolder(sync.deviceID).path)
            .filter { $0.hasSuffix(".cclog") }.sorted()
    }

    @Test(
        "A store with data from before sync joins: a new, empty device ends with the same contents; a second join exports nothing",
        arguments: ["sqlite", "simulated"]
    )
    func existingDataJoins(storeType: String) async throws {
        let directory = TemporaryDirectory("join")
        let container = directory.makeDirectory("container")
        let registry = Self.registry()
        let old = try Device(
            type: storeType,
            url: directory.makeDirectory("stores").appendingPathComponent("old.store"),
            registry: registry
        )
        try Self.fill(old, folders: 20, tags: 30, notes: 300)

        // Sync is turned on; a record saved since then is in sync already.
        let sync = try old.sync("old", container: container)
        let events = sync.events()
        let context = ObjectContext(coordinator: old.coordinator, name: "after sync")
        try context.insert(entity: "Folder", values: ["name": .string("made with sync on")])
        try context.save()
        try sync.exportPending()
        #expect(try Self.logs(in: sync).count == 1)

        var reports: [(Int, Int)] = []
        let exported = try sync.exportExistingData(batchSize: 64) { reports.append(($0, $1)) }
        #expect(exported == 350)
        // Every record once, at most 64 to a log, plus the save's log.
        let logs = try Self.logs(in: sync).count
        #expect(try Self.exportedChanges(of: sync).count == 351)
        #expect(logs >= 1 + 350 / 64 + 1)
        #expect(try Self.logSizes(of: sync).allSatisfy { $0 <= 64 })
        #expect(try Self.logSizes(of: sync).reduce(0, +) == 351, "no record goes twice")
        #expect(try sync.exportPending() == 0, "every committed log is in the container")
        #expect(try old.outbox().count == logs, "kept until compaction, to publish again a log the container loses")
        #expect(reports.last.map { $0.0 == 351 && $0.1 == 351 } == true)
        #expect(zip(reports, reports.dropFirst()).allSatisfy { $0.0 < $1.0 })

        // Again: nothing is left to export.
        #expect(try sync.exportExistingData(batchSize: 64) == 0)
        #expect(try Self.logs(in: sync).count == logs)

        // Saves after the join keep numbering after it.
        var note = try #require(try context.fetch(FetchRequest(entity: "Note")).first)
        note["title"] = .string("edited after the join")
        try context.update(note)
        try context.save()
        #expect(try sync.exportPending() == 1)
        #expect(try Self.logs(in: sync).count == logs + 1)

        // A new device imports everything and holds the same data.
        let new = try Device(type: "simulated", url: directory("stores", "new.json"), registry: registry)
        let newSync = try new.sync("new", container: container)
        let report = try newSync.importAvailable()
        #expect(report.logs == logs + 1)
        let reference = try old.contents()
        #expect(reference.count == 351)
        #expect(try new.contents() == reference)

        sync.stop()
        var progress: [(Int, Int)] = []
        for await event in events {
            if case .joinProgress(let examined, let total) = event { progress.append((examined, total)) }
        }
        #expect(progress.count == reports.count + 7, "one event per batch of both joins")
        #expect(progress.last.map { $0.0 == 351 && $0.1 == 351 } == true)
    }

    @Test("A join that stops halfway (a crash) resumes: what was committed is not exported again, the rest is")
    func interruptedJoinResumes() throws {
        let directory = TemporaryDirectory("join-crash")
        let registry = Self.registry()
        let stores = directory.makeDirectory("stores")
        let old = try Device(type: "sqlite", url: stores.appendingPathComponent("old.sqlite"), registry: registry)
        try Self.fill(old, folders: 10, tags: 10, notes: 200)
        let sync = try old.sync("old", container: directory.makeDirectory("container"))

        // The state a crash after the first batch (the folders, and their notes) leaves: the
        // store's files and the container, as they are on disk at that moment.
        let crashed = directory.makeDirectory("crashed")
        var copied = false
        try sync.exportExistingData(batchSize: 50) { examined, _ in
            guard !copied else { return }
            copied = true
            let manager = FileManager.default
            do {
                // The database and its log; SQLite rebuilds the shared-memory index on opening.
                for file in SQLiteStore.files(at: old.url)
                where manager.fileExists(atPath: file.path) && !file.path.hasSuffix("-shm") {
                    try manager.copyItem(at: file, to: crashed.appendingPathComponent(file.lastPathComponent))
                }
                try manager.copyItem(at: sync.layout.container, to: crashed.appendingPathComponent("container"))
            } catch {
                Issue.record("cannot copy the store and the container: \(error)")
            }
        }
        sync.stop()
        #expect(copied)

        let restarted = try Device(
            type: "sqlite",
            url: crashed.appendingPathComponent("old.sqlite"),
            registry: registry
        )
        let resumed = try restarted.sync("old", container: crashed.appendingPathComponent("container"))
        let before = try Self.exportedChanges(of: resumed).count
        #expect(before > 10 && before < 220, "the crash came halfway: \(before) records were in the container")
        #expect(try resumed.exportExistingData(batchSize: 50) == 220 - before)
        #expect(try Self.logSizes(of: resumed).reduce(0, +) == 220, "no record goes twice")
        #expect(try resumed.exportPending() == 0, "the log committed before the crash was written by the join")
        #expect(try resumed.exportExistingData(batchSize: 50) == 0)

        let new = try Device(type: "simulated", url: directory("stores", "new.json"), registry: registry)
        let newSync = try new.sync("new", container: crashed.appendingPathComponent("container"))
        #expect(try newSync.importAvailable().logs == Self.logs(in: resumed).count)
        #expect(try new.contents() == restarted.contents())
        #expect(try new.contents().count == 220)
    }

    /// The record changes of every log of `sync`'s device, by record, without their clocks.
    static func exportedChanges(of sync: FolderSync) throws -> [ObjectID: String] {
        var result: [ObjectID: String] = [:]
        for name in try logs(in: sync) {
            let url = sync.layout.deviceFolder(sync.deviceID).appendingPathComponent(name)
            let log = try LogFile.decode(try Data(contentsOf: url), url: url)
            for change in try SyncPayload.decode(from: log).changes {
                let values = change.values.mapValues(\.value).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                let references = change.references.mapValues(\.target).sorted { $0.key < $1.key }.map {
                    "\($0.key)->\(String(describing: $0.value))"
                }
                let members = change.members.sorted { $0.key < $1.key }.map {
                    "\($0.key)+\($0.value.map { "\($0.target)\($0.present)" })"
                }
                result[change.id] = "created \(change.created != nil) \(values) \(references) \(members)"
            }
        }
        return result
    }

    /// How many record changes each log of `sync`'s device carries, in log order.
    static func logSizes(of sync: FolderSync) throws -> [Int] {
        try logs(in: sync).map { name in
            let url = sync.layout.deviceFolder(sync.deviceID).appendingPathComponent(name)
            return try SyncPayload.decode(from: try LogFile.decode(try Data(contentsOf: url), url: url)).changes.count
        }
    }

    @Test(
        "A joined folder's notes follow it, folder by folder: each log of notes names few folders, so an importing device rewrites each folder (with its whole set of notes) in few saves"
    )
    func joinedMembersFollowTheirRecord() throws {
        let directory = TemporaryDirectory("join-members")
        let device = try Device(
            type: "sqlite",
            url: directory.makeDirectory("stores").appendingPathComponent("old.sqlite"),
            registry: Self.registry()
        )
        // Eight folders of forty notes, the notes made in turn across the folders.
        let context = ObjectContext(coordinator: device.coordinator, name: "before sync")
        var folders: [ObjectID] = []
        for index in 0..<8 {
            folders.append(try context.insert(entity: "Folder", values: ["name": .string("folder \(index)")]).id)
        }
        for index in 0..<320 {
            var note = try context.insert(entity: "Note", values: ["title": .string("note \(index)")])
            note.toOne["folder"] = folders[index % 8]
            try context.update(note)
        }
        try context.save()
        let sync = try device.sync("old", container: directory.makeDirectory("container"))
        defer { sync.stop() }
        #expect(try sync.exportExistingData(batchSize: 64) == 328)
        var foldersPerLog: [Int] = []
        for name in try Self.logs(in: sync) {
            let url = sync.layout.deviceFolder(sync.deviceID).appendingPathComponent(name)
            let changes = try SyncPayload.decode(from: try LogFile.decode(try Data(contentsOf: url), url: url)).changes
            let named = Set(changes.compactMap { $0.references["folder"]?.target })
            if !named.isEmpty { foldersPerLog.append(named.count) }
        }
        // 64 notes to a log, forty to a folder: a log spans at most three folders. In the order
        // of the notes' ids, each would name all eight.
        #expect(foldersPerLog.count == 5)
        #expect(foldersPerLog.allSatisfy { $0 <= 3 }, "folders named by each log: \(foldersPerLog)")
    }

    @Test("A joined record is exported exactly as a save that inserted it would have been")
    func joinExportsWhatASaveWould() throws {
        let directory = TemporaryDirectory("join-same")
        let registry = Self.registry()
        // The same records, saved with sync on by one device and before sync by the other.
        let saver = try Device(
            type: "sqlite",
            url: directory.makeDirectory("a").appendingPathComponent("a.sqlite"),
            registry: registry
        )
        let saverSync = try saver.sync("saver", container: directory.makeDirectory("container-a"))
        try Self.fill(saver, folders: 4, tags: 6, notes: 40)
        #expect(try saverSync.exportPending() == 1)
        let joiner = try Device(
            type: "sqlite",
            url: directory.makeDirectory("b").appendingPathComponent("b.sqlite"),
            registry: registry
        )
        try joiner.store.commit(StoreChanges(inserts: try saver.contents()))
        let joinerSync = try joiner.sync("joiner", container: directory.makeDirectory("container-b"))
        #expect(try joinerSync.exportExistingData() == 50)
        let saved = try Self.exportedChanges(of: saverSync)
        #expect(saved.count == 50)
        #expect(try Self.exportedChanges(of: joinerSync) == saved)
    }

    /// Peak resident memory of a helper process joining `count` existing records to sync.
    static func joinPeak(records count: Int) throws -> (before: Int, peak: Int) {
        let directory = TemporaryDirectory("join-rss")
        var joined = false
        let report = try #require(
            try ChildProcess.memoryReport(["join-rss", String(count), directory.url.path]) { line in
                let fields = line.split(separator: " ")
                if fields.first == "joined", fields.count == 3 {
                    joined = Int(fields[1]) == count + count / 100
                    print("join of \(count) items: \(line)")
                }
            }
        )
        #expect(report.exitStatus == 0)
        #expect(joined, "every item and group is exported")
        return (report.before, report.peak)
    }

    @Test("A store of 200,000 records joins with bounded memory: the peak does not grow with the record count")
    func joinMemoryIsBounded() throws {
        let small = try Self.joinPeak(records: 20_000)
        let large = try Self.joinPeak(records: 200_000)
        let smallGrowth = small.peak - small.before
        let largeGrowth = large.peak - large.before
        print(
            "join RSS growth: 20,000 records +\(smallGrowth) KiB (from \(small.before)), 200,000 records +\(largeGrowth) KiB (from \(large.before))"
        )
        // Ten times the records; the growth may differ by allocator noise, not by a factor.
        #expect(largeGrowth < smallGrowth * 2 + 8 * 1024, "20k: +\(smallGrowth) KiB, 200k: +\(largeGrowth) KiB")
    }
}
