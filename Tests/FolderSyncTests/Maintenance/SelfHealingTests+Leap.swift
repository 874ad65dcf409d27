import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

extension SelfHealingTests {
    /// The name and bytes of the baseline in `author`'s own copy of its folder.
    func baseline(of author: String, in bench: SyncTestBench) throws -> (name: String, bytes: Data) {
        let folder = bench.logURL(author, 1, in: author).deletingLastPathComponent()
        let name = try #require(
            try FileManager.default.contentsOfDirectory(atPath: folder.path).first { $0.hasPrefix("baseline-") }
        )
        return (name, try Data(contentsOf: folder.appendingPathComponent(name)))
    }

    /// alpha and beta: alpha's log 1 (`title`) applied and acknowledged by beta. Returns the
    /// bytes of beta's acknowledgement.
    func acknowledgedFirstLog(_ title: String) throws -> (SyncTestBench, acknowledgement: Data) {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        try bench.addNote("alpha", title)
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        try bench["beta"].sync.publishAcknowledgement()
        let url = ContainerLayout(container: bench["beta"].view, storeName: SyncTestBench.storeName)
            .deviceFolder("beta").appendingPathComponent("applied.json")
        return (bench, try Data(contentsOf: url))
    }

    /// alpha and beta: alpha's log 1 ("one") applied and acknowledged by beta, its log 2 ("two")
    /// on alpha's machine only, and alpha's baseline, which holds both. Returns the baseline and
    /// the bytes of log 2.
    func unsentLogInABaseline() throws -> (SyncTestBench, baseline: (name: String, bytes: Data), second: Data) {
        let (bench, _) = try acknowledgedFirstLog("one")
        try bench.addNote("alpha", "two")
        let second = try bench.logBytes("alpha", 2)
        try bench["alpha"].sync.compact()
        return (bench, try baseline(of: "alpha", in: bench), second)
    }

    /// Restores alpha on a new machine whose copy holds beta's folder and alpha's `old` logs
    /// (from 1), and saves "three" there: its first log past the leap, returned.
    func restoreAlphaOnANewMachine(with old: [Data] = [], in bench: SyncTestBench) throws -> UInt64 {
        try moveToNewMachine("alpha", keeping: ["beta"], in: bench)
        for (index, bytes) in old.enumerated() {
            try bench.place(
                bytes,
                name: ContainerLayout.logFileName(sequence: UInt64(index + 1)),
                author: "alpha",
                in: "alpha"
            )
        }
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        try bench.addNote("alpha", "three")
        return try #require(
            try ContainerLayout(container: bench["alpha"].view, storeName: SyncTestBench.storeName)
                .logSequences(device: "alpha").last
        )
    }

    /// Puts `author` on a new machine: no store, and a container copy that holds the folders of
    /// `others` as their own copies have them.
    func moveToNewMachine(_ author: String, keeping others: [String], in bench: SyncTestBench) throws {
        let devices = bench.logURL(author, 1, in: author).deletingLastPathComponent().deletingLastPathComponent()
        try FileManager.default.removeItem(at: devices)
        try FileManager.default.removeItem(at: bench[author].storeURL)
        try FileManager.default.createDirectory(at: devices, withIntermediateDirectories: true)
        for other in others {
            let folder = bench.logURL(other, 1, in: other).deletingLastPathComponent()
            try FileManager.default.copyItem(at: folder, to: devices.appendingPathComponent(other))
        }
    }

    @Test(
        "A device restored on a new machine takes in the baseline it wrote before, which holds a save whose log was lost with the machine, and sends it out again: a device that already took its first log past the leap gets the save too"
    )
    func restoredDeviceTakesInItsOldBaseline() throws {
        // Log 2 never leaves alpha's machine, but its baseline, which holds "two", does.
        let (bench, baseline, _) = try unsentLogInABaseline()
        // alpha on a new machine: it leaps past log 1 (beta's acknowledgement); its new log goes
        // to beta, which then waits for nothing leapt over.
        let leapt = try restoreAlphaOnANewMachine(in: bench)
        #expect(leapt == 1 + FolderSync.restoreLeap + 1)
        try bench.deliver("alpha", [leapt], to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one", "three"])

        // The old baseline reaches both; beta, past the leap, has no log to catch up on.
        for viewer in ["alpha", "beta"] {
            try bench.place(baseline.bytes, name: baseline.name, author: "alpha", in: viewer)
        }
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one", "three"])
        try bench.importOn("alpha")
        #expect(try bench.titles("alpha") == ["one", "three", "two"])
        try bench.deliverEverything()
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one", "three", "two"])
        #expect(try bench.contents("beta") == bench.contents("alpha"))
        // (Taken in once: the next pass reads nothing new and sends nothing again.)
        let logs = try ContainerLayout(container: bench["alpha"].view, storeName: SyncTestBench.storeName)
            .logSequences(device: "alpha")
        try bench.importOn("alpha")
        #expect(
            try ContainerLayout(container: bench["alpha"].view, storeName: SyncTestBench.storeName).logSequences(
                device: "alpha"
            ) == logs
        )
    }

    @Test(
        "Numbers a restored device leapt over that a baseline then shows were its history are history: an old copy of such a log is not applied again"
    )
    func baselineEndsTheLeapBelowWhatItCovers() throws {
        let (bench, baseline, second) = try unsentLogInABaseline()
        // A new machine whose copy holds beta's folder: the leap starts after log 1.
        #expect(try restoreAlphaOnANewMachine(in: bench) == FolderSync.restoreLeap + 2)
        try bench.place(baseline.bytes, name: baseline.name, author: "alpha", in: "alpha")
        try bench.importOn("alpha")
        #expect(try bench.titles("alpha") == ["one", "three", "two"])
        // Log 2 turns up late: the baseline holds it already (and its records' deletions may be
        // forgotten by now), so it is not applied again.
        let before = try bench.contents("alpha")
        try bench.place(second, name: ContainerLayout.logFileName(sequence: 2), author: "alpha", in: "alpha")
        #expect(try bench.importOn("alpha").logs == 0)
        #expect(try bench.contents("alpha") == before)
    }

    @Test(
        "An old log that turns up more than 30 days after its device's leap, when a baseline counts past the leap, reaches a device that started from that baseline too"
    )
    func oldLogAfterTheLeapWindowReachesBaselineJoiners() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        try bench.addNote("alpha", "one")
        try bench.addNote("alpha", "two")
        try bench.deliver("alpha", [1, 2], to: "beta")
        try bench.importOn("beta")
        try bench["beta"].sync.publishAcknowledgement()
        try bench.addNote("alpha", "late")  // log 3 stays on a disk that comes back much later
        let late = try bench.logBytes("alpha", 3)
        let old = try (1...2).map { try bench.logBytes("alpha", UInt64($0)) }

        // alpha on a new machine, its copy filled from beta's: its logs 1 and 2, beta's folder.
        let leapt = try restoreAlphaOnANewMachine(with: old, in: bench)
        #expect(leapt == 2 + FolderSync.restoreLeap + 1)
        try bench.deliver("alpha", [leapt], to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one", "three", "two"])

        // Past the window, beta's baseline counts alpha's logs through the one past the leap;
        // gamma starts from it.
        bench.time.advance(by: UInt64(FolderSync.leapWindow * 1000) + 86_400_000)
        try bench["beta"].sync.compact()
        let baseline = try baseline(of: "beta", in: bench)
        try bench.addDevice("gamma")
        try bench.place(baseline.bytes, name: baseline.name, author: "beta", in: "gamma")
        #expect(try bench["gamma"].sync.startFromBaseline() > 0)
        #expect(try bench.titles("gamma") == ["one", "three", "two"])

        // The old log turns up everywhere: every device applies it, gamma too.
        for viewer in ["alpha", "beta", "gamma"] {
            try bench.place(late, name: ContainerLayout.logFileName(sequence: 3), author: "alpha", in: viewer)
            try bench.importOn(viewer)
            #expect(try bench.titles(viewer) == ["late", "one", "three", "two"], "\(viewer)")
        }
        #expect(try bench.contents("gamma") == bench.contents("beta"))
    }
}

