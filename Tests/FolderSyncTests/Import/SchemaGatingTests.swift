import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

@Suite("Schema gating")
struct SchemaGatingTests {
    /// Version 2 of the simulator's schema: notes gain an optional `priority`.
    static let upgraded: Schema = {
        var entities = SyncSimulator.schema.entities
        let note = entities.firstIndex { $0.name == "Note" }!
        entities[note].attributes.append(AttributeDescription("priority", .integer, isOptional: true))
        return try! Schema(version: 2, entities: entities)
    }()

    /// The events `sync` posted until it stopped.
    static func collect(_ stream: AsyncStream<SyncEvent>) async -> [SyncEvent] {
        var events: [SyncEvent] = []
        for await event in stream { events.append(event) }
        return events
    }

    static func newerSchema(_ events: [SyncEvent]) -> [String] {
        events.compactMap {
            if case .newerSchemaFound(let device, let version) = $0 {
                return "\(device)@\(version)"
            } else {
                return nil
            }
        }
    }

    @Test("Logs from a newer schema are kept, not applied, and applied after the upgrade")
    func newerSchemaLogsWaitForTheUpgrade() async throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha", schema: Self.upgraded)
        try bench.addDevice("beta")
        try bench.addDevice("gamma")
        let events = bench["beta"].sync.events()

        // Alpha (v2) writes notes with a priority and edits gamma's note; gamma and beta (v1) write too.
        let shared = try bench.addNote("gamma", "gamma's")
        try bench.deliverEverything()
        try bench.importOn("alpha")
        try bench.addNote("alpha", "urgent", extra: ["priority": .integer(1)])
        try bench.update("alpha", shared, ["priority": .integer(3), "title": .string("gamma's, prioritised")])
        try bench.addNote("gamma", "gamma's second")
        try bench.addNote("beta", "beta's")
        try bench.deliverEverything()

        // Beta keeps alpha's logs and goes on with gamma's.
        let first = try bench.importOn("beta")
        #expect(first.gated == 2)
        #expect(first.logs == 2)
        #expect(try bench.titles("beta") == ["beta's", "gamma's", "gamma's second"])
        let second = try bench.importOn("beta")
        #expect(second.gated == 2 && second.logs == 0, "kept logs are still kept, and not applied")
        #expect(bench["beta"].log.newerSchema.map { "\($0.device)@\($0.version)" } == ["alpha@2", "alpha@2"])

        // Gamma's v1 logs keep flowing past the gate; alpha (v2) applies v1 logs.
        try bench.addNote("gamma", "gamma's third")
        try bench.deliverEverything()
        let third = try bench.importOn("beta")
        #expect(third.logs == 1 && third.gated == 2)
        #expect(try bench.importOn("alpha").logs == 3)

        bench["beta"].sync.stop()
        let seen = await Self.collect(events)
        #expect(Self.newerSchema(seen) == ["alpha@2", "alpha@2", "alpha@2"], "one report per import")
        #expect(!seen.contains { if case .corruptLog = $0 { true } else { false } })

        // The upgrade: beta's app now has version 2; its store migrates and the kept logs apply.
        try bench.restart("beta", schema: Self.upgraded)
        #expect(try bench["beta"].store.metadata().schemaVersion == 2)
        let upgraded = try bench.importOn("beta")
        #expect(upgraded.logs == 2 && upgraded.gated == 0)
        #expect(bench["beta"].log.newerSchema.isEmpty)
        #expect(try bench.contents("beta") == bench.contents("alpha"))
        #expect(try bench["beta"].store.records(with: [shared]).first?["priority"] == .integer(3))

        // Gamma, still on version 1, keeps them all, and now beta's too, which are version 2.
        try bench.update("beta", shared, ["priority": .integer(4)])
        try bench.deliverEverything()
        let gamma = try bench.importOn("gamma")
        #expect(gamma.gated == 3)
        #expect(Set(bench["gamma"].log.newerSchema.map(\.device)) == ["alpha", "beta"])
        #expect(try bench.titles("gamma") == ["beta's", "gamma's", "gamma's second", "gamma's third"])

        // Gamma upgrades too: three devices, one state.
        try bench.restart("gamma", schema: Self.upgraded)
        #expect(try bench.importOn("gamma").logs == 3)
        try bench.importOn("alpha")
        #expect(try bench.contents("gamma") == bench.contents("alpha"))
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }

    @Test("A log in a newer file format is kept, reported once, and holds back only its own device's later logs")
    func newerLogFormatIsKept() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        try bench.addDevice("gamma")
        for title in ["one", "two", "three"] { try bench.addNote("alpha", title) }
        try bench.addNote("gamma", "gamma's")
        try bench.deliver("alpha", [1, 3], to: "beta")
        try bench.deliver("gamma", [1], to: "beta")
        // Log 2 as a later Concord would write it: a newer format version, intact.
        var future = [UInt8](try bench.logBytes("alpha", 2))
        future[13] = UInt8(LogFile.newestReadableVersion + 1)
        try bench.place(
            LogFileTests.resealed(future),
            name: ContainerLayout.logFileName(sequence: 2),
            author: "alpha",
            in: "beta"
        )

        let report = try bench.importOn("beta")
        #expect(report.logs == 2, "alpha's 1 and gamma's 1; alpha's 3 comes after the unreadable 2")
        #expect(try bench.titles("beta") == ["gamma's", "one"])
        for _ in 0..<3 { #expect(try bench.importOn("beta", after: 600_000).logs == 0) }
        let reported = bench["beta"].log.corrupt
        #expect(reported.map(\.code) == [.unsupportedLogVersion], "reported once, as needing an upgrade")
        #expect(reported.first?.url?.lastPathComponent == ContainerLayout.logFileName(sequence: 2))

        // Kept, not marked applied: once it can be read (here: the engine brings the version this
        // Concord reads), it is applied, and the log that waited for it.
        try bench.deliver("alpha", [2], to: "beta")
        #expect(try bench.importOn("beta").logs == 2)
        try bench.deliverEverything()
        try bench.importOn("alpha")
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }

    @Test("A store upgraded while newer logs are half-arrived applies them once they are whole")
    func gatedAndPartialLogs() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha", schema: Self.upgraded)
        try bench.addDevice("beta")
        try bench.addNote("alpha", "one", extra: ["priority": .integer(2)])
        try bench.addNote("alpha", "two")
        try bench.deliver("alpha", [1], to: "beta")
        let bytes = try bench.logBytes("alpha", 2)
        try bench.place(
            bytes.prefix(bytes.count / 2),
            name: ContainerLayout.logFileName(sequence: 2),
            author: "alpha",
            in: "beta",
            atomically: false
        )
        let report = try bench.importOn("beta")
        #expect(report.gated == 1 && report.waiting == 1 && report.logs == 0)

        try bench.restart("beta", schema: Self.upgraded)
        let afterUpgrade = try bench.importOn("beta")
        #expect(afterUpgrade.logs == 1 && afterUpgrade.waiting == 1)
        try bench.deliver("alpha", [2], to: "beta")
        #expect(try bench.importOn("beta").logs == 1)
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }
}
