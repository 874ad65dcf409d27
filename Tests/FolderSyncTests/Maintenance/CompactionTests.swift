import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

@Suite("Compaction")
struct CompactionTests {
    /// Size in bytes of every regular file under `url` (folders, whose size is the file system's
    /// business, not counted).
    static func size(of url: URL) -> Int {
        let enumerator = FileManager.default.enumerator(
            at: url,
            includingPropertiesForKeys: [.fileSizeKey, .isRegularFileKey]
        )
        var total = 0
        while let file = enumerator?.nextObject() as? URL {
            guard let values = try? file.resourceValues(forKeys: [.fileSizeKey, .isRegularFileKey]),
                values.isRegularFile == true
            else { continue }
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
                ofType: "simulated",
                at: directory.makeDirectory("stores").appendingPathComponent("\(name).json"),
                options: StoreOptions(presentsFiles: false)
            )
            let time = self.time
            let sync = try FolderSync(
                coordinator: coordinator,
                store: store,
                container: container,
                storeName: "notes",
                deviceID: name,
                wallClock: { time.now },
                now: { Date(timeIntervalSince1970: Double(time.now) / 1000) }
            )
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

    @Test(
        "Once every device has applied a prefix, it folds into a baseline; a new device starts from it; the container stays small"
    )
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
        for index in 1..<shared.devices.count {
            #expect(try shared.contents(index) == reference, "device \(index) differs")
        }

        // History keeps growing, the container does not: it tracks live data.
        try shared.churn(rounds: 30)
        for device in shared.devices { try device.sync.importAvailable() }
        for device in shared.devices { try device.sync.publishAcknowledgement() }
        for device in shared.devices { try device.sync.compact() }
        let later = CompactionTests.size(of: shared.container)
        print("container after 30 more rounds and compaction: \(later) bytes")
        #expect(later < after * 3 / 2, "the container grew with history")
    }

