import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// `concord doctor` on containers built with FolderSync's real API and then damaged the ways
/// users meet: each problem is found, named with its file, and comes with what to do.
@Suite("concord doctor")
struct DoctorTests {
    /// alpha (SQLite) and beta (JSON) with a few notes each, everything applied everywhere.
    static func healthy() throws -> DoctorBench {
        let bench = DoctorBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta", type: "json")
        for title in ["one", "two", "three"] { try bench.addNote("alpha", title) }
        try bench.importOn("beta")
        try bench.addNote("beta", "four")
        try bench.importOn("alpha")
        for name in ["alpha", "beta"] { try bench[name].sync.publishAcknowledgement() }
        return bench
    }

    @Test("a FIFO named like a log is reported, never opened (reading it would wait forever)")
    func fifoNamedLikeALog() throws {
        let bench = try Self.healthy()
        let fifo = bench.logURL("alpha", 9)
        let mkfifo = try Subprocess("/usr/bin/mkfifo", [fifo.path])
        #expect(mkfifo.wait(timeout: .seconds(20)) == .exited(0))
        try bench.age(fifo, by: 60)
        let diagnosis = try bench.diagnose()
        let found = try #require(diagnosis.findings("log.damaged").first { $0.path == fifo.path })
        #expect(found.message.contains("not a regular file"))
        let run = try ConcordRun.run(["log", fifo.path], timeout: .seconds(30))
        #expect(run.status == 1 && run.errors.contains("not a regular file"), "\(run.errors)")
    }

    @Test("a healthy container: every device, its logs and registration, the local store's positions; nothing to do")
    func healthyContainer() throws {
        let bench = try Self.healthy()
        let diagnosis = try bench.diagnose(local: "beta")
        #expect(diagnosis.findings.filter { $0.severity > .info }.isEmpty, "\(diagnosis.findings)")
        let store = try #require(diagnosis.stores.first)
        #expect(store.sentinel == "device files")
        #expect(store.registrations.map(\.device) == ["alpha", "beta"])
        #expect(store.containerIDs.count == 1)
        let alpha = try #require(diagnosis.device("alpha"))
        #expect(alpha.logCount >= 3 && alpha.gaps.isEmpty && alpha.damaged.isEmpty)
        #expect(alpha.acknowledgement?.device == "alpha")
        let local = try #require(store.local)
        #expect(local.device == "beta")
        #expect(local.applied["alpha"] == alpha.lastLog)
        #expect(local.pending.isEmpty)
    }

    @Test("a missing log is a gap: named, with the logs waiting behind it, and what to do")
    func gap() throws {
        let bench = try Self.healthy()
        try bench.addNote("alpha", "five")
        try bench.addNote("alpha", "six")
        let last = try #require(try bench.layout.logSequences(device: "alpha").last)
        try FileManager.default.removeItem(at: bench.logURL("alpha", last - 1))
        try bench.importOn("beta")
        let diagnosis = try bench.diagnose(local: "beta")
        #expect(diagnosis.device("alpha")?.gaps == [last - 1])
        let gap = try #require(diagnosis.findings("log.gap").first)
        #expect(gap.severity == .problem)
        #expect(gap.path == bench.logURL("alpha", last - 1).path)
        #expect(gap.advice.contains("alpha"))
        #expect(diagnosis.stores.first?.local?.pending["alpha"] == [last], "the log after the gap waits")
        #expect(diagnosis.severity == .problem)
    }

