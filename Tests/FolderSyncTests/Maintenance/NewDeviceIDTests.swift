import FolderSync
import Foundation
import Persistence
import Testing

/// `FolderSync.assignNewDeviceID(_:to:)` beyond the copied store (see ``TwinDeviceTests``): an id
/// in use is refused, the retired id's lost logs are published again, and a `FolderSync` under
/// the old id can neither act nor be doubled on its coordinator.
@Suite("A store takes a new device id")
struct NewDeviceIDTests {
    /// alpha and beta syncing, one note each, exchanged.
    func syncedPair() throws -> SyncTestBench {
        let bench = try SyncTestBench.syncing(["alpha", "beta"])
        try bench.addNote("alpha", "from alpha")
        try bench.addNote("beta", "from beta")
        try bench.engineSync(["alpha", "beta"])
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        return bench
    }

    func registration(_ device: String, in bench: SyncTestBench, view: String) -> URL {
        ContainerLayout(container: bench[view].view, storeName: SyncTestBench.storeName).storeFolder
            .appendingPathComponent("sentinels/\(device).plist")
    }

    @Test(
        "An id another device uses is refused at the join, naming it, and nothing is written under it; another id then joins and the data converges"
    )
    func idInUseIsRefused() throws {
        let bench = try syncedPair()
        try bench["alpha"].sync.disable()
        try FolderSync.assignNewDeviceID("beta", to: bench["alpha"].store)
        try bench.restart("alpha")
        let betaFolder = ContainerLayout(container: bench["alpha"].view, storeName: SyncTestBench.storeName)
            .deviceFolder("beta")
        let before = try FileManager.default.contentsOfDirectory(atPath: betaFolder.path).sorted()
        let refusal = #expect(throws: SyncError.self) { try bench["alpha"].sync.enable(live: false) }
        #expect(refusal?.code == .invalidDeviceID)
        #expect(refusal?.message.contains("\"beta\" is in use") == true, "\(String(describing: refusal))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: betaFolder.path).sorted() == before)

        try FolderSync.assignNewDeviceID("gamma", to: bench["alpha"].store)
        // The doctor says what the store waits for, from the store.
        let metadata = try bench["alpha"].store.metadata()
        let findings = ContainerDiagnosis.diagnose(
            container: bench["alpha"].view,
            storeName: SyncTestBench.storeName,
            local: metadata.entries,
            localSchemaVersion: metadata.schemaVersion
        ).findings
        #expect(findings.contains { $0.code == "local.newDeviceID" && $0.device == "gamma" })
        #expect(!findings.contains { $0.code == "local.notRegistered" })
        try bench.restart("alpha")
        let enabling = try bench["alpha"].sync.enable(live: false)
        #expect(enabling.join?.situation == .newDevice(others: ["alpha", "beta"]))
        try bench.addNote("beta", "later from beta")
        try bench.engineSync(["alpha", "beta"])
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        #expect(try bench.titles("alpha") == ["from alpha", "from beta", "later from beta"])
        #expect(try bench.titles("beta") == bench.titles("alpha"))
    }

