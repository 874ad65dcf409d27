import FolderSync
import Foundation
import Persistence
import Testing

extension SyncTestBench {
    /// Another process of device `name` (an app's command-line tool): its own coordinator, store
    /// instance and sync on the device's store and view, sync not enabled.
    func openAnotherProcess(of name: String) throws -> (StoreCoordinator, any PersistentStore, FolderSync) {
        let device = self[name]
        return try open(
            deviceID: device.deviceID,
            storeURL: device.storeURL,
            view: device.view,
            storeType: device.storeType,
            key: device.flakyKey,
            schema: device.schema
        )
    }

    /// A bench of `names`, each with sync enabled by a process that drives it by hand.
    static func syncing(_ names: [String]) throws -> SyncTestBench {
        let bench = SyncTestBench()
        for name in names {
            try bench.addDevice(name)
            _ = try bench[name].sync.enable(live: false)
        }
        return bench
    }

    /// A copy of `original`'s machine taken now (a cloned virtual machine, a store and container
    /// copied to a second computer): its store and its view of the container, opened as `name`
    /// under `original`'s device id.
    @discardableResult
    func addTwin(of original: String, as name: String) throws -> Device {
        let source = self[original]
        let storeURL = directory.makeDirectory("stores").appendingPathComponent("\(name).json")
        let view = directory.makeDirectory("views", name)
        try FileManager.default.removeItem(at: view)
        try FileManager.default.copyItem(at: source.view, to: view)
        try FileManager.default.copyItem(at: source.storeURL, to: storeURL)
        let key = "\(name)-\(UUID().uuidString)"
        let (coordinator, store, sync) = try open(
            deviceID: source.deviceID,
            storeURL: storeURL,
            view: view,
            storeType: source.storeType,
            key: key,
            schema: source.schema
        )
        let device = Device(
            name: name,
            deviceID: source.deviceID,
            storeURL: storeURL,
            view: view,
            storeType: source.storeType,
            flakyKey: key,
            schema: source.schema,
            coordinator: coordinator,
            store: store,
            sync: sync
        )
        devices[name] = device
        return device
    }

    /// Carries every file of the store's folder between the views of `names`, as a file-sync
    /// engine does: a file one view lacks is copied there; a file two views hold with different
    /// bytes keeps the newer one under its name, and the other becomes a Syncthing conflict copy
    /// in every view. Returns how many files it copied.
    @discardableResult
    func engineSync(_ names: [String]) throws -> Int {
        var newest: [String: (bytes: Data, modified: Date)] = [:]
        var losers: [String: Data] = [:]
        for name in names {
            let folder = ContainerLayout(container: self[name].view, storeName: Self.storeName).storeFolder
            guard let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil) else {
                continue
            }
            for case let url as URL in walker {
                let values = try url.resourceValues(forKeys: [.isRegularFileKey, .contentModificationDateKey])
                guard values.isRegularFile == true else { continue }
                let relative = String(url.path.dropFirst(folder.path.count + 1))
                let bytes = try Data(contentsOf: url)
                let modified = values.contentModificationDate ?? .distantPast
                guard let known = newest[relative] else {
                    newest[relative] = (bytes, modified)
                    continue
                }
                guard known.bytes != bytes else { continue }
                let loser = modified > known.modified ? known.bytes : bytes
                if modified > known.modified { newest[relative] = (bytes, modified) }
                let stem = (relative as NSString).deletingPathExtension
                let ext = (relative as NSString).pathExtension
                losers["\(stem).sync-conflict-20261129-070000-TWIN\(losers.count).\(ext)"] = loser
            }
        }
        var copied = 0
        for name in names {
            let folder = ContainerLayout(container: self[name].view, storeName: Self.storeName).storeFolder
            for (relative, bytes) in newest.mapValues(\.bytes).merging(losers, uniquingKeysWith: { $1 }) {
                let url = folder.appendingPathComponent(relative)
                guard (try? Data(contentsOf: url)) != bytes else { continue }
                try FileManager.default.createDirectory(
                    at: url.deletingLastPathComponent(),
                    withIntermediateDirectories: true
                )
                try bytes.write(to: url)
                try FileManager.default.setAttributes(
                    [.modificationDate: Date(timeIntervalSince1970: Double(time.now) / 1000)],
                    ofItemAtPath: url.path
                )
                copied += 1
            }
        }
        return copied
    }

    /// How many log files (conflict copies included) `name`'s view holds for `device`.
    func logCount(_ device: String, in name: String) throws -> Int {
        let folder = ContainerLayout(container: self[name].view, storeName: Self.storeName).deviceFolder(device)
        return try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".cclog") }.count
    }
}

@Suite("Two live copies of one device id")
struct TwinDeviceTests {
    /// alpha and beta, each with sync enabled by a process that drives it by hand.
    func syncingAlphaAndBeta() throws -> SyncTestBench { try SyncTestBench.syncing(["alpha", "beta"]) }