    @Test(
        "A deletion's tombstone is collected once every device has seen it and all that was written before it is applied, after the tombstone lifetime"
    )
    func tombstonesAreCollectedWhenStable() throws {
        let shared = SharedContainer()
        for name in ["alpha", "beta", "gamma"] { try shared.addDevice(name) }
        for device in shared.devices { device.sync.tombstoneLifetime = .seconds(3600) }
        let (alpha, beta, gamma) = (shared.devices[0], shared.devices[1], shared.devices[2])
        /// Clock entries in a device's store beyond one per live record: its tombstones.
        func tombstones(_ index: Int) throws -> Int {
            let clocks = try shared.devices[index].store.metadata().entries.keys
                .filter { SyncMetadata.recordClocks.contains($0) }.count
            return clocks - (try shared.contents(index).count)
        }

        let creating = ObjectContext(coordinator: alpha.coordinator)
        for number in 0..<30 { try creating.insert(entity: "Note", values: ["title": .string("note \(number)")]) }
        try creating.save()
        try alpha.sync.exportPending()
        for device in shared.devices { try device.sync.importAvailable() }
        let doomed = Array(
            try alpha.store.fetch(FetchRequest(entity: "Note", sortedBy: [.ascending("title")])).prefix(20)
        )

        // gamma edits a note before it hears of the deletion; the log stays in its outbox.
        let editing = ObjectContext(coordinator: gamma.coordinator)
        var edited = try #require(try editing.record(with: doomed[0].id))
        edited["title"] = "edited on gamma"
        try editing.update(edited)
        try editing.save()
        shared.time.advance(by: 10)
        let deleting = ObjectContext(coordinator: alpha.coordinator)
        for note in doomed { try deleting.delete(note.id) }
        try deleting.save()
        try alpha.sync.exportPending()
        for device in shared.devices { try device.sync.importAvailable() }
        for index in 0..<3 { #expect(try tombstones(index) == 20) }
        shared.time.advance(by: 3_600_000)

        // Everyone has seen the deletion, but gamma's acknowledgement counts a log alpha has not
        // applied (it may touch a deleted record): alpha keeps the tombstones.
        for device in shared.devices { try device.sync.publishAcknowledgement() }
        try alpha.sync.compact()
        #expect(try tombstones(0) == 20)

        // Once it is applied, the tombstones go.
        try gamma.sync.exportPending()
        for device in shared.devices { try device.sync.importAvailable() }
        try alpha.sync.compact()
        #expect(try tombstones(0) == 0)
        try beta.sync.compact()
        try gamma.sync.compact()
        #expect(try tombstones(1) == 0)
        #expect(try tombstones(2) == 0)

        // The edit gamma made before the deletion did not bring the note back anywhere, and a new
        // device that starts from the baseline gets neither the deleted notes nor their tombstones.
        let newcomer = try shared.addDevice("delta")
        #expect(try shared.devices[newcomer].sync.startFromBaseline() > 0)
        try shared.devices[newcomer].sync.importAvailable()
        let reference = try shared.contents(0)
        #expect(reference.count == 10)
        #expect(Set(reference.map(\.id)).isDisjoint(with: doomed.map(\.id)))
        for index in 1..<shared.devices.count {
            #expect(try shared.contents(index) == reference, "device \(index) differs")
        }
        #expect(try tombstones(newcomer) == 0)
    }

    @Test(
        "Tombstones stay while a registered device has no acknowledgement or one without a clock, and for the tombstone lifetime"
    )
    func tombstonesWaitForEveryDevice() throws {
        let shared = SharedContainer()
        for name in ["alpha", "beta"] { try shared.addDevice(name) }
        for device in shared.devices { device.sync.tombstoneLifetime = .zero }
        let (alpha, beta) = (shared.devices[0], shared.devices[1])
        let context = ObjectContext(coordinator: alpha.coordinator)
        let note = try context.insert(entity: "Note", values: ["title": "short-lived"])
        try context.save()
        try context.delete(note.id)
        try context.save()
        try alpha.sync.exportPending()
        try beta.sync.importAvailable()
        let key = SyncMetadata.recordClocks(note.id)
        try alpha.sync.publishAcknowledgement()
        // beta has published nothing.
        try alpha.sync.compact()
        #expect(try alpha.store.hasSyncMetadata(key))
        // An acknowledgement written by an older version (no clock, no committed log).
        let old = SyncAcknowledgement(device: "beta", applied: ["alpha": 2, "beta": 0])
        try JSONEncoder().encode(old).write(
            to: beta.sync.layout.deviceFolder("beta").appendingPathComponent("applied.json")
        )
        try alpha.sync.compact()
        #expect(try alpha.store.hasSyncMetadata(key))
        let published = try beta.sync.publishAcknowledgement()
        #expect(published.committed == 0 && published.clock != nil)
        try alpha.sync.compact()
        #expect(try !alpha.store.hasSyncMetadata(key))

        // Stable but young: kept until the lifetime has passed.
        alpha.sync.tombstoneLifetime = .seconds(60)
        let second = try context.insert(entity: "Note", values: ["title": "also short-lived"])
        try context.save()
        try context.delete(second.id)
        try context.save()
        try alpha.sync.exportPending()
        try beta.sync.importAvailable()
        try beta.sync.publishAcknowledgement()
        try alpha.sync.compact()
        let secondKey = SyncMetadata.recordClocks(second.id)
        #expect(try alpha.store.hasSyncMetadata(secondKey))
        shared.time.advance(by: 60_000)
        try alpha.sync.compact()
        #expect(try !alpha.store.hasSyncMetadata(secondKey))
    }

    @Test(
        "live sync acknowledges and compacts by itself: a device's applied logs leave the container without the app asking"
    )
    func liveSyncCompactsByItself() throws {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha")
        let beta = try bench.addDevice("beta")
        for device in [alpha, beta] { device.sync.maintenanceInterval = .zero }
        #expect(try alpha.sync.enable().state == .syncing)
        #expect(try beta.sync.enable().state == .syncing)
        for index in 0..<5 { try alpha.addNote("note \(index)") }
        #expect(beta.waitForTitles((0..<5).map { "note \($0)" }))
        // Once beta's acknowledgement says it applied them, alpha's next maintenance removes them.
        var extra = 0
        let compacted = alpha.events.wait(timeout: .seconds(20)) { _ in
            if let count = try? alpha.sync.layout.logSequences(device: "alpha").count, count < 5 { return true }
            extra += 1
            _ = try? alpha.addNote("nudge \(extra)")
            return false
        }
        #expect(compacted, "alpha's logs: \((try? alpha.sync.layout.logSequences(device: "alpha")) ?? [])")
        #expect(beta.waitForTitles(try alpha.titles()))
        // A device joining now starts from the baseline and gets everything.
        let gamma = try bench.addDevice("gamma")
        #expect(try gamma.sync.enable().state == .syncing)
        #expect(try gamma.titles() == alpha.titles())
    }
}

extension CompactionTests {
    /// The baselines in `device`'s own folder, by name.
    static func baselineNames(_ device: LifecycleBench.Device) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: device.sync.layout.deviceFolder(device.name).path)
            .filter { $0.hasSuffix(".ccbase") }.sorted()
    }

    @Test(
        "automatic maintenance folds a store into a new baseline only when the logs since the last one are worth it or some can go; compact() always folds"
    )
    func maintenanceFoldsWhenWorthIt() throws {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha")
        let beta = try bench.addDevice("beta")
        alpha.sync.maintenanceInterval = .zero
        #expect(try alpha.sync.enable().state == .syncing)
        #expect(try beta.sync.enable(live: false).state == .syncing)
        // 320 notes in one save: the first maintenance folds them (there is no baseline yet).
        try alpha.edit { context in
            for index in 0..<320 { try context.insert(entity: "Note", values: ["title": .string("bulk \(index)")]) }
        }
        alpha.sync.waitForQueuedWork()
        let first = try Self.baselineNames(alpha)
        #expect(first.count == 1, "\(first)")

        // One more note: one log against a baseline of 320 changes, and none that every device
        // applied: the baseline stays as it is and the log waits.
        try alpha.addNote("one more")
        alpha.sync.waitForQueuedWork()
        #expect(try Self.baselineNames(alpha) == first)
        let waiting = try alpha.sync.layout.logSequences(device: "alpha")
        #expect(waiting.count >= 2, "\(waiting)")

        // Beta applies them: the logs the baseline covers can go, which is worth a compaction.
        try beta.sync.importAvailable()
        try beta.sync.publishAcknowledgement()
        try alpha.addNote("after beta's acknowledgement")
        alpha.sync.waitForQueuedWork()
        let second = try Self.baselineNames(alpha)
        #expect(second != first && second.count == 1, "\(second)")
        #expect(try alpha.sync.layout.logSequences(device: "alpha").count < waiting.count + 1)

        // A few more notes, not yet applied by beta: short of 1/64 of the baseline, they wait...
        try alpha.addNote("waits")
        alpha.sync.waitForQueuedWork()
        #expect(try Self.baselineNames(alpha) == second)
        // ...until they are enough: 1/64 of the baseline's 320 changes is 5 logs.
        let before = try alpha.sync.lastLocalSequence()
        var third = second
        for index in 0..<20 where third == second {
            try alpha.addNote("enough \(index)")
            alpha.sync.waitForQueuedWork()
            third = try Self.baselineNames(alpha)
        }
        let logs = try alpha.sync.lastLocalSequence() - before
        #expect(third != second && third.count == 1, "\(third)")
        #expect(logs >= 4, "folded after \(logs) more log(s) (with the one that waited: 5 or more)")

        // Asked for, a compaction folds whatever there is.
        try alpha.addNote("asked for")
        alpha.sync.waitForQueuedWork()
        #expect(try Self.baselineNames(alpha) == third)
        try alpha.sync.compact()
        #expect(try Self.baselineNames(alpha) != third)

        // Beta, joining late, still gets every note (baseline, then the logs after it).
        try beta.sync.importAvailable()
        #expect(try beta.titles() == alpha.titles())
    }
}