    @Test(
        "Logs of the retired id lost from the container go out again as they were with the join under the new id (written: below the export mark its disable moved, or acknowledged by another device); one never written stays out, and what it carried arrives under the new id"
    )
    func retiredIDsLostLogsArePublishedAgain() throws {
        let bench = try syncedPair()
        try bench.engineSync(["alpha", "beta"])
        try bench["beta"].sync.publishAcknowledgement()
        try bench.addNote("alpha", "second from alpha")
        try bench.engineSync(["alpha", "beta"])
        try bench["alpha"].sync.disable()
        try bench.edit("alpha", export: false) { context in
            _ = try context.insert(entity: "Note", values: ["title": .string("saved while away")])
        }
        let layout = ContainerLayout(container: bench["alpha"].view, storeName: SyncTestBench.storeName)
        var bytes: [UInt64: Data] = [:]
        for number: UInt64 in [1, 2] {
            bytes[number] = try Data(contentsOf: layout.logURL(device: "alpha", sequence: number))
            try FileManager.default.removeItem(at: layout.logURL(device: "alpha", sequence: number))
        }
        try FolderSync.assignNewDeviceID("alpha2", to: bench["alpha"].store)
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        for number: UInt64 in [1, 2] {
            #expect(try Data(contentsOf: layout.logURL(device: "alpha", sequence: number)) == bytes[number])
        }
        #expect(!FileManager.default.fileExists(atPath: layout.logURL(device: "alpha", sequence: 3).path))
        let republished = bench["alpha"].log.events.compactMap { event -> String? in
            if case .republished(let url) = event { return url.lastPathComponent } else { return nil }
        }
        #expect(republished.sorted() == [1, 2].map { ContainerLayout.logFileName(sequence: $0) })
        try bench.engineSync(["alpha", "beta"])
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["from alpha", "from beta", "saved while away", "second from alpha"])
        #expect(try bench.titles("alpha") == bench.titles("beta"))
    }

    @Test(
        "A log of the retired id lost from the container after the join under the new id is published again when a device that never applied it asks for it: the store keeps the logs it wrote under that id and answers for them, and the asking device catches up"
    )
    func retiredIDsLogsAreAnsweredAfterTheJoin() throws {
        let bench = try SyncTestBench.syncing(["alpha", "beta", "gamma"])
        bench["gamma"].sync.missingLogGracePeriod = .seconds(30)
        for title in ["one", "two", "three"] { try bench.addNote("alpha", title) }
        let second = try bench.logBytes("alpha", 2)
        try bench.deliver("alpha", [1, 2, 3], to: "beta")
        try bench.importOn("beta")
        try bench["alpha"].sync.disable()
        try FolderSync.assignNewDeviceID("alpha2", to: bench["alpha"].store)
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        // Log 2 is lost after the join, everywhere but on beta, which applied it; gamma never had it.
        try FileManager.default.removeItem(at: bench.logURL("alpha", 2, in: "alpha"))
        try bench.deliver("alpha", [1, 3], to: "gamma")
        for _ in 0..<3 { try bench.importOn("gamma", after: 20_000) }
        #expect(try bench.requests(of: "gamma")?.logs["alpha"] == [2])
        #expect(try bench.titles("gamma") == ["one"])
        // Nobody writes under "alpha" now: the store that retired it answers.
        try bench.deliverRequests(of: "gamma")
        try bench.importOn("alpha")
        #expect(try bench.logBytes("alpha", 2) == second)
        try bench.deliver("alpha", [2], to: "gamma")
        try bench.importOn("gamma")
        #expect(try bench.titles("gamma") == ["one", "three", "two"])
    }

    @Test(
        "A tag removed from a note while the device was away goes out when it comes back under a new id or into a container replaced meanwhile: the other device drops it too, and a tag it added meanwhile stays",
        arguments: [false, true]
    )
    func removalMadeAwayGoesOut(intoReplacedContainer: Bool) throws {
        let bench = try syncedPair()
        var note: ObjectID?
        var kept: ObjectID?
        var dropped: ObjectID?
        try bench.edit("alpha") { context in
            dropped = try context.insert(entity: "Tag", values: ["label": .string("dropped")]).id
            kept = try context.insert(entity: "Tag", values: ["label": .string("kept")]).id
            var record = try context.insert(entity: "Note", values: ["title": .string("tagged")])
            record.toMany["tags"] = [dropped!, kept!]
            try context.update(record)
            note = record.id
        }
        try bench.engineSync(["alpha", "beta"])
        try bench.importOn("beta")
        try bench["alpha"].sync.disable()
        if intoReplacedContainer {
            try bench["beta"].sync.disable()
            _ = try bench["beta"].sync.enable(policy: .always(.replaceContainerWithLocal), live: false)
        }
        try bench.edit("alpha", export: false) { context in
            var record = try #require(try context.record(with: note!))
            record.toMany["tags"] = [kept!]
            try context.update(record)
        }
        var added: ObjectID?
        try bench.edit("beta") { context in
            added = try context.insert(entity: "Tag", values: ["label": .string("added on beta")]).id
            var record = try #require(try context.record(with: note!))
            record.toMany["tags", default: []].insert(added!)
            try context.update(record)
        }
        if intoReplacedContainer {
            // The engine carries the replacement: beta's folder, newer everywhere, in place of alpha's.
            let folder = { (name: String) in
                ContainerLayout(container: bench[name].view, storeName: SyncTestBench.storeName).storeFolder
            }
            try FileManager.default.removeItem(at: folder("alpha"))
            try FileManager.default.copyItem(at: folder("beta"), to: folder("alpha"))
        } else {
            try FolderSync.assignNewDeviceID("alpha2", to: bench["alpha"].store)
            try bench.restart("alpha")
        }
        _ = try bench["alpha"].sync.enable(policy: .always(.mergeLocalIntoContainer), live: false)
        for _ in 0..<2 {
            try bench.engineSync(["alpha", "beta"])
            for name in ["alpha", "beta"] { try bench.importOn(name) }
        }
        for name in ["alpha", "beta"] {
            let record = try #require(try bench[name].store.fetch(FetchRequest(entity: "Note")).first { $0.id == note })
            #expect(record.toMany["tags"] == [kept!, added!], "\(name)")
        }
    }

    @Test(
        "A FolderSync under the old id refuses to disable (the registration it would remove may be another installation's), and a second FolderSync for one store on one coordinator is refused until the first stops"
    )
    func oldInstanceNeitherDisablesNorDoubles() throws {
        let bench = try syncedPair()
        let device = bench["alpha"]
        let other = try bench.openAnotherProcess(of: "alpha")
        try FolderSync.assignNewDeviceID("alpha2", to: device.store)
        #expect(throws: SyncError.self) { try other.2.disable() }
        #expect(FileManager.default.fileExists(atPath: registration("alpha", in: bench, view: "alpha").path))

        // On the same coordinator, the app stops the old instance before it opens a new one.
        func reopen() throws -> FolderSync {
            try FolderSync(
                coordinator: device.coordinator,
                store: device.store,
                container: device.view,
                storeName: SyncTestBench.storeName
            )
        }
        let doubled = #expect(throws: SyncError.self) { try reopen() }
        #expect(doubled?.code == .invalidState)
        device.sync.stop()
        let renamed = try reopen()
        #expect(renamed.deviceID == "alpha2")
        _ = try renamed.enable(live: false)
        try bench.edit("alpha", export: false) { context in
            _ = try context.insert(entity: "Note", values: ["title": .string("after the rename")])
        }
        try renamed.exportPending()
        #expect(try renamed.lastLocalSequence() > 0)
    }
}