    /// One round of a file-sync engine between the three machines (between alpha and beta only
    /// when `cloneOnline` is false), then an import and an export on each; a machine whose sync
    /// stopped refuses them.
    func round(_ bench: SyncTestBench, cloneOnline: Bool = true) throws {
        let machines = ["alpha", "beta", "clone"].filter { bench.devices[$0] != nil && (cloneOnline || $0 != "clone") }
        try bench.engineSync(machines)
        for name in machines where bench[name].sync.state == .syncing {
            do {
                try bench.importOn(name)
                try bench[name].sync.exportPending()
            } catch let error as SyncError where error.code == .invalidState {
                #expect(bench[name].sync.state == .reset(.deviceIDInUse))
            }
        }
    }

    /// What ``twinsUntilOneStops(_:)`` leaves.
    struct Twins {
        /// A second process on a copy's store: its coordinator, store and sync.
        typealias Process = (StoreCoordinator, any PersistentStore, FolderSync)
        var stopped: [String]
        var saved: [String: [String]]
        var second: [String: Process]
    }

    /// alpha's machine copied (store and container) as "clone" once alpha and beta synced "one"
    /// and "b"; then both copies save (alpha more, the clone offline every other round: their
    /// numberings drift apart), each with a second process on its store, until one stops or 16
    /// rounds passed. Returns the copies that stopped, what each copy saved, and the second
    /// processes.
    func twinsUntilOneStops(_ bench: SyncTestBench) throws -> Twins {
        try bench.addNote("alpha", "one")
        try bench.addNote("beta", "b")
        try round(bench)
        try bench.addTwin(of: "alpha", as: "clone")
        _ = try bench["clone"].sync.enable(live: false)
        // A second process on each copy's store (an app and its command-line tool).
        var second: [String: Twins.Process] = [:]
        for name in ["alpha", "clone"] {
            let process = try bench.openAnotherProcess(of: name)
            _ = try process.2.enable(live: false)
            second[name] = process
        }
        var saved: [String: [String]] = ["alpha": [], "clone": []]
        // (The first log of one copy that leaps past the other's only makes it suspect: a store
        // restored from a backup meets such logs of an earlier life. The next one, past logs it
        // numbered after that, is another installation's.)
        for step in 0..<16 where !["alpha", "clone"].contains(where: { bench[$0].sync.state != .syncing }) {
            for name in ["alpha", "clone"] where bench[name].sync.state == .syncing {
                for index in 0..<(name == "alpha" ? 3 : 1) {
                    let title = "\(name) \(step).\(index)"
                    try bench.addNote(name, title)
                    saved[name, default: []].append(title)
                }
            }
            try round(bench, cloneOnline: step % 2 == 1)
        }
        let stopped = ["alpha", "clone"].filter { bench[$0].sync.state == .reset(.deviceIDInUse) }
        return Twins(stopped: stopped, saved: saved, second: second)
    }