extension SelfHealingTests {
    @Test(
        "A device restored twice on new machines, knowing as little of its history the second time as the first, numbers past what its first life acknowledged having committed: its second life's saves do not take names the others applied already"
    )
    func secondRestoreNumbersPastTheFirstLife() throws {
        let (bench, older) = try acknowledgedFirstLog("zero")
        // First life on a new machine whose copy shows alpha's history through log 1 (beta's
        // acknowledgement): it leaps from 1.
        let first = try restoreAlphaOnANewMachine(in: bench)
        try bench.deliver("alpha", [first], to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["three", "zero"])
        // (Within the leap window the others' acknowledgements still say 1: alpha's own says
        // what it committed.)
        #expect(try bench["alpha"].sync.publishAcknowledgement().committed == first)
        let own = layoutOf("alpha", in: bench).deviceFolder("alpha").appendingPathComponent("applied.json")
        let firstLife = try Data(contentsOf: own)
        // Second life, whose copy again shows only beta's acknowledgement (and the registration
        // from before the first life's leap): it leaps from 1 too. The first life's
        // acknowledgement arrives before it saves.
        try moveToNewMachine("alpha", keeping: [], in: bench)
        try forgetRegisteredLeap(of: "alpha", in: bench)
        try bench.place(older, name: "applied.json", author: "beta", in: "alpha")
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        try bench.place(firstLife, name: "applied.json", author: "alpha", in: "alpha")
        try bench.addNote("alpha", "second life")
        let numbers = try layoutOf("alpha", in: bench).logSequences(device: "alpha")
        // (It leaps past that history, as at a restore: more of it may still be on its way.)
        #expect(numbers == [first + FolderSync.restoreLeap + 1], "the second life numbered \(numbers)")
        try bench.deliver("alpha", numbers, to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["second life", "three", "zero"])
    }