    @Test(
        "a damaged log is named with the decoder's error; `concord log` refuses it with a typed error and a non-zero status"
    )
    func damagedLog() throws {
        let bench = try Self.healthy()
        try bench.addNote("alpha", "not applied by beta yet")
        let url = bench.logURL("alpha", try #require(try bench.layout.logSequences(device: "alpha").last))
        var bytes = try Data(contentsOf: url)
        bytes[bytes.count - 3] ^= 0x20
        try bytes.write(to: url)
        try bench.age(url, by: 60)
        let diagnosis = try bench.diagnose()
        let damaged = try #require(diagnosis.findings("log.damaged").first)
        #expect(damaged.severity == .problem && damaged.path == url.path)
        #expect(damaged.message.contains("checksum"))
        #expect(diagnosis.device("alpha")?.gaps == [], "a damaged log is not also a gap")

        let run = try ConcordRun.run(["log", url.path])
        #expect(run.status == 1)
        #expect(run.errors.contains("corruptLog") && run.errors.contains(url.path), "\(run.errors)")
        #expect(run.output.isEmpty)

        let fresh = try ConcordRun.run(["log", bench.logURL("alpha", 1).path, "--json"])
        #expect(fresh.status == 0, "\(fresh.errors)")
        let json = try fresh.json()
        #expect(json["device"] as? String == "alpha" && json["sequence"] as? Int == 1)
        #expect((json["changes"] as? [Any])?.isEmpty == false)
        let text = try ConcordRun.run(["log", bench.logURL("alpha", 1).path])
        #expect(text.lines.contains("device: alpha") && text.lines.contains("sequence: 1"), "\(text.output)")
    }

    @Test("`concord log` shows the creation each change of a format 6 log means")
    func logShowsIncarnations() throws {
        let bench = try Self.healthy()
        let note = try bench.addNote("alpha", "soon deleted")
        try bench.delete("alpha", note)
        let url = bench.logURL("alpha", try #require(try bench.layout.logSequences(device: "alpha").last))
        let text = try ConcordRun.run(["log", url.path])
        #expect(text.status == 0, "\(text.errors)")
        #expect(text.lines.contains("format: 6") && text.lines.contains("incarnations:"), "\(text.output)")
        #expect(text.lines.contains { $0.hasPrefix("  \(note) created @") }, "\(text.output)")
        let json = try ConcordRun.run(["log", url.path, "--json"]).json()
        #expect((json["incarnations"] as? [String: Any])?["\(note)"] != nil, "\(json)")
    }

    @Test(
        "Concord's temporary files: a stale one is left by an interrupted write (warning), a fresh one is a write in progress"
    )
    func temporaryFiles() throws {
        let bench = try Self.healthy()
        let folder = bench.layout.deviceFolder("alpha")
        let stale = folder.appendingPathComponent(".0000000000000009.cclog.A1B2C3.concord-tmp")
        let fresh = folder.appendingPathComponent(".0000000000000010.cclog.D4E5F6.concord-tmp")
        try Data("partial".utf8).write(to: stale)
        try Data("partial".utf8).write(to: fresh)
        try bench.age(stale, by: 7200)
        let diagnosis = try bench.diagnose()
        let found = diagnosis.findings("file.temporary")
        #expect(found.first { $0.path == stale.path }?.severity == .warning)
        #expect(found.first { $0.path == fresh.path }?.severity == .info)
        #expect(diagnosis.severity == .warning)

        let run = try ConcordRun.run(["doctor", bench.container.path, "--json"])
        #expect(run.status == 1, "warnings exit 1: \(run.errors)")
        let json = try run.json()
        #expect(json["exitStatus"] as? Int == 1 && json["severity"] as? String == "warning")
    }

    @Test(
        "conflict copies: one holding the same log is harmless, one holding another log means two installations share a device id"
    )
    func conflictCopies() throws {
        let bench = try Self.healthy()
        let folder = bench.layout.deviceFolder("alpha")
        let same = folder.appendingPathComponent("0000000000000001.sync-conflict-20261124-101010-ABCDEFG.cclog")
        try FileManager.default.copyItem(at: bench.logURL("alpha", 1), to: same)
        let other = LogFile(
            device: "alpha",
            sequence: 2,
            schemaVersion: 1,
            created: Date(),
            payload: try SyncPayload(changes: []).encoded()
        )
        let different = folder.appendingPathComponent("0000000000000002 (beta's conflicted copy 2026-11-24).cclog")
        try other.encoded().write(to: different)
        let diagnosis = try bench.diagnose()
        let copies = diagnosis.findings("log.conflictCopy")
        #expect(copies.first { $0.path == same.path }?.severity == .info)
        let clash = try #require(copies.first { $0.path == different.path })
        #expect(clash.severity == .problem && clash.advice.contains("device id"))
    }

    @Test(
        "a device on a newer schema: a problem for a local store on the older one; mixed versions without a local store"
    )
    func newerSchema() throws {
        let bench = DoctorBench()
        try bench.addDevice("alpha")
        let newer = try Schema(version: 2, entities: SyncSimulator.schema.entities)
        try bench.addDevice("beta", type: "json", schema: newer)
        try bench.addNote("alpha", "one")
        try bench.addNote("beta", "two")
        let diagnosis = try bench.diagnose(local: "alpha")
        let finding = try #require(diagnosis.findings("schema.newer").first)
        #expect(finding.severity == .problem && finding.device == "beta")
        #expect(diagnosis.device("beta")?.schemaVersions == [2])
        #expect(try bench.diagnose().findings("schema.mixed").first?.severity == .warning)
    }

    @Test("a healing request (written by sync itself) is shown with the device asked and what to do")
    func healingRequest() throws {
        let bench = DoctorBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta", type: "json")
        for title in ["one", "two", "three"] { try bench.addNote("alpha", title) }
        try FileManager.default.removeItem(at: bench.logURL("alpha", 2))
        bench["beta"].sync.missingLogGracePeriod = .zero
        try bench.importOn("beta")
        let diagnosis = try bench.diagnose(local: "beta")
        #expect(diagnosis.device("beta")?.requests == ["alpha": [2]])
        let request = try #require(diagnosis.findings("healing.request").first)
        #expect(request.severity == .warning && request.device == "beta")
        #expect(request.advice.contains("Run the app on alpha"))
    }

    @Test("clock skew: a log stamped before a log it depends on proves its device's clock behind")
    func clockSkew() throws {
        let bench = DoctorBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta", type: "json")
        try bench.addNote("alpha", "one")
        try bench.importOn("beta")
        try bench.addNote("beta", "two")
        // beta's clock was five minutes behind when it wrote its log (its header says so).
        let url = bench.logURL("beta", 1)
        var log = try LogFile.decode(try Data(contentsOf: url), url: url)
        #expect(try DecodedLogFile.read(url).dependencies["alpha"] == 1)
        log.created = log.created.addingTimeInterval(-300)
        try log.encoded().write(to: url)
        let diagnosis = try bench.diagnose()
        let skew = try #require(diagnosis.stores.first?.clockSkews.first { $0.behind == "beta" && $0.ahead == "alpha" })
        #expect(skew.seconds >= 299 && skew.seconds < 400)
        let finding = try #require(diagnosis.findings("clock.skew").first { $0.device == "beta" })
        #expect(finding.severity == .warning && finding.advice.contains("NTP"))
    }

    @Test("a missing sentinel, a damaged registration, a missing container identity")
    func sentinelAndIdentity() throws {
        let bench = try Self.healthy()
        let sentinels = bench.layout.storeFolder.appendingPathComponent("sentinels")
        try Data("not a property list".utf8).write(to: sentinels.appendingPathComponent("alpha.plist"))
        try FileManager.default.removeItem(at: bench.layout.storeFolder.appendingPathComponent("container.plist"))
        var diagnosis = try bench.diagnose()
        #expect(
            diagnosis.findings("sentinel.damaged").first?.path == sentinels.appendingPathComponent("alpha.plist").path
        )
        #expect(diagnosis.findings("identity.missing").first?.severity == .warning)

        try FileManager.default.removeItem(at: sentinels)
        diagnosis = try bench.diagnose()
        let missing = try #require(diagnosis.findings("sentinel.missing").first)
        #expect(missing.severity == .problem && missing.advice.contains("reset"))
    }

    @Test("a device-list sentinel: its registrations, and a sync engine's conflict copy of the list as harmless")
    func deviceListSentinel() throws {
        let bench = DoctorBench()
        try bench.addDevice("alpha", deviceList: true)
        try bench.addDevice("beta", type: "json", deviceList: true)
        try bench.addNote("alpha", "one")
        let folder = bench.layout.storeFolder
        let copy = folder.appendingPathComponent("devices.sync-conflict-20261124-101010-ABCDEFG.plist")
        try FileManager.default.copyItem(at: folder.appendingPathComponent("devices.plist"), to: copy)
        let diagnosis = try bench.diagnose()
        #expect(diagnosis.stores.first?.sentinel == "device list")
        #expect(diagnosis.stores.first?.registrations.map(\.device) == ["alpha", "beta"])
        let found = try #require(diagnosis.findings("sentinel.conflictCopy").first)
        #expect(found.severity == .info && found.path == copy.path)
    }

    @Test("the binary: exit status by severity, JSON for scripts, the local store read from a copy")
    func binary() throws {
        let bench = try Self.healthy()
        let healthy = try ConcordRun.run([
            "doctor", bench.container.path, "--store", "notes", "--data", bench["beta"].url.path, "--json",
        ])
        #expect(healthy.status == 0, "\(healthy.errors) \(healthy.output)")
        let json = try healthy.json()
        #expect((json["localStore"] as? [String: Any])?["type"] as? String == "json")
        let stores = try #require(json["stores"] as? [[String: Any]])
        #expect(((stores.first?["local"] as? [String: Any])?["device"] as? String) == "beta")

        // A log beta has not applied (one every registered device applied is only a note).
        try bench.addNote("alpha", "five")
        try bench.addNote("alpha", "six")
        let last = try #require(try bench.layout.logSequences(device: "alpha").last)
        try FileManager.default.removeItem(at: bench.logURL("alpha", last - 1))
        let text = try ConcordRun.run([
            "doctor", bench.container.path, "--data", bench["alpha"].url.deletingLastPathComponent().path,
        ])
        #expect(text.status == 2, "\(text.errors)")
        #expect(text.output.contains("PROBLEM log.gap [notes/alpha]"), "\(text.output)")
        #expect(text.output.contains("what to do:"))

        let storeFolder = try ConcordRun.run(["doctor", bench.layout.storeFolder.path])
        #expect(
            storeFolder.status == 2 && storeFolder.output.contains("Store notes"),
            "a store's folder for the container"
        )
        #expect(storeFolder.errors.contains("is the folder of the store notes"))

        let missing = try ConcordRun.run(["doctor", bench.directory("nowhere").path])
        #expect(missing.status == 2 && missing.output.contains("container.missing"))
    }
}