    @Test(
        "A store copied to a second machine that goes on writing under the same device id is found: one copy stops, says why, and keeps its data; the resends between them end, and nothing the others acknowledged is lost"
    )
    func copiedStoreStopsInsteadOfResendingForever() throws {
        let bench = try syncingAlphaAndBeta()
        let twins = try twinsUntilOneStops(bench)
        let (stopped, saved, second) = (twins.stopped, twins.saved, twins.second)
        #expect(stopped.count == 1, "one copy stops, the first to read a log the other wrote after reading its own")
        for name in stopped {
            #expect(
                bench[name].log.events.contains {
                    if case .containerReset(.deviceIDInUse) = $0 { return true } else { return false }
                }
            )
            // Its other process stops too, at its next import, without finding anything itself.
            let other = try #require(second[name]?.2)
            #expect(other.state == .syncing)
            #expect(throws: SyncError.self) { try other.importAvailable() }
            #expect(other.state == .reset(.deviceIDInUse))
            // The doctor says so, from the store.
            let metadata = try bench[name].store.metadata()
            let diagnosis = ContainerDiagnosis.diagnose(
                container: bench[name].view,
                storeName: SyncTestBench.storeName,
                local: metadata.entries,
                localSchemaVersion: metadata.schemaVersion
            )
            #expect(diagnosis.findings.contains { $0.code == "local.deviceIDInUse" && $0.severity == .problem })
            // Its data stays: every note it saved is in its store.
            #expect(Set(saved[name] ?? []).isSubset(of: Set(try bench.titles(name))))
        }
        // With one copy stopped, quiet rounds write nothing more: no leap, no resend.
        try round(bench)
        let logs = try bench.logCount("alpha", in: "beta")
        for _ in 0..<4 { try round(bench) }
        #expect(try bench.logCount("alpha", in: "beta") == logs)
        // The devices still syncing hold the same notes, every one the syncing copy saved among them.
        let syncing = ["alpha", "clone"].first { !stopped.contains($0) } ?? "alpha"
        #expect(try bench.titles("beta") == bench.titles(syncing))
        #expect(Set(saved[syncing] ?? []).isSubset(of: Set(try bench.titles("beta"))))
        #expect(try bench.titles("beta").contains("b"))
    }

    @Test(
        "A copy that stopped takes a new device id: its saves that never reached the others reach them, a deletion made meanwhile stays, a process still open under the old id refuses to save, and the two ids then sync without resends"
    )
    func stoppedCopyGoesOnUnderANewDeviceID() throws {
        let bench = try syncingAlphaAndBeta()
        let twins = try twinsUntilOneStops(bench)
        let (stopped, saved, second) = (twins.stopped, twins.saved, twins.second)
        let name = try #require(stopped.first)
        let going = name == "alpha" ? "clone" : "alpha"
        // While it is stopped it saves (locally), and beta deletes a note every device holds.
        try bench.edit(name, export: false) { context in
            _ = try context.insert(entity: "Note", values: ["title": .string("saved while stopped")])
        }
        try bench.edit("beta") { context in
            let one = try #require(
                try context.fetch(FetchRequest(entity: "Note")).first { $0["title"] == .string("one") }
            )
            try context.delete(one.id)
        }
        try round(bench)

        let newID = try FolderSync.assignNewDeviceID("renamed", to: bench[name].store)
        #expect(newID == "renamed")
        #expect(throws: SyncError.self) { try FolderSync.assignNewDeviceID("renamed", to: bench[name].store) }
        #expect(throws: SyncError.self) { try FolderSync.assignNewDeviceID("no/slash", to: bench[name].store) }
        // The store's other process, still under the old id, neither saves nor syncs any more.
        let (otherCoordinator, otherStore, other) = try #require(second[name])
        let context = ObjectContext(coordinator: otherCoordinator, origin: .local, name: "second")
        _ = try context.insert(entity: "Note", values: ["title": .string("under the old id")])
        #expect(throws: SyncError.self) { try context.save() }
        #expect(throws: SyncError.self) { try other.importAvailable() }
        #expect(other.state == .reset(.deviceIDChanged))
        otherCoordinator.removeStore(otherStore)
        otherStore.close()

        // The app opens sync again: a device the container does not know, merging its data in.
        try bench.restart(name)
        #expect(bench[name].sync.deviceID == "renamed")
        let enabling = try bench[name].sync.enable(live: false)
        #expect(enabling.join?.situation == .newDevice(others: ["alpha", "beta"]))
        #expect(enabling.join?.choice == .mergeLocalIntoContainer)
        for _ in 0..<4 { try round(bench) }
        #expect(bench[name].sync.state == .syncing)
        #expect(bench[going].sync.state == .syncing)
        let titles = try bench.titles("beta")
        #expect(try bench.titles(name) == titles)
        #expect(try bench.titles(going) == titles)
        #expect(titles.contains("saved while stopped"))
        #expect(!titles.contains("one"), "the deletion made while the copy was stopped stays")
        #expect(!titles.contains("under the old id"))
        #expect(Set(saved.values.flatMap { $0 }).union(["b"]).isSubset(of: Set(titles)))
        // Both ids go on, each saving once, and then quiet rounds write nothing more.
        try bench.addNote(name, "renamed saves")
        try bench.addNote(going, "the other copy saves")
        for _ in 0..<2 { try round(bench) }
        let counts = try ["alpha", "renamed"].map { try bench.logCount($0, in: "beta") }
        for _ in 0..<3 { try round(bench) }
        #expect(try ["alpha", "renamed"].map { try bench.logCount($0, in: "beta") } == counts)
        #expect(try bench.titles(name) == bench.titles("beta"))
        #expect(try bench.titles(going) == bench.titles("beta"))
        #expect(try bench.titles("beta").contains("renamed saves"))
        #expect(try bench.titles("beta").contains("the other copy saves"))
    }

    @Test(
        "A store restored from a backup after another life of its id ran and ended meets a log of that life that leapt past one of its own: it goes on syncing, takes in that life's save, and its own saves reach the others"
    )
    func backupRestoredAfterAnotherLifeGoesOn() throws {
        let bench = try syncingAlphaAndBeta()
        try bench.addNote("alpha", "one")
        try round(bench)
        // alpha's store is lost; it rejoins under its name (its numbering leaps past log 1) and
        // saves: log 1026, which follows 1.
        try FileManager.default.removeItem(at: bench["alpha"].storeURL)
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        try bench.addNote("alpha", "two")
        try round(bench)
        // A backup of that store; then it is lost again, and a fresh store under the name saves
        // once (a log that leaps past 1026, the backup's own) before it is given up too.
        let backup = bench.directory.makeDirectory("backup").appendingPathComponent("alpha.json")
        try FileManager.default.copyItem(at: bench["alpha"].storeURL, to: backup)
        try FileManager.default.removeItem(at: bench["alpha"].storeURL)
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        try bench.addNote("alpha", "three")
        try round(bench)
        // The backup comes back, and meets that life's log.
        try FileManager.default.removeItem(at: bench["alpha"].storeURL)
        try FileManager.default.copyItem(at: backup, to: bench["alpha"].storeURL)
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        for step in 0..<4 {
            try bench.addNote("alpha", "four \(step)")
            try round(bench)
            try round(bench)
            #expect(bench["alpha"].sync.state == .syncing)
        }
        #expect(try bench.titles("alpha") == ["four 0", "four 1", "four 2", "four 3", "one", "three", "two"])
        #expect(try bench.titles("beta") == bench.titles("alpha"))
    }
}