@Suite("Catching up from a baseline")
struct BaselineCatchUpTests {
    /// Every baseline in `author`'s own folder, delivered to `viewer`.
    static func deliverBaselines(_ bench: SyncTestBench, of author: String, to viewer: String) throws {
        let folder = bench.logURL(author, 1, in: author).deletingLastPathComponent()
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name.hasSuffix(".ccbase") {
            try bench.place(
                Data(contentsOf: folder.appendingPathComponent(name)),
                name: name,
                author: author,
                in: viewer
            )
        }
    }

    @Test(
        "a device that saw a baseline while the log before a gap was still arriving catches up from it once it reaches the gap"
    )
    func baselineSeenBeforeReachingTheGap() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        for title in ["one", "two", "three"] { try bench.addNote("alpha", title) }
        let first = try bench.logBytes("alpha", 1)
        let second = try bench.logBytes("alpha", 2)
        let name = ContainerLayout.logFileName(sequence: 2)
        // Alpha knows of nobody yet: it folds everything into a baseline and removes its logs,
        // the third before beta got it.
        try bench["alpha"].sync.publishAcknowledgement()
        #expect(try bench["alpha"].sync.compact() == 3)
        try bench.place(first, name: ContainerLayout.logFileName(sequence: 1), author: "alpha", in: "beta")
        try bench.importOn("beta")
        // The baseline arrives while log 2 is still arriving: nothing is missing yet.
        try bench.place(second.prefix(second.count / 2), name: name, author: "alpha", in: "beta", atomically: false)
        try Self.deliverBaselines(bench, of: "alpha", to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one"])
        // Log 2 completes: beta applies it, and log 3 is only in the baseline.
        try bench.place(second, name: name, author: "alpha", in: "beta")
        try bench.importOn("beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one", "three", "two"])
        #expect(try bench["beta"].sync.importedThrough(device: "alpha") == 3)
    }

    @Test("compaction writes the outbox first: its baseline covers no log of the device that is not in the container")
    func compactionExportsFirst() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        try bench.addNote("alpha", "one")
        // A process commits and dies before its export.
        _ = try bench.edit("alpha", export: false) { context in
            try context.insert(entity: "Note", values: ["title": .string("two")])
        }
        #expect(!FileManager.default.fileExists(atPath: bench.logURL("alpha", 2, in: "alpha").path))
        // Beta has applied nothing of alpha's, and alpha knows it: compaction keeps alpha's logs.
        try bench["beta"].sync.publishAcknowledgement()
        let acknowledgement = bench.logURL("beta", 1, in: "beta").deletingLastPathComponent()
            .appendingPathComponent("applied.json")
        try bench.place(Data(contentsOf: acknowledgement), name: "applied.json", author: "beta", in: "alpha")
        #expect(try bench["alpha"].sync.compact() == 0)
        #expect(FileManager.default.fileExists(atPath: bench.logURL("alpha", 2, in: "alpha").path))
        // Beta gets the logs, not the baseline: it holds both notes.
        try bench.deliver("alpha", [1, 2], to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one", "two"])
    }

    @Test("a device that joined from an older baseline gets the logs compacted away since from a newer one")
    func logsCompactedBeforeTheDeviceWasKnown() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        for title in ["one", "two", "three"] { try bench.addNote("alpha", title) }
        // Alpha knows of nobody yet (beta's folder has not reached it): it folds and removes all.
        try bench["alpha"].sync.publishAcknowledgement()
        #expect(try bench["alpha"].sync.compact() == 3)
        try Self.deliverBaselines(bench, of: "alpha", to: "beta")
        #expect(try bench["beta"].sync.startFromBaseline() > 0)
        #expect(try bench.titles("beta") == ["one", "three", "two"])
        // Alpha goes on, still alone, and folds again before beta is heard of.
        for title in ["four", "five"] { try bench.addNote("alpha", title) }
        #expect(try bench["alpha"].sync.compact() == 2)
        try Self.deliverBaselines(bench, of: "alpha", to: "beta")
        let report = try bench.importOn("beta")
        #expect(report.blocked == 0, "\(report)")
        #expect(try bench.titles("beta") == ["five", "four", "one", "three", "two"])
        #expect(try bench["beta"].sync.importedThrough(device: "alpha") == 5)
        // And what alpha writes next applies after it.
        try bench.addNote("alpha", "six")
        try bench.deliver("alpha", [6], to: "beta")
        #expect(try bench.importOn("beta").logs == 1)
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }
    @Test(
        "a device restoring its lost store gets its own compacted history from a baseline that arrives after it rejoined"
    )
    func restoredDeviceCatchesUpOnItsOwnHistory() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        for title in ["one", "two"] { try bench.addNote("beta", title) }
        try bench.deliver("beta", [1, 2], to: "alpha")
        try bench.importOn("alpha")
        // Alpha's next log depends on beta's two.
        try bench.addNote("alpha", "three")
        // Beta knows of nobody yet: it folds its logs into a baseline and removes them.
        try bench["beta"].sync.publishAcknowledgement()
        #expect(try bench["beta"].sync.compact() == 2)
        let folder = bench.logURL("beta", 1, in: "beta").deletingLastPathComponent()
        let baselines = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter {
            $0.hasSuffix(".ccbase")
        }
        let aside = bench.directory.makeDirectory("aside")
        for name in baselines {
            try FileManager.default.moveItem(
                at: folder.appendingPathComponent(name),
                to: aside.appendingPathComponent(name)
            )
        }
        // Beta's store is lost; it rejoins under its name while the baseline is not in its view
        // (a sync engine removed the older one before the newer one arrived).
        try FileManager.default.removeItem(at: bench["beta"].storeURL)
        try bench.restart("beta")
        let join = try bench["beta"].sync.enable(live: false).join
        #expect(
            join.map { if case .restoringDevice = $0.situation { true } else { false } } == true,
            "\(String(describing: join))"
        )
        try bench.deliver("alpha", [1], to: "beta")
        let before = try bench.importOn("beta")
        #expect(before.logs == 0, "alpha's log waits for beta's own history: \(before)")
        for name in baselines {
            try FileManager.default.moveItem(
                at: aside.appendingPathComponent(name),
                to: folder.appendingPathComponent(name)
            )
        }
        let report = try bench.importOn("beta")
        #expect(report.blocked == 0, "\(report)")
        #expect(try bench.titles("beta") == ["one", "three", "two"])
    }

    @Test(
        "a device that applied a record's creation from an old log, its deletion compacted away and forgotten, removes it when it catches up from the baseline"
    )
    func recordDeletedAndForgottenElsewhereGoes() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        let gone = try bench.addNote("alpha", "gone")
        try bench.edit("alpha") { context in try context.delete(gone) }
        try bench.addNote("alpha", "kept")
        // Beta sees only the creation for now.
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["gone"])
        // Alpha knows of nobody yet: it forgets the deletion and folds its logs away.
        bench["alpha"].sync.tombstoneLifetime = .zero
        try bench["alpha"].sync.publishAcknowledgement()
        #expect(try bench["alpha"].sync.compact() == 3)
        #expect(try bench["alpha"].sync.tombstoneCount() == 0, "the deletion is forgotten")
        // Beta never gets the deletion's log: the baseline stands for it.
        try Self.deliverBaselines(bench, of: "alpha", to: "beta")
        let report = try bench.importOn("beta")
        #expect(report.blocked == 0, "\(report)")
        #expect(try bench.titles("beta") == ["kept"])
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }
}
