import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import Testing

/// The doctor grades by need: a damaged or missing log that no registered device still needs is
/// a note, one a device needs stays a problem whose advice, followed, clears it; a misnamed
/// conflict copy is named as such; temporaries in `sentinels/` and the data folder are listed.
extension DoctorTests {
    /// Damages `url` (one flipped byte near its end: a checksum failure), written a minute ago.
    static func damage(_ url: URL, in bench: DoctorBench) throws {
        var bytes = try Data(contentsOf: url)
        bytes[bytes.count - 3] ^= 0x20
        try bytes.write(to: url)
        try bench.age(url, by: 60)
    }

    @Test("a damaged or missing log every registered device applied is a note (covered: safe to delete), exit 0")
    func coveredLogIsANote() throws {
        let bench = try Self.healthy()
        let damaged = bench.logURL("alpha", 2)
        try Self.damage(damaged, in: bench)
        let missing = bench.logURL("alpha", 1)
        try FileManager.default.removeItem(at: missing)
        let diagnosis = try bench.diagnose()
        let note = try #require(diagnosis.findings("log.damaged").first { $0.path == damaged.path })
        #expect(note.severity == .info, "\(note)")
        #expect(note.message.contains("no registered device needs it") && note.advice.contains("safe to delete"))
        let gap = diagnosis.findings("log.gap").first { $0.path == missing.path }
        #expect(gap == nil || gap?.severity == .info, "\(String(describing: gap))")
        #expect(diagnosis.severity == .info, "\(diagnosis.findings)")
        let run = try ConcordRun.run(["doctor", bench.container.path])
        #expect(run.status == 0, "nothing to do: \(run.output) \(run.errors)")
    }

    @Test(
        "a damaged log a device still needs stays a problem; its advice followed (both devices sync), the finding clears"
    )
    func neededLogAdviceWorks() throws {
        let bench = try Self.healthy()
        try bench.addNote("alpha", "beta has not applied this")
        try bench.addNote("alpha", "nor this, which waits behind it")
        let sequence = try #require(try bench.layout.logSequences(device: "alpha").last) - 1
        let url = bench.logURL("alpha", sequence)
        try Self.damage(url, in: bench)
        let before = try #require(try bench.diagnose().findings("log.damaged").first { $0.path == url.path })
        #expect(before.severity == .problem && before.advice.contains("alpha"), "\(before)")

        // The advice: run the app on alpha with sync on; beta asks for the log, alpha publishes it again.
        try bench.importOn("beta")
        try bench.importOn("alpha")
        try bench.importOn("beta")
        let after = try bench.diagnose()
        #expect(after.findings("log.damaged").isEmpty, "\(after.findings)")
        #expect(after.findings.filter { $0.severity == .problem }.isEmpty, "\(after.findings)")
        #expect(try bench["beta"].store.count(for: FetchRequest(entity: "Note")) == 6)
    }

    @Test("a conflict copy named after one log that holds another is named misnamed, not blamed on two installations")
    func misnamedConflictCopy() throws {
        let bench = try Self.healthy()
        let folder = bench.layout.deviceFolder("alpha")
        let copy = folder.appendingPathComponent("0000000000000002 (beta's conflicted copy 2026-11-24).cclog")
        try FileManager.default.copyItem(at: bench.logURL("alpha", 1), to: copy)
        let finding = try #require(try bench.diagnose().findings("log.conflictCopy").first { $0.path == copy.path })
        #expect(finding.severity == .warning, "\(finding)")
        #expect(finding.message.contains("misnamed: it holds alpha's log 1"), "\(finding.message)")
        #expect(!finding.advice.contains("installations"), "\(finding.advice)")
    }

    @Test("temporaries in sentinels/ and in the data folder are listed: a stale one of Concord's is a warning")
    func temporariesInSentinelsAndDataFolder() throws {
        let bench = try Self.healthy()
        let sentinels = bench.layout.storeFolder.appendingPathComponent("sentinels")
        let stale = sentinels.appendingPathComponent(".alpha.plist.A1B2C3.concord-tmp")
        try Data("partial".utf8).write(to: stale)
        try bench.age(stale, by: 7200)
        let found = try #require(try bench.diagnose().findings("file.temporary").first { $0.path == stale.path })
        #expect(found.severity == .warning && found.message.contains("sentinel folder"), "\(found)")

        let data = bench["alpha"].url.deletingLastPathComponent()
        let leftover = data.appendingPathComponent(".notes.sqlite.D4E5F6.concord-tmp")
        try Data("partial".utf8).write(to: leftover)
        try bench.age(leftover, by: 7200)
        let run = try ConcordRun.run(["doctor", bench.container.path, "--data", data.path, "--json"])
        let findings = try #require(try run.json()["findings"] as? [[String: Any]], "\(run.output) \(run.errors)")
        let listed = findings.first { $0["code"] as? String == "data.temporary" }
        #expect(listed?["path"] as? String == leftover.path, "\(findings)")
        #expect(listed?["severity"] as? String == "warning")
        #expect(run.status == 1, "warnings exit 1: \(run.errors)")
    }
}
