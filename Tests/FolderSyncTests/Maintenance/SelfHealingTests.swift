import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// Nothing stays diverged because one file broke: a device that cannot read a log asks for it in
/// its own folder, and the log's device publishes it again from its store.
@Suite("Self-healing")
struct SelfHealingTests {
    @Test(
        "A damaged log is reported at once by a process that scans once, asked for, published again by its device, and applied"
    )
    func damagedLogIsHealed() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        let first = try bench.addNote("alpha", "one")
        try bench.addNote("alpha", "two")  // 2: a byte flipped, everywhere the engine carried it
        try bench.update("alpha", first, ["rank": .integer(4)])  // 3
        var flipped = try bench.logBytes("alpha", 2)
        flipped[flipped.count - 3] ^= 0x20
        try bench.deliver("alpha", [1, 3], to: "beta")
        for viewer in ["alpha", "beta"] {
            try bench.place(flipped, name: ContainerLayout.logFileName(sequence: 2), author: "alpha", in: viewer)
        }
        // Old enough that it is not arriving any more: a fresh process judges it at its first scan.
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(-3600)],
            ofItemAtPath: bench.logURL("alpha", 2, in: "beta").path
        )
        try bench.restart("beta")
        let report = try bench.importOn("beta")
        #expect(report.logs == 1, "log 1; log 3 waits behind the damaged 2: \(report)")
        #expect(bench["beta"].log.corrupt.map(\.code) == [.corruptLog], "reported at the first scan")
        #expect(bench["beta"].log.missing.map(\.lastPathComponent) == [ContainerLayout.logFileName(sequence: 2)])
        #expect(try bench.requests(of: "beta")?.logs == ["alpha": [2]])

        // The request reaches alpha, whose next pass publishes log 2 again from its store.
        try bench.deliverRequests(of: "beta")
        try bench.importOn("alpha")
        #expect(bench["alpha"].log.republished.map(\.lastPathComponent) == [ContainerLayout.logFileName(sequence: 2)])
        #expect(try bench.logBytes("alpha", 2) != flipped)
        try bench.deliver("alpha", [2], to: "beta")
        #expect(try bench.importOn("beta").logs == 2)
        #expect(try bench.requests(of: "beta") == nil, "the request is withdrawn once applied")
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }

    @Test(
        "A restored device that caught up on its own log from a baseline, asked for that log once the baseline is gone, answers with the writes its store holds: the others get what it saved, not an empty log"
    )
    func restoredFromBaselineAnswersWithItsWrites() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        bench["beta"].sync.missingLogGracePeriod = .zero
        let gone = try bench.addNote("alpha", "gone")
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        try bench.edit("alpha") { context in try context.delete(gone) }
        try bench.addNote("alpha", "one")
        // alpha knows of nobody yet: it folds its logs into a baseline and removes them.
        try bench["alpha"].sync.publishAcknowledgement()
        #expect(try bench["alpha"].sync.compact() == 3)
        // alpha's store is lost; it rejoins under its name and catches up from the baseline.
        try FileManager.default.removeItem(at: bench["alpha"].storeURL)
        try bench.restart("alpha")
        let join = try bench["alpha"].sync.enable(live: false).join
        #expect(join.map { if case .restoringDevice = $0.situation { true } else { false } } == true)
        #expect(try bench.titles("alpha") == ["one"])
        // The baseline leaves the container (a sync engine carried its removal) before beta got
        // it; beta gets alpha's next log, which waits for logs 2 and 3.
        let folder = bench.logURL("alpha", 1, in: "alpha").deletingLastPathComponent()
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name.hasSuffix(".ccbase") {
            try FileManager.default.removeItem(at: folder.appendingPathComponent(name))
        }
        try bench.addNote("alpha", "two")
        try bench.deliver("alpha", [3 + FolderSync.restoreLeap + 1], to: "beta")
        // beta asks for both at once (the new log names 3 as the one it follows). alpha cannot
        // publish logs 2 and 3 as they were: it answers with empty logs in their place, and with
        // what its store holds of its writes (the deletion included) in a new log.
        for _ in 0..<2 { try bench.importOn("beta") }
        #expect(try bench.requests(of: "beta")?.logs == ["alpha": [2, 3]])
        try bench.deliverRequests(of: "beta")
        try bench.importOn("alpha")
        try bench.deliver("alpha", [2, 3], to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["gone", "two"], "the empty logs apply; the writes wait for their log")
        try bench.deliverEverything()
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one", "two"])
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }

    @Test(
        "A log its device lost with its store, and published empty when asked, turns up after all (from a third device, as a conflict copy or under its name): every device applies it",
        arguments: [true, false]
    )
    func originalTurnsUpAfterItsStandIn(asConflictCopy: Bool) throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta", "gamma"] { try bench.addDevice(name) }
        bench["beta"].sync.missingLogGracePeriod = .zero
        for title in ["one", "two", "three"] { try bench.addNote("alpha", title) }
        let original = try bench.logBytes("alpha", 2)
        // gamma got all three logs and goes offline; beta got 1 and 3. Log 2 was deleted from
        // alpha's folder (a user, a tool), then alpha lost its store and rejoined under its name.
        try bench.deliver("alpha", [1, 2, 3], to: "gamma")
        try bench.importOn("gamma")
        try bench.deliver("alpha", [1, 3], to: "beta")
        try FileManager.default.removeItem(at: bench.logURL("alpha", 2, in: "alpha"))
        try FileManager.default.removeItem(at: bench["alpha"].storeURL)
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        // beta asks for log 2; alpha cannot publish it as it was, and publishes it empty.
        for _ in 0..<2 { try bench.importOn("beta") }
        #expect(try bench.requests(of: "beta")?.logs == ["alpha": [2]])
        try bench.deliverRequests(of: "beta")
        try bench.importOn("alpha")
        #expect(bench["alpha"].log.republished.map(\.lastPathComponent) == [ContainerLayout.logFileName(sequence: 2)])
        let standIn = try bench.logBytes("alpha", 2)
        #expect(standIn != original)
        try bench.importOn("alpha")
        let layout = ContainerLayout(container: bench["alpha"].view, storeName: SyncTestBench.storeName)
        try bench.deliver("alpha", try layout.logSequences(device: "alpha"), to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one", "three"])
        #expect(try bench.titles("alpha") == ["one", "three"])

        // gamma comes back: its copy of the original meets the stand-in. An engine that keeps
        // both makes one a conflict copy; one that does not overwrites.
        let stem = ContainerLayout.logFileName(sequence: 2).dropLast(".cclog".count)
        let copyName = "\(stem).sync-conflict-20261128-101010-GAMMA01.cclog"
        for viewer in ["alpha", "beta"] {
            if asConflictCopy {
                try bench.place(original, name: copyName, author: "alpha", in: viewer)
            } else {
                try bench.place(original, name: ContainerLayout.logFileName(sequence: 2), author: "alpha", in: viewer)
            }
        }
        if asConflictCopy {
            try bench.place(standIn, name: copyName, author: "alpha", in: "gamma")
        } else {
            try bench.place(standIn, name: ContainerLayout.logFileName(sequence: 2), author: "alpha", in: "gamma")
        }
        for name in ["alpha", "beta"] {
            #expect(try bench.importOn(name).logs == 1, "\(name) applies the original")
            #expect(try bench.titles(name) == ["one", "three", "two"])
            #expect(try bench.importOn(name).logs == 0, "once")
        }
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        #expect(try bench.contents("beta") == bench.contents("alpha"))
        #expect(try bench.contents("gamma") == bench.contents("alpha"))
        #expect(bench["beta"].log.corrupt.isEmpty, "no conflicting log reported: \(bench["beta"].log.corrupt)")
    }

    @Test(
        "Two different logs under one name (two installations sharing a device id): each device applies both, whichever it met first under the name, and reports the clash once"
    )
    func twoLogsUnderOneNameAreBothApplied() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta", "gamma", "twin"] { try bench.addDevice(name) }
        for title in ["one", "two"] { try bench.addNote("alpha", title) }
        // Another installation under alpha's id wrote its own log 2 (made here by "twin").
        try bench.addNote("twin", "twin's")
        let twinLog = try LogFile.decode(try bench.logBytes("twin", 1), url: bench.logURL("twin", 1, in: "twin"))
        let other = LogFile(
            device: "alpha",
            sequence: 2,
            schemaVersion: twinLog.schemaVersion,
            created: twinLog.created,
            payload: twinLog.payload,
            container: twinLog.container
        ).encoded()
        let name = ContainerLayout.logFileName(sequence: 2)
        let copyName = "\(name.dropLast(".cclog".count)).sync-conflict-20261128-101010-TWIN001.cclog"
        try bench.deliver("alpha", [1, 2], to: "beta")
        try bench.deliver("alpha", [1], to: "gamma")
        try bench.place(other, name: name, author: "alpha", in: "gamma")
        for viewer in ["beta", "gamma"] { #expect(try bench.importOn(viewer).logs == 2) }
        #expect(try bench.titles("beta") == ["one", "two"])
        #expect(try bench.titles("gamma") == ["one", "twin's"])
        // The engine meets the two and keeps both: each side gets the other as a conflict copy.
        try bench.place(other, name: copyName, author: "alpha", in: "beta")
        try bench.place(try bench.logBytes("alpha", 2), name: copyName, author: "alpha", in: "gamma")
        for viewer in ["beta", "gamma"] {
            #expect(try bench.importOn(viewer).logs == 1, "\(viewer) applies the other one")
            #expect(try bench.titles(viewer) == ["one", "twin's", "two"])
            #expect(bench[viewer].log.corrupt.map(\.code) == [.conflictingLog])
            // Once: the version applied first is noted the next time, the clash not reported again.
            for _ in 0..<3 { #expect(try bench.importOn(viewer).logs <= 1) }
            #expect(try bench.importOn(viewer).logs == 0)
            #expect(bench[viewer].log.corrupt.count == 1)
        }
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }

    @Test(
        "A device restored on a new machine whose container copy is still filling (its old logs partly there, or none of them) numbers new logs past a leap: its old logs that arrive afterwards are applied, on every device, its own included",
        arguments: [0, 2]
    )
    func newMachineLeapsPastItsOldLogs(visible: Int) throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        for title in ["one", "two", "three", "four"] { try bench.addNote("alpha", title) }
        try bench.deliver("alpha", [1, 2, 3, 4], to: "beta")
        try bench.importOn("beta")
        try bench["beta"].sync.publishAcknowledgement()
        let old = try (1...4).map { try bench.logBytes("alpha", UInt64($0)) }
        // A new machine: no store, and a container copy that the engine has filled with beta's
        // folder (its acknowledgement says it applied alpha's logs through 4) and `visible` of
        // alpha's logs so far.
        let devices = bench.logURL("alpha", 1, in: "alpha").deletingLastPathComponent().deletingLastPathComponent()
        try FileManager.default.removeItem(at: devices)
        try FileManager.default.removeItem(at: bench["alpha"].storeURL)
        try FileManager.default.createDirectory(at: devices, withIntermediateDirectories: true)
        let betaFolder = bench.logURL("beta", 1, in: "beta").deletingLastPathComponent()
        try FileManager.default.copyItem(at: betaFolder, to: devices.appendingPathComponent("beta"))
        /// alpha's old logs `range` (from 0) reach its new copy of the container.
        func arrive(_ range: Range<Int>) throws {
            for sequence in range {
                try bench.place(
                    old[sequence],
                    name: ContainerLayout.logFileName(sequence: UInt64(sequence + 1)),
                    author: "alpha",
                    in: "alpha"
                )
            }
        }
        try arrive(0..<visible)
        try bench.restart("alpha")
        let join = try #require(try bench["alpha"].sync.enable(live: false).join)
        // (beta has no data of its own: the others named are those that do.)
        #expect(join.situation == .restoringDevice(others: [], ownLogs: 4))
        #expect(try bench.titles("alpha") == ["one", "two"].prefix(visible).sorted())
        try bench.addNote("alpha", "five")
        let leapt = 4 + FolderSync.restoreLeap + 1
        #expect(FileManager.default.fileExists(atPath: bench.logURL("alpha", leapt, in: "alpha").path))
        // The old logs arrive after the new one, under their own names.
        try arrive(visible..<4)
        try bench.importOn("alpha")
        #expect(try bench.titles("alpha") == ["five", "four", "one", "three", "two"])
        // beta, which had the old ones, takes the new one past the leap.
        try bench.deliver("alpha", [leapt], to: "beta")
        #expect(try bench.importOn("beta").logs == 1)
        #expect(try bench.titles("beta") == ["five", "four", "one", "three", "two"])
        #expect(try bench.contents("beta") == bench.contents("alpha"))
        // A third device that joins now gets it all, and waits for nothing leapt over.
        try bench.addDevice("gamma")
        try bench.deliverEverything()
        try bench.importOn("gamma")
        #expect(try bench.titles("gamma") == ["five", "four", "one", "three", "two"])
        #expect(try bench.requests(of: "gamma") == nil)
    }

    @Test(
        "The first log after a restored device's leap applies even while an old log it leaps over waits for a dependency; the old one applies once that arrives"
    )
    func leapLogPassesAnOldLogThatWaits() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta", "gamma"] { try bench.addDevice(name) }
        try bench.addNote("alpha", "one")
        try bench.addNote("beta", "beta's")
        try bench.deliver("beta", [1], to: "alpha")
        try bench.importOn("alpha")
        try bench.addNote("alpha", "two")  // alpha's log 2 depends on beta's log 1
        let old = try (1...2).map { try bench.logBytes("alpha", UInt64($0)) }
        // alpha on a new machine: its copy holds its log 1 only; its numbering leaps.
        let devices = bench.logURL("alpha", 1, in: "alpha").deletingLastPathComponent().deletingLastPathComponent()
        try FileManager.default.removeItem(at: devices)
        try FileManager.default.removeItem(at: bench["alpha"].storeURL)
        try bench.place(old[0], name: ContainerLayout.logFileName(sequence: 1), author: "alpha", in: "alpha")
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        try bench.addNote("alpha", "three")
        let leapt = 1 + FolderSync.restoreLeap + 1
        // gamma gets alpha's logs 1, 2 and the one past the leap, but not beta's log 1 yet.
        try bench.deliver("alpha", [1, leapt], to: "gamma")
        try bench.place(old[1], name: ContainerLayout.logFileName(sequence: 2), author: "alpha", in: "gamma")
        #expect(try bench.importOn("gamma").logs == 2, "alpha's 1 and the log past the leap; 2 waits for beta's 1")
        #expect(try bench.titles("gamma") == ["one", "three"])
        try bench.deliver("beta", [1], to: "gamma")
        try bench.importOn("gamma")
        try bench.importOn("gamma")
        #expect(try bench.titles("gamma") == ["beta's", "one", "three", "two"])
        #expect(try bench.requests(of: "gamma") == nil, "nothing leapt over is asked for")
    }

    @Test("A log cut short for good, or deleted from the container, comes back from its device")
    func truncatedOrDeletedLogComesBack() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta", "gamma"] { try bench.addDevice(name) }
        bench["gamma"].sync.missingLogGracePeriod = .seconds(5)
        for title in ["one", "two", "three", "four"] { try bench.addNote("alpha", title) }
        let three = try bench.logBytes("alpha", 3)
        try bench.deliver("alpha", [1, 4], to: "gamma")
        try bench.place(
            three.prefix(three.count - 7),
            name: ContainerLayout.logFileName(sequence: 3),
            author: "alpha",
            in: "gamma"
        )
        // Log 2 was deleted from alpha's folder (by a user, or an engine's mistake).
        try FileManager.default.removeItem(at: bench.logURL("alpha", 2, in: "alpha"))
        try bench.importOn("gamma")
        for _ in 0..<2 { try bench.importOn("gamma", after: 10_000) }
        #expect(try bench.requests(of: "gamma")?.logs == ["alpha": [2]], "asks for the first missing one")
        try bench.deliverRequests(of: "gamma")
        try bench.importOn("alpha")
        #expect(FileManager.default.fileExists(atPath: bench.logURL("alpha", 2, in: "alpha").path))
        try bench.deliver("alpha", [2], to: "gamma")
        #expect(try bench.importOn("gamma").logs == 1, "2 applies; 3 is still cut short")
        for _ in 0..<2 { try bench.importOn("gamma", after: 10_000) }
        #expect(try bench.requests(of: "gamma")?.logs == ["alpha": [3]])
        // Alpha's own copy is intact: nothing to publish again there; the engine carries it.
        try bench.deliver("alpha", [3], to: "gamma")
        #expect(try bench.importOn("gamma").logs == 2)
        #expect(try bench.titles("gamma") == ["four", "one", "three", "two"])
    }

    @Test("A device's own damaged log in its outbox range is replaced at its next export")
    func ownDamagedLogIsReplacedAtExport() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        try bench.edit("alpha", export: false) { context in
            _ = try context.insert(entity: "Note", values: ["title": .string("one")])
        }
        // A sync engine wrote half a file under the name first.
        let url = bench.logURL("alpha", 1, in: "alpha")
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("CONCORD-LOG\n".utf8).write(to: url)
        #expect(try bench["alpha"].sync.exportPending() == 1)
        #expect(bench["alpha"].log.republished.map(\.lastPathComponent) == [ContainerLayout.logFileName(sequence: 1)])
        try bench.deliverEverything()
        #expect(try bench.importOn("beta").logs == 1)
        #expect(try bench.titles("beta") == ["one"])
    }

    @Test(
        "A device's logs deleted from the container after they were written, its last one included (which nobody misses), are published again at its next import"
    )
    func ownLostLogsArePublishedAgain() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        // Enough logs for the export mark to have moved past the first ones (saves move it in
        // batches): log 1 is below it, the last one after it.
        let titles = (1...40).map { "note \($0 < 10 ? "0" : "")\($0)" }
        for title in titles { try bench.addNote("alpha", title) }
        // A user or a tool deleted logs 1 and 40 from alpha's folder, and the engine carried the
        // deletion everywhere: beta never got them, and no later log tells anybody that 40 exists.
        try bench.deliver("alpha", Array(2...39), to: "beta")
        for number: UInt64 in [1, 40] {
            try FileManager.default.removeItem(at: bench.logURL("alpha", number, in: "alpha"))
        }
        #expect(try bench.importOn("beta").logs == 0, "2 waits behind 1")

        try bench.importOn("alpha")
        for number: UInt64 in 1...40 {
            #expect(FileManager.default.fileExists(atPath: bench.logURL("alpha", number, in: "alpha").path))
        }
        #expect(
            bench["alpha"].log.republished.map(\.lastPathComponent).contains(ContainerLayout.logFileName(sequence: 1))
        )
        try bench.deliverEverything()
        #expect(try bench.importOn("beta").logs == 40)
        #expect(try bench.titles("beta") == titles)
        // An import that finds the folder as it left it looks no further: nothing is written again.
        let before = try FileManager.default.attributesOfItem(atPath: bench.logURL("alpha", 40, in: "alpha").path)
        try bench.importOn("alpha")
        let after = try FileManager.default.attributesOfItem(atPath: bench.logURL("alpha", 40, in: "alpha").path)
        #expect(before[.systemFileNumber] as? Int == after[.systemFileNumber] as? Int)
    }

    @Test(
        "A device whose whole folder vanished from the container (its logs with it) makes it again and publishes its logs at its next import, with no save of its own (seed 1844)"
    )
    func ownVanishedFolderIsMadeAgain() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        let titles = ["one", "two", "three"]
        for title in titles { try bench.addNote("alpha", title) }
        // The folder went, every log in it (a user, or an engine carrying a deletion): beta never
        // got them, and nothing of alpha's is left to say they exist.
        let folder = bench.logURL("alpha", 1, in: "alpha").deletingLastPathComponent()
        try FileManager.default.removeItem(at: folder)
        #expect(try bench.importOn("beta").logs == 0)

        try bench.importOn("alpha")
        for number: UInt64 in 1...3 {
            #expect(FileManager.default.fileExists(atPath: bench.logURL("alpha", number, in: "alpha").path))
        }
        try bench.deliverEverything()
        #expect(try bench.importOn("beta").logs == 3)
        #expect(try bench.titles("beta") == titles.sorted())
    }

    @Test(
        "A device whose own log was lost from the container, after another device applied it, publishes it again when it leaves: returning with its data replaced by the container's, it loses nothing the others hold"
    )
    func lostOwnLogPublishedBeforeLeaving() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta", "gamma"] { try bench.addDevice(name) }
        let note = try bench.addNote("alpha", "kept")
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        // (beta's data in the container: alpha returns to a container others use.)
        try bench.addNote("beta", "other")
        for viewer in ["alpha", "gamma"] { try bench.deliver("beta", [1], to: viewer) }
        // A user deletes alpha's log 1 from the container before gamma got it.
        try FileManager.default.removeItem(at: bench.logURL("alpha", 1, in: "alpha"))
        try FileManager.default.removeItem(at: bench.logURL("alpha", 1, in: "beta"))
        try bench["alpha"].sync.disable()
        #expect(FileManager.default.fileExists(atPath: bench.logURL("alpha", 1, in: "alpha").path), "published again")
        let enabling = try bench["alpha"].sync.enable(policy: .always(.replaceLocalWithContainer), live: false)
        #expect(enabling.join?.choice == .replaceLocalWithContainer, "\(enabling)")
        try bench.deliverEverything()
        for name in ["alpha", "beta", "gamma"] { try bench.importOn(name) }
        for name in ["alpha", "beta", "gamma"] {
            #expect(try bench[name].store.records(with: [note]).count == 1, "\(name)")
        }
        #expect(try bench.contents("alpha") == bench.contents("gamma"))
        #expect(try bench.contents("beta") == bench.contents("gamma"))
    }
}
