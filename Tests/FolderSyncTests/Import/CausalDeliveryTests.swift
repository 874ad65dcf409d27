import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// Causal delivery: a device's logs apply in their order, and a log applies only after what its
/// writer had applied when it wrote it, whatever order a sync engine delivers the files in.
@Suite("Causal delivery")
struct CausalDeliveryTests {
    @Test("A missing log holds back its device's later logs; they apply, in order, when it turns up")
    func missingLogHoldsBackLaterOnes() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        try bench.addNote("alpha", "one")
        let late = try bench.addNote("alpha", "two")
        try bench.update("alpha", late, ["rank": .integer(9)])  // 3
        try bench.deliver("alpha", [1, 3], to: "beta")
        let report = try bench.importOn("beta")
        #expect(report.logs == 1 && report.blocked == 1, "\(report)")
        #expect(try bench.titles("beta") == ["one"])
        // Beta keeps working meanwhile.
        try bench.addNote("beta", "four")

        try bench.deliver("alpha", [2], to: "beta")
        #expect(try bench.importOn("beta").logs == 2)
        #expect(try bench["beta"].store.records(with: [late]).first?["rank"] == .integer(9))
        try bench.deliverEverything()
        try bench.importOn("alpha")
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }

    @Test(
        "A note filed into a folder another device made waits for that folder's log: no repair moves it, it lands in the folder"
    )
    func dependentLogWaitsForWhatItsWriterHadApplied() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta", "gamma"] { try bench.addDevice(name) }
        // Alpha makes a folder; beta receives it and files a new note into it.
        let folder = try #require(
            try bench.edit("alpha") { context in
                _ = try context.insert(entity: "Folder", values: ["name": .string("Work")])
            }.first?.id
        )
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        let note = try #require(
            try bench.edit("beta") { context in
                let note = try context.insert(entity: "Note", values: ["title": .string("filed")])
                var record = note
                record.toOne["folder"] = folder
                try context.update(record)
            }.first?.id
        )
        // Gamma gets beta's log first.
        try bench.deliver("beta", [1], to: "gamma")
        let early = try bench.importOn("gamma")
        #expect(early.logs == 0 && early.blocked > 0, "beta's log depends on alpha's folder: \(early)")
        #expect(try bench.titles("gamma").isEmpty)
        // A local save on gamma meanwhile repairs nothing: it has not seen the note.
        try bench.addNote("gamma", "gamma's")
        try bench.deliver("alpha", [1], to: "gamma")
        #expect(try bench.importOn("gamma").logs == 2)
        let filed = try #require(try bench["gamma"].store.records(with: [note]).first)
        #expect(filed.toOne["folder"] == folder)
        try bench.addNote("gamma", "after")  // validates what the import left: nothing to repair
        #expect(try bench["gamma"].store.records(with: [note]).first?.toOne["folder"] == folder)
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        #expect(try bench.contents("alpha") == bench.contents("gamma"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }

    @Test(
        "A gap that does not fill is reported once, naming the missing file, after the grace period; the app may give up on it"
    )
    func lastingGapIsReportedAndCanBeSkipped() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        bench["beta"].sync.missingLogGracePeriod = .seconds(30)
        for title in ["one", "two", "three"] { try bench.addNote("alpha", title) }
        try bench.deliver("alpha", [1, 3], to: "beta")
        try bench.importOn("beta")
        #expect(bench["beta"].log.missing.isEmpty, "not before the grace period")
        for _ in 0..<3 { try bench.importOn("beta", after: 20_000) }
        let missing = bench["beta"].log.missing
        #expect(missing.count == 1, "once: \(missing)")
        #expect(missing.first?.lastPathComponent == ContainerLayout.logFileName(sequence: 2))
        #expect(missing.first?.deletingLastPathComponent().lastPathComponent == "alpha")
        // Beta asked for it, in its own folder.
        let requests = try bench.requests(of: "beta")
        #expect(requests?.logs == ["alpha": [2]])

        // The app gives up on it: the log after it applies; the request is withdrawn.
        try bench["beta"].sync.skipMissingLog(device: "alpha", sequence: 2)
        #expect(try bench.importOn("beta").logs == 1)
        #expect(try bench.titles("beta") == ["one", "three"])
        #expect(try bench.requests(of: "beta") == nil)
    }

    @Test("Logs of the previous format (no dependencies) still apply, in their device's order")
    func previousFormatAppliesInOrder() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        let changes = (1...3).map { index in
            var change = SyncChange(id: ObjectID(entity: "Note", uuid: UUID()))
            change.created = SyncClock(time: UInt64(1_000 + index), counter: 0, device: "alpha")
            change.values["title"] = ClockedValue(value: .string("old \(index)"), clock: change.created!)
            return change
        }
        for (index, change) in changes.enumerated() {
            let log = LogFile(
                device: "alpha",
                sequence: UInt64(index + 1),
                schemaVersion: SyncSimulator.schema.version,
                created: Date(),
                payload: try SyncPayload(changes: [change]).encoded(formatVersion: 2),
                formatVersion: 2
            )
            try bench.place(
                log.encoded(),
                name: ContainerLayout.logFileName(sequence: log.sequence),
                author: "alpha",
                in: "beta"
            )
        }
        try FileManager.default.removeItem(at: bench.logURL("alpha", 2, in: "beta"))
        #expect(try bench.importOn("beta").logs == 1)
        let log = LogFile(
            device: "alpha",
            sequence: 2,
            schemaVersion: SyncSimulator.schema.version,
            created: Date(),
            payload: try SyncPayload(changes: [changes[1]]).encoded(formatVersion: 2),
            formatVersion: 2
        )
        try bench.place(log.encoded(), name: ContainerLayout.logFileName(sequence: 2), author: "alpha", in: "beta")
        #expect(try bench.importOn("beta").logs == 2)
        #expect(try bench.titles("beta") == ["old 1", "old 2", "old 3"])
    }
}