    @Test(
        "A device restored twice on new machines whose copy shows nothing of its history but its registration numbers past where the first life's numbering leapt to (the registration says so): its second life's logs do not take names the first life used"
    )
    func secondRestoreNumbersPastTheRegisteredLeap() throws {
        let (bench, _) = try acknowledgedFirstLog("zero")
        // First life: it leaps from 1 (beta's acknowledgement); its registration says so.
        let first = try restoreAlphaOnANewMachine(in: bench)
        try bench.deliver("alpha", [first], to: "beta")
        try bench.importOn("beta")
        let sentinel = DeviceFileSentinel(layout: layoutOf("alpha", in: bench))
        #expect(try sentinel.registration(of: "alpha")?.numberingFrom == first)
        // Second life, whose copy shows the registration and no log or acknowledgement at all.
        try moveToNewMachine("alpha", keeping: [], in: bench)
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        try bench.addNote("alpha", "second life")
        let numbers = try layoutOf("alpha", in: bench).logSequences(device: "alpha")
        // (Past the first life's run, by a leap: its logs may still be on their way.)
        #expect(numbers == [first + FolderSync.restoreLeap], "the second life numbered \(numbers)")
        #expect(try sentinel.registration(of: "alpha")?.numberingFrom == first + FolderSync.restoreLeap)
        try bench.deliver("alpha", numbers, to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["second life", "three", "zero"])
    }

    /// Puts in `device`'s own copy its registration as it was before its numbering leapt (an
    /// older version, as an engine may carry it there after the newer one).
    func forgetRegisteredLeap(of device: String, in bench: SyncTestBench) throws {
        let sentinel = DeviceFileSentinel(layout: layoutOf(device, in: bench))
        var registration = try #require(try sentinel.registration(of: device))
        registration.numberingFrom = nil
        try sentinel.register(registration)
    }

    @Test(
        "A device restored twice, whose first life's later log reaches its second life's copy only after that life saved, sends its writes again, whether its next import, its next process's first save or the export of a save waiting under that log's number finds it: the save it numbered under a name the others applied already reaches them",
        arguments: ["import", "save", "export"]
    )
    func firstLifeLogArrivingAfterTheSecondLifeSaved(foundBy finder: String) throws {
        let (bench, older) = try acknowledgedFirstLog("zero")
        // First life: it leaps from 1 (beta's acknowledgement) and saves two logs, which beta applies.
        let first = try restoreAlphaOnANewMachine(in: bench)
        try bench.addNote("alpha", "four")
        try bench.deliver("alpha", [first, first + 1], to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["four", "three", "zero"])
        let later = try bench.logBytes("alpha", first + 1)
        // Second life, whose copy shows only beta's old acknowledgement and the registration from
        // before the first life's leap: it leaps from 1 too, and its save takes the first life's
        // first name, which beta has applied.
        try moveToNewMachine("alpha", keeping: [], in: bench)
        try forgetRegisteredLeap(of: "alpha", in: bench)
        try bench.place(older, name: "applied.json", author: "beta", in: "alpha")
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        try bench.addNote("alpha", "second life")
        #expect(try layoutOf("alpha", in: bench).logSequences(device: "alpha") == [first])
        // (A save that waits in the outbox under the next number, for the export.)
        if finder == "export" {
            try bench.edit("alpha", export: false) { _ = try $0.insert(entity: "Note", values: ["title": "five"]) }
        }
        // The first life's later log arrives: alpha numbers past it, and sends its writes again.
        // (Or a new process saves before anything imports: it finds the log under its next number.)
        try bench.place(later, name: ContainerLayout.logFileName(sequence: first + 1), author: "alpha", in: "alpha")
        switch finder {
        case "save":
            try bench.restart("alpha")
            try bench.addNote("alpha", "five")
        case "export": try bench["alpha"].sync.exportPending()
        default: break
        }
        try bench.importOn("alpha")
        let resent = try layoutOf("alpha", in: bench).logSequences(device: "alpha").filter { $0 > first + 1 }
        if finder != "export" {
            // (Past it and a leap: more of the first life may be on its way.)
            #expect(resent.first.map { $0 > first + 1 + FolderSync.restoreLeap } ?? false, "resent as \(resent)")
        }
        try bench.deliver("alpha", resent, to: "beta")
        try bench.importOn("beta")
        let titles = ["four", "second life", "three", "zero"] + (finder == "import" ? [] : ["five"])
        #expect(try bench.titles("beta") == titles.sorted())
    }

