import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// A device's logs that it compacted away exist only in the baselines that cover them. When every
/// such baseline leaves the container (a replacement by a device that never saw it removes it
/// from every copy, or a sync engine carries someone's deletion), the device still holds what
/// they made: asked for one of them, it publishes that again (seed 1624).
@Suite("Deleted baselines")
struct DeletedBaselineTests {
    /// Removes every baseline of `author`'s folder from `viewer`'s copy of the container.
    static func removeBaselines(_ bench: SyncTestBench, of author: String, in viewer: String) throws {
        let folder = bench.logURL(author, 1, in: viewer).deletingLastPathComponent()
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name.hasSuffix(".ccbase") {
            try FileManager.default.removeItem(at: folder.appendingPathComponent(name))
        }
    }

    /// Bounded rounds of `asker`'s requests reaching `author` and answered, the engine carrying
    /// every file `author` has.
    static func answerRequests(_ bench: SyncTestBench, of asker: String, by author: String) throws {
        for _ in 0..<4 {
            try bench.deliverRequests(of: asker)
            try bench.importOn(author)
            try bench.deliverEverything()
            try BaselineCatchUpTests.deliverBaselines(bench, of: author, to: asker)
            try bench.importOn(asker)
            try bench.importOn(asker)
        }
    }

    @Test(
        "A device whose compacted logs only its own baseline held, that baseline deleted from the container, answers a request for one of them: the device asking gets every record"
    )
    func compactedLogsOfADeletedBaselineAreAnswered() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        bench["beta"].sync.missingLogGracePeriod = .zero
        let first = try bench.addNote("alpha", "one")
        try bench.addNote("alpha", "two")
        // Alpha knows of nobody yet (beta's folder has not reached it): it folds its logs into its
        // baseline, removes them and releases them from its outbox.
        try bench["alpha"].sync.publishAcknowledgement()
        #expect(try bench["alpha"].sync.compact() == 2)
        // The baseline leaves the container before beta got it (a device that never saw it
        // replaced the container, and the engine removed it from every copy).
        try Self.removeBaselines(bench, of: "alpha", in: "alpha")
        // Alpha goes on; its next log follows the ones compacted away.
        try bench.update("alpha", first, ["rank": .integer(3)])
        try bench.addNote("alpha", "four")
        try bench.deliver("alpha", [3, 4], to: "beta")
        for _ in 0..<2 { try bench.importOn("beta") }
        #expect(try bench.requests(of: "beta")?.logs == ["alpha": [1, 2]])
        try Self.answerRequests(bench, of: "beta", by: "alpha")
        #expect(try bench.titles("beta") == ["four", "one", "two"])
        #expect(try bench.contents("beta") == bench.contents("alpha"))
        #expect(try bench.requests(of: "beta") == nil, "nothing is asked for any more")
    }

    @Test(
        "A device that removed its logs because another device's baseline covered them, that baseline deleted from the container, answers a new device's request for one of them: the new device gets every record"
    )
    func logsFoldedInAnotherDevicesDeletedBaselineAreAnswered() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta", "gamma"] { try bench.addDevice(name) }
        bench["gamma"].sync.missingLogGracePeriod = .zero
        try bench.addNote("beta", "one")
        try bench.deliver("beta", [1], to: "alpha")
        try bench.importOn("alpha")
        // Alpha folds beta's log into its baseline, and acknowledges it.
        try bench["alpha"].sync.publishAcknowledgement()
        try bench["alpha"].sync.compact()
        try BaselineCatchUpTests.deliverBaselines(bench, of: "alpha", to: "beta")
        let acknowledgement = bench.logURL("alpha", 1, in: "alpha").deletingLastPathComponent()
            .appendingPathComponent("applied.json")
        try bench.place(Data(contentsOf: acknowledgement), name: "applied.json", author: "alpha", in: "beta")
        // Beta, knowing only alpha, removes its log: alpha applied it and alpha's baseline covers
        // it (beta keeps no baseline of its own: alpha's covers all it has).
        try bench["beta"].sync.publishAcknowledgement()
        #expect(try bench["beta"].sync.compact() == 1)
        // Alpha's baseline leaves the container before gamma got it.
        try Self.removeBaselines(bench, of: "alpha", in: "beta")
        try bench.addNote("beta", "two")
        try bench.deliver("beta", [2], to: "gamma")
        for _ in 0..<2 { try bench.importOn("gamma") }
        #expect(try bench.requests(of: "gamma")?.logs == ["beta": [1]])
        try Self.answerRequests(bench, of: "gamma", by: "beta")
        #expect(try bench.titles("gamma") == ["one", "two"])
        #expect(try bench.contents("gamma") == bench.contents("beta"))
        #expect(try bench.requests(of: "gamma") == nil, "nothing is asked for any more")
    }
}
