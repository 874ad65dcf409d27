import Foundation
import Testing

@testable import notes

/// How long and how hard the run goes: `CONCORD_ENGINE_SECONDS` (30), `CONCORD_ENGINE_WORKERS`
/// (command loops per device beside its watch process: 2), `CONCORD_ENGINE_SEED` (random),
/// `CONCORD_ENGINE_KEEP=1` keeps the run's folder even when it passes.
struct EngineRunSettings {
    let seconds: Double
    let workers: Int
    let seed: UInt64
    let keep: Bool

    init(_ environment: [String: String] = ProcessInfo.processInfo.environment) {
        seconds = environment["CONCORD_ENGINE_SECONDS"].flatMap(Double.init) ?? 30
        workers = environment["CONCORD_ENGINE_WORKERS"].flatMap(Int.init) ?? 2
        seed = environment["CONCORD_ENGINE_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64(UInt32.max))
        keep = environment["CONCORD_ENGINE_KEEP"] == "1"
    }
}

@Suite(
    "The Notes sample on two devices carried by Syncthing on loopback", .serialized,
    .enabled(if: ProcessInfo.processInfo.environment["CONCORD_ENGINE_TESTS"] == "1", "set CONCORD_ENGINE_TESTS=1 (make test-engine)"))
struct SyncthingEngineTests {
    @Test("random concurrent edits, staged clashes and a paused daemon end as the ledger of commands says")
    func notesThroughSyncthing() throws {
        try #require(SyncthingDaemon.isInstalled, "syncthing is not installed at \(SyncthingDaemon.executableURL.path) (make deps-engine)")
        let settings = EngineRunSettings()
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).resolvingSymlinksInPath()
            .appendingPathComponent("concord-engine-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        var passed = false
        defer {
            if passed && !settings.keep {
                try? FileManager.default.removeItem(at: root)
            } else {
                print("engine run: kept \(root.path) (daemon logs, ledger.txt, report.txt)")
            }
        }

        let laptop = EngineDevice(
            name: "laptop", store: "sqlite", data: root.appendingPathComponent("laptop-data"),
            container: root.appendingPathComponent("laptop-sync"))
        let desktop = EngineDevice(
            name: "desktop", store: "json", data: root.appendingPathComponent("desktop-data"),
            container: root.appendingPathComponent("desktop-sync"))
        let cluster = try SyncthingCluster(root: root, folders: [(laptop.name, laptop.container), (desktop.name, desktop.container)])
        let ledger = Ledger()
        var report: [String] = ["seed \(settings.seed), \(settings.seconds) s, \(settings.workers) worker(s) per device"]
        var watches: [WatchProcess] = []
        defer {
            for watch in watches { _ = watch.stop(timeout: .seconds(5)) }
            report += cluster.stop()
            try? ledger.text().write(to: root.appendingPathComponent("ledger.txt"), atomically: true, encoding: .utf8)
            try? report.joined(separator: "\n").write(to: root.appendingPathComponent("report.txt"), atomically: true, encoding: .utf8)
            print(report.map { "engine run: " + $0 }.joined(separator: "\n"))
        }

        // The engine: two daemons, connected, started with a clean signal mask.
        try cluster.start()
        report.append("syncthing pids: " + cluster.daemons.map { "\($0.name) \($0.pid ?? -1)" }.joined(separator: ", "))
        let signals = try SyncthingDaemon.childSignalState()
        report.append("children start with SigBlk=\(signals.blocked) SigIgn=\(signals.ignored)")
        #expect(signals.blocked == "0000000000000000", "children start with blocked signals: \(signals.blocked)")
        try cluster.waitUntilConnected(timeout: .seconds(30))

        // The laptop makes the container and the folders; the engine carries them; the desktop joins.
        for name in ["Work", "Home", "Doomed-1", "Doomed-2"] {
            let entry = ledger.run(.addFolder(name), on: laptop, by: "setup")
            try #require(entry.acknowledged, "\(entry.summary)")
        }
        let carried = cluster.waitUntilInSync(timeout: .seconds(30))
        try #require(carried.took != nil, "the engine did not carry the laptop's first logs within 30 s: \(carried.last)")
        let joined = ledger.run(.sync, on: desktop, by: "setup")
        try #require(joined.acknowledged, "\(joined.summary)")
        var desktopFolders: [String] = []
        let setupDeadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < setupDeadline {
            desktopFolders = ledger.run(.listFolders, on: desktop, by: "setup").lines.compactMap(LedgerExpectations.folderName)
            if Set(["Work", "Home", "Doomed-1", "Doomed-2"]).isSubset(of: desktopFolders) { break }
            Thread.sleep(forTimeInterval: 0.5)
        }
        try #require(
            Set(["Work", "Home", "Doomed-1", "Doomed-2"]).isSubset(of: desktopFolders),
            "the desktop never saw the laptop's folders: \(desktopFolders)")
        watches = [try WatchProcess(laptop, ledger: ledger), try WatchProcess(desktop, ledger: ledger)]