    @Test(
        "A store restored from a backup on a new machine numbers on into names its later history had (its copy did not show them yet): when that history shows, at the next import or at a process's first save, its writes go out again and the save it numbered under a name the others applied reaches them",
        arguments: ["import", "save"]
    )
    func backupNumbersIntoItsLaterHistory(foundBy finder: String) throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        try bench.addNote("alpha", "one")
        let backup = try Data(contentsOf: bench["alpha"].storeURL)
        try bench.addNote("alpha", "two")
        try bench.addNote("alpha", "three")
        try bench.deliver("alpha", [1, 2, 3], to: "beta")
        try bench.importOn("beta")
        let (one, third) = (try bench.logBytes("alpha", 1), try bench.logBytes("alpha", 3))
        // A new machine whose copy holds alpha's first log only, and the backup of its store.
        try moveToNewMachine("alpha", keeping: [], in: bench)
        try bench.place(one, name: ContainerLayout.logFileName(sequence: 1), author: "alpha", in: "alpha")
        try backup.write(to: bench["alpha"].storeURL)
        try bench.restart("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        try bench.addNote("alpha", "restored")
        #expect(try layoutOf("alpha", in: bench).logSequences(device: "alpha") == [1, 2])
        try bench.place(third, name: ContainerLayout.logFileName(sequence: 3), author: "alpha", in: "alpha")
        if finder == "save" {
            try bench.restart("alpha")
            try bench.addNote("alpha", "later")
        }
        try bench.importOn("alpha")
        let resent = try layoutOf("alpha", in: bench).logSequences(device: "alpha").filter { $0 > 3 }
        try bench.deliver("alpha", resent, to: "beta")
        try bench.importOn("beta")
        let titles = ["one", "restored", "three", "two"] + (finder == "save" ? ["later"] : [])
        #expect(try bench.titles("beta") == titles.sorted())
    }

    @Test(
        "A file in a device's own folder named like a log past any plausible number (damage, or a hostile name) does not move its numbering there: its next logs still reach the others"
    )
    func implausibleOwnLogNameIsPassedOver() throws {
        let (bench, _) = try acknowledgedFirstLog("one")
        let hostile = ContainerLayout.logFileName(sequence: 9_999_999_999_999_999)
        for viewer in ["alpha", "beta"] {
            try bench.place(Data("garbage".utf8), name: hostile, author: "alpha", in: viewer)
        }
        try bench.importOn("alpha")
        try bench.restart("alpha")
        try bench.addNote("alpha", "two")
        let numbers = try layoutOf("alpha", in: bench).logSequences(device: "alpha").filter { $0 < 1 << 53 }
        #expect(numbers.allSatisfy { $0 < FolderSync.restoreLeap * 2 }, "numbered \(numbers)")
        try bench.deliver("alpha", numbers, to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["one", "two"])
    }

    /// The layout of `device`'s copy of the container.
    func layoutOf(_ device: String, in bench: SyncTestBench) -> ContainerLayout {
        ContainerLayout(container: bench[device].view, storeName: SyncTestBench.storeName)
    }
}

extension SelfHealingTests {
    @Test(
        "A request that runs over numbers its device leapt over (the requester cannot tell them) gets no stand-ins for them: only the logs that hold it back are answered"
    )
    func requestRunOverALeapPublishesNoStandIns() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name) }
        bench["beta"].sync.missingLogGracePeriod = .zero
        try bench.addNote("alpha", "one")
        try bench.addNote("alpha", "two")
        let old = try [1, 2].map { try bench.logBytes("alpha", $0) }
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        // alpha on a new machine that holds its logs 1 and 2: it leaps from 2.
        let leapt = try restoreAlphaOnANewMachine(with: old, in: bench)
        #expect(leapt == 2 + FolderSync.restoreLeap + 1)
        try bench.addNote("alpha", "four")
        // beta gets alpha's second log past the leap only: it asks from 2 on, over the leap.
        try bench.deliver("alpha", [leapt + 1], to: "beta")
        for _ in 0..<2 { try bench.importOn("beta") }
        let asked = try #require(try bench.requests(of: "beta")?.logs["alpha"])
        #expect(asked.first == 2 && asked.count > 2, "\(asked.prefix(4))…")
        try bench.deliverRequests(of: "beta")
        try bench.importOn("alpha")
        #expect(try layoutOf("alpha", in: bench).logSequences(device: "alpha") == [1, 2, leapt, leapt + 1])
        try bench.deliver("alpha", [2, leapt], to: "beta")
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["four", "one", "three", "two"])
    }
}