        // The run: workers on both devices, and the staged clashes on a timeline of their own.
        let start = ledger.now
        let end = start + .milliseconds(Int(settings.seconds * 1000))
        let workersDone = DispatchGroup()
        for (deviceIndex, (device, watch)) in zip([laptop, desktop], watches).enumerated() {
            for number in 1...settings.workers {
                let seed = settings.seed &+ UInt64(deviceIndex * 100 + number)
                workersDone.enter()
                Thread.detachNewThread {
                    var worker = NotesWorker(device: device, name: "w\(number)", ledger: ledger, watch: watch, seed: seed)
                    worker.run(until: end)
                    workersDone.leave()
                }
            }
        }
        let stage = StagedClashes(
            ledger: ledger, cluster: cluster, laptop: laptop, desktop: desktop, start: start, length: settings.seconds)
        let staged = stage.run()
        report += staged
        let workersEnded = workersDone.wait(timeout: .now() + .seconds(Int(settings.seconds) + 120)) == .success
        #expect(workersEnded, "the workers did not finish within 120 s of the run's end")
        let editsEnded = ledger.now
        let entries = ledger.all
        report.append(
            "run: \(entries.count) commands, \(entries.filter(\.acknowledged).count) acknowledged, "
                + "\(entries.compactMap(\.addedID).count) notes added, edits ended at \(seconds(editsEnded))")

        // Convergence: the engine carries everything, then both devices list the same notes
        // within its latency plus 5 s.
        let engine = cluster.waitUntilInSync(timeout: .seconds(60))
        let engineSettled = ledger.now
        report.append("engine: " + (engine.took.map { "in sync \(seconds($0)) after the edits" } ?? "NOT in sync within 60 s") + "; \(engine.last)")
        #expect(engine.took != nil, "the engine did not settle within 60 s of the edits: \(engine.last)")
        let listDeadline = engineSettled + .seconds(5)
        var lists: (laptop: [String], desktop: [String]) = ([], [])
        var convergedAt: Duration?
        while ledger.now < listDeadline + .seconds(30) {
            lists = (notesLines(ledger.run(.list, on: laptop, by: "check")), notesLines(ledger.run(.list, on: desktop, by: "check")))
            if lists.laptop == lists.desktop && cluster.snapshot().inSync {
                let at = ledger.now
                Thread.sleep(forTimeInterval: 1)
                let again = (notesLines(ledger.run(.list, on: laptop, by: "check")), notesLines(ledger.run(.list, on: desktop, by: "check")))
                if again.0 == lists.laptop && again.1 == lists.desktop {
                    convergedAt = at
                    break
                }
                lists = again
                continue
            }
            Thread.sleep(forTimeInterval: 0.5)
        }
        let differences = listDifference(("laptop", lists.laptop), ("desktop", lists.desktop))
        var convergence = CheckResult(name: "identical lists within the engine's latency plus 5 s")
        if let convergedAt {
            report.append("lists identical at \(seconds(convergedAt)) (\(lists.laptop.count) notes; engine settled at \(seconds(engineSettled)))")
            if convergedAt > listDeadline {
                convergence.problems.append("identical only at \(seconds(convergedAt)), \(seconds(convergedAt - engineSettled)) after the engine settled")
            }
        } else {
            convergence.problems.append(
                "still different \(seconds(ledger.now - engineSettled)) after the engine settled:\n" + differences + "\n"
                    + involvedHistory(differences, ledger: ledger))
        }

        // The watch processes stop cleanly.
        var watchesStopped = CheckResult(name: "watch processes stop cleanly")
        for watch in watches {
            let (status, errors) = watch.stop()
            if status != 0 || !watch.lines.contains("stopped") {
                watchesStopped.problems.append("\(watch.device.name): exit \(status.map(String.init) ?? "killed"), \(errors)")
            }
        }
        watches = []

        // The checks against the ledger, on each device's final state.
        let expectations = LedgerExpectations(ledger.all, watchLines: ledger.watchLines)
        var checks = [convergence, watchesStopped, expectations.commandsEnded()]
        for (device, lines) in [(laptop, lists.laptop), (desktop, lists.desktop)] {
            let notes = lines.compactMap(NoteLine.init)
            let folders = ledger.run(.listFolders, on: device, by: "check").lines.filter { $0.hasPrefix("folder ") }
            report.append("\(device.name) folders: \(folders.joined(separator: ", "))")
            checks += expectations.presence(in: notes, device: device.name)
            checks += expectations.lastWriters(in: notes, device: device.name)
            checks += expectations.duplicates(notes: notes, folders: folders, device: device.name)
        }
        let warnings = ledger.text().split(separator: "\n").filter { $0.contains("sync warning") }
        report.append("sync warnings printed: \(warnings.count)" + warnings.prefix(5).map { "\n  " + $0 }.joined())
        for check in checks {
            report.append(check.passed ? "PASS \(check.name)" : "FAIL \(check.name): \(check.problems.count) problem(s)")
            #expect(check.passed, "\(check)")
        }
        passed = checks.allSatisfy(\.passed) && engine.took != nil && workersEnded
    }

    /// The `note ...` lines of a `list` run.
    private func notesLines(_ entry: LedgerEntry) -> [String] {
        entry.lines.filter { $0.hasPrefix("note ") }
    }

    /// The ledger lines of the notes that appear in `differences`.
    private func involvedHistory(_ differences: String, ledger: Ledger) -> String {
        let ids = Set(differences.split(separator: "\n").compactMap { NoteLine(String($0))?.id })
        return ids.sorted().map { "note \($0):\n" + ledger.lines(about: $0).map { "    " + $0 }.joined(separator: "\n") }
            .joined(separator: "\n")
    }
}

/// The three staged clashes, on a timeline relative to the run's start (fractions of its
/// length): a folder made and a note filed into it at once on each device (0.07); the desktop's
/// daemon pauses its link to the laptop (0.2); while paused, the laptop deletes a folder while
/// the desktop files a note into it, and both make a folder of the same name with a note in it
/// (0.25); the link resumes (0.55); the same two clashes again, connected, racing the engine (0.7).
struct StagedClashes {
    let ledger: Ledger
    let cluster: SyncthingCluster
    let laptop: EngineDevice
    let desktop: EngineDevice
    let start: Duration
    let length: Double

    /// Runs the timeline; returns lines for the report.
    func run() -> [String] {
        var report: [String] = []
        wait(until: 0.07)
        concurrently([
            { self.fileIntoNewFolder("Fresh-laptop", note: "staged-fresh-laptop", on: self.laptop) },
            { self.fileIntoNewFolder("Fresh-desktop", note: "staged-fresh-desktop", on: self.desktop) },
        ])
        wait(until: 0.2)
        let pausing = cluster.daemon(desktop.name), peer = cluster.daemon(laptop.name)
        do {
            try pausing.setPaused(true, peer: peer)
            try cluster.waitUntilConnected(false, timeout: .seconds(15))
            report.append("paused the desktop's link to the laptop at \(seconds(ledger.now))")
        } catch {
            Issue.record("pausing the desktop's daemon failed: \(error)")
        }
        wait(until: 0.25)
        clashes(round: 1)
        wait(until: 0.55)
        do {
            try pausing.setPaused(false, peer: peer)
            try cluster.waitUntilConnected(true, timeout: .seconds(30))
            report.append("resumed at \(seconds(ledger.now))")
        } catch {
            Issue.record("resuming the desktop's daemon failed: \(error)")
        }
        wait(until: 0.7)
        clashes(round: 2)
        return report
    }

    /// A folder deleted on the laptop while the desktop files a note into it; the same folder
    /// name made on both, each filing a note into it.
    private func clashes(round: Int) {
        concurrently([
            { self.ledger.run(.deleteFolder("Doomed-\(round)"), on: self.laptop, by: "stage") },
            {
                self.ledger.run(
                    .addNote(title: "staged-doomed-\(round)", folder: "Doomed-\(round)", tag: nil, pin: false), on: self.desktop,
                    by: "stage")
            },
            { self.fileIntoNewFolder("Twin-\(round)", note: "staged-twin-\(round)-laptop", on: self.laptop) },
            { self.fileIntoNewFolder("Twin-\(round)", note: "staged-twin-\(round)-desktop", on: self.desktop) },
        ])
    }

    /// Makes `folder` and at once files a note into it (the note goes to the folder of that name
    /// even when the other device made it first and the add is refused).
    private func fileIntoNewFolder(_ folder: String, note: String, on device: EngineDevice) {
        ledger.run(.addFolder(folder), on: device, by: "stage")
        ledger.run(.addNote(title: note, folder: folder, tag: nil, pin: false), on: device, by: "stage")
    }

    private func wait(until fraction: Double) {
        let target = start + .milliseconds(Int(length * fraction * 1000))
        let remaining = target - ledger.now
        if remaining > .zero { Thread.sleep(forTimeInterval: Double(remaining.components.seconds) + Double(remaining.components.attoseconds) / 1e18) }
    }

    /// Runs `bodies` on threads of their own at once; waits (bounded) for all.
    private func concurrently(_ bodies: [@Sendable () -> Void]) {
        let group = DispatchGroup()
        for body in bodies {
            group.enter()
            Thread.detachNewThread {
                body()
                group.leave()
            }
        }
        if group.wait(timeout: .now() + .seconds(150)) != .success { Issue.record("staged commands did not end within 150 s") }
    }
}
