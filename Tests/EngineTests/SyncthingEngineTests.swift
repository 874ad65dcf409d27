import Foundation
import Testing

@testable import notes

/// How long and how hard the run goes: `CONCORD_ENGINE_SECONDS` (30), `CONCORD_ENGINE_WORKERS`
/// (command loops per device beside its watch process: 2), `CONCORD_ENGINE_SEED` (random),
/// `CONCORD_ENGINE_KEEP=1` keeps the run's folder even when it passes; `CONCORD_ENGINE_CLASHES=0`
/// leaves the staged clashes out (the pause stays), to tell their failures from the rest.
struct EngineRunSettings {
    let seconds: Double
    let workers: Int
    let seed: UInt64
    let keep: Bool
    let clashes: Bool

    init(_ environment: [String: String] = ProcessInfo.processInfo.environment) {
        seconds = environment["CONCORD_ENGINE_SECONDS"].flatMap(Double.init) ?? 30
        workers = environment["CONCORD_ENGINE_WORKERS"].flatMap(Int.init) ?? 2
        seed = environment["CONCORD_ENGINE_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64(UInt32.max))
        keep = environment["CONCORD_ENGINE_KEEP"] == "1"
        clashes = environment["CONCORD_ENGINE_CLASHES"] != "0"
    }
}

/// The engines the Notes trial runs over: Syncthing on loopback with two devices (a paused link)
/// and with three, unison and rclone bisync between local folders in a loop.
enum EngineKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case syncthing, syncthingThree, unison, rclone

    var testDescription: String {
        switch self {
        case .syncthing: "Syncthing, two devices"
        case .syncthingThree: "Syncthing, three devices"
        case .unison: "unison in a loop"
        case .rclone: "rclone bisync in a loop"
        }
    }

    /// The devices' names and store types.
    var devices: [(name: String, store: String)] {
        let two = [("laptop", "sqlite"), ("desktop", "json")]
        return self == .syncthingThree ? two + [("tablet", "plist")] : two
    }

    /// Whether the engine is installed, and where it is expected.
    var installed: (Bool, String) {
        switch self {
        case .syncthing, .syncthingThree: (SyncthingDaemon.isInstalled, SyncthingDaemon.executableURL.path)
        case .unison: (LoopEngine.Kind.unison.isInstalled, LoopEngine.Kind.unison.executable.path)
        case .rclone: (LoopEngine.Kind.rclone.isInstalled, LoopEngine.Kind.rclone.executable.path)
        }
    }

    /// The engine for `folders`, its state in `root`.
    func make(root: URL, folders: [(name: String, path: URL)]) throws -> any FileSyncEngine {
        switch self {
        case .syncthing, .syncthingThree: try SyncthingCluster(root: root, folders: folders)
        case .unison: try LoopEngine(.unison, root: root, folders: folders)
        case .rclone: try LoopEngine(.rclone, root: root, folders: folders)
        }
    }

    /// `CONCORD_ENGINES` (comma-separated raw values) narrows the engines run; all by default.
    static var selected: [EngineKind] {
        guard let names = ProcessInfo.processInfo.environment["CONCORD_ENGINES"], !names.isEmpty else {
            return allCases
        }
        let wanted = Set(names.split(separator: ",").map(String.init))
        return allCases.filter { wanted.contains($0.rawValue) }
    }
}

@Suite(
    "The Notes sample carried by real file-sync engines",
    .serialized,
    .enabled(
        if: ProcessInfo.processInfo.environment["CONCORD_ENGINE_TESTS"] == "1",
        "set CONCORD_ENGINE_TESTS=1 (make test-engine)"
    )
)
struct SyncthingEngineTests {
    @Test(
        "random concurrent edits, staged clashes and a paused link end as the ledger of commands says",
        arguments: EngineKind.selected
    )
    func notesThroughEngine(_ kind: EngineKind) throws {
        let (installed, path) = kind.installed
        try #require(installed, "\(path) is not installed (make deps-engine)")
        let run = try EngineRun(EngineRunSettings(), engine: kind)
        defer { run.finish() }
        try run.setUp()
        try run.edit()
        let convergence = run.converge()
        let checks = run.check(convergence: convergence)
        for check in checks { #expect(check.passed, "\(kind.testDescription): \(check)") }
        run.passed = checks.allSatisfy(\.passed) && run.incidents.isEmpty
    }
}

/// One run of the Notes sample across a real engine: a laptop (SQLite), a desktop (JSON) and, with
/// three devices, a tablet (plist), each with a watch process and command loops; a ledger of every
/// command; the run's folder (the engine's state, the devices' data and container copies,
/// `ledger.txt`, `report.txt`) is kept when the run fails.
final class EngineRun: @unchecked Sendable {
    let settings: EngineRunSettings
    let root: URL
    /// Every device: the laptop and the desktop first (the staged clashes use them).
    let devices: [EngineDevice]
    var laptop: EngineDevice { devices[0] }
    var desktop: EngineDevice { devices[1] }
    let engine: any FileSyncEngine
    let ledger = Ledger()
    var report: [String]
    var watches: [WatchProcess] = []
    var passed = false
    /// What went wrong outside the checks (each is also recorded as an issue).
    var incidents: [String] = []
    /// When the edits ended, and when the engine had carried them all (or gave up).
    var editsEnded: Duration = .zero
    var engineSettled: Duration?

    init(_ settings: EngineRunSettings, engine kind: EngineKind) throws {
        self.settings = settings
        root = URL(fileURLWithPath: NSTemporaryDirectory()).resolvingSymlinksInPath()
            .appendingPathComponent("concord-engine-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let root = self.root
        devices = kind.devices.map { device in
            EngineDevice(
                name: device.name,
                store: device.store,
                data: root.appendingPathComponent("\(device.name)-data"),
                container: root.appendingPathComponent("\(device.name)-sync")
            )
        }
        engine = try kind.make(root: root, folders: devices.map { ($0.name, $0.container) })
        report = [
            "\(kind.testDescription): seed \(settings.seed), \(settings.seconds) s, \(settings.workers) worker(s) per device"
                + (settings.clashes ? "" : ", no staged clashes")
        ]
    }

    /// Stops every process it started (watches, then daemons, by PID), writes the ledger and the
    /// report, prints the report, and removes the run's folder if the run passed.
    func finish() {
        for watch in watches { _ = watch.stop(timeout: .seconds(5)) }
        watches = []
        report += engine.stop()
        try? ledger.text().write(to: root.appendingPathComponent("ledger.txt"), atomically: true, encoding: .utf8)
        try? ledger.fullText().write(
            to: root.appendingPathComponent("ledger-full.txt"),
            atomically: true,
            encoding: .utf8
        )
        try? report.joined(separator: "\n").write(
            to: root.appendingPathComponent("report.txt"),
            atomically: true,
            encoding: .utf8
        )
        print(report.map { "engine run: " + $0 }.joined(separator: "\n"))
        if passed && !settings.keep {
            try? FileManager.default.removeItem(at: root)
        } else {
            print("engine run: kept \(root.path) (daemon logs, ledger.txt, ledger-full.txt, report.txt)")
        }
    }

    /// The daemons start (with a clean signal mask) and connect; the laptop makes the container
    /// and the folders; the engine carries them; the desktop joins and sees them; both watch.
    func setUp() throws {
        try engine.start()
        report += engine.startReport()
        let signals = try SyncthingDaemon.childSignalState()
        report.append("children start with SigBlk=\(signals.blocked) SigIgn=\(signals.ignored)")
        if signals.blocked != "0000000000000000" {
            incidents.append("children start with blocked signals: \(signals.blocked)")
            Issue.record("children start with blocked signals: \(signals.blocked)")
        }
        if let cluster = engine as? SyncthingCluster {
            try cluster.waitUntilAllConnected(timeout: .seconds(30))
        } else {
            try engine.waitUntilConnected(true, timeout: .seconds(30))
        }

        let folders = ["Work", "Home", "Doomed-1", "Doomed-2"]
        for name in folders {
            let entry = ledger.run(.addFolder(name), on: laptop, by: "setup")
            try #require(entry.acknowledged, "\(entry.summary)")
        }
        let carried = engine.waitUntilInSync(timeout: .seconds(30))
        try #require(
            carried.took != nil,
            "the engine did not carry the laptop's first logs within 30 s: \(carried.last)"
        )
        for device in devices.dropFirst() {
            let joined = ledger.run(.sync, on: device, by: "setup")
            try #require(joined.acknowledged, "\(joined.summary)")
            var seen: [String] = []
            let deadline = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < deadline {
                seen = ledger.run(.listFolders, on: device, by: "setup").lines.compactMap(LedgerExpectations.folderName)
                if Set(folders).isSubset(of: seen) { break }
                Thread.sleep(forTimeInterval: 0.5)
            }
            try #require(Set(folders).isSubset(of: seen), "the \(device.name) never saw the laptop's folders: \(seen)")
        }
        watches = try devices.map { try WatchProcess($0, ledger: ledger) }
    }

    /// The edits: command loops on both devices, and the staged clashes on a timeline of their own.
    func edit() throws {
        let start = ledger.now
        let end = start + .milliseconds(Int(settings.seconds * 1000))
        let workersDone = DispatchGroup()
        for (deviceIndex, (device, watch)) in zip(devices, watches).enumerated() {
            for number in 1...settings.workers {
                let seed = settings.seed &+ UInt64(deviceIndex * 100 + number)
                let ledger = self.ledger
                workersDone.enter()
                Thread.detachNewThread {
                    var worker = NotesWorker(
                        device: device,
                        name: "w\(number)",
                        ledger: ledger,
                        watch: watch,
                        seed: seed
                    )
                    worker.run(until: end)
                    workersDone.leave()
                }
            }
        }
        let stage = StagedClashes(
            ledger: ledger,
            engine: engine,
            laptop: laptop,
            desktop: desktop,
            start: start,
            length: settings.seconds,
            clashes: settings.clashes
        )
        let staged = stage.run()
        report += staged.report
        incidents += staged.problems
        let ended = workersDone.wait(timeout: .now() + .seconds(Int(settings.seconds) + 120)) == .success
        try #require(ended, "the workers did not finish within 120 s of the run's end")
        editsEnded = ledger.now
        let entries = ledger.all
        report.append(
            "run: \(entries.count) commands, \(entries.filter(\.acknowledged).count) acknowledged, "
                + "\(entries.compactMap(\.addedID).count) notes added, edits ended at \(seconds(editsEnded))"
        )
    }

    /// The devices' final lists, and the convergence check: the engine carries everything (within
    /// 60 s), then every device lists the same notes within its latency plus 5 s, and still does
    /// a second later. Gives up 30 s past that bound, to tell "late" from "never".
    func converge() -> (lists: [String: [String]], checks: [CheckResult]) {
        var result = CheckResult(name: "identical lists within the engine's latency plus 5 s")
        let carried = engine.waitUntilInSync(timeout: .seconds(60))
        let settled = ledger.now
        engineSettled = settled
        report.append(
            "engine: " + (carried.took.map { "in sync \(seconds($0)) after the edits" } ?? "NOT in sync within 60 s")
                + "; \(carried.last)"
        )
        if carried.took == nil {
            result.problems.append("the engine did not settle within 60 s of the edits: \(carried.last)")
        }
        let deadline = settled + .seconds(5)
        func allLists() -> [String: [String]] {
            Dictionary(uniqueKeysWithValues: devices.map { ($0.name, notesLines(.list, on: $0)) })
        }
        func identical(_ lists: [String: [String]]) -> Bool { Set(lists.values).count == 1 }
        var lists: [String: [String]] = [:]
        var convergedAt: Duration?
        while ledger.now < deadline + .seconds(30) {
            lists = allLists()
            if identical(lists) && engine.snapshot().inSync {
                let at = ledger.now
                Thread.sleep(forTimeInterval: 1)
                let again = allLists()
                if again == lists {
                    convergedAt = at
                    break
                }
                lists = again
                continue
            }
            Thread.sleep(forTimeInterval: 0.5)
        }
        var copies = CheckResult(name: "the engine's copies of the container identical once it is in sync")
        var compared = engine.folderDifferences()
        if !compared.differences.isEmpty, engine.waitUntilInSync(timeout: .seconds(15)).took != nil {
            compared = engine.folderDifferences()
        }
        copies.problems = compared.differences
        report.append(
            "container copies: \(compared.files) files, \(compared.differences.isEmpty ? "identical" : "\(compared.differences.count) differences")"
                + (compared.temporaries.isEmpty
                    ? "" : "; temporary files left: \(compared.temporaries.joined(separator: ", "))")
        )
        var quiet = CheckResult(name: "no temporary file of Concord's in any copy of the container")
        quiet.problems = compared.temporaries.filter { $0.hasSuffix(".concord-tmp") }
        let counts = devices.map { "\(lists[$0.name]?.count ?? 0)" }.joined(separator: ", ")
        if let convergedAt {
            report.append(
                "lists identical at \(seconds(convergedAt)) (\(counts) notes; engine settled at \(seconds(settled)))"
            )
            if convergedAt > deadline {
                result.problems.append(
                    "identical only at \(seconds(convergedAt)), \(seconds(convergedAt - settled)) after the engine settled"
                )
            }
        } else {
            let expectations = LedgerExpectations(ledger.all, watchLines: ledger.watchLines)
            var differences = ""
            for device in devices.dropFirst() where lists[device.name] != lists[laptop.name] {
                differences +=
                    listDifference(
                        (laptop.name, lists[laptop.name] ?? []),
                        (device.name, lists[device.name] ?? [])
                    ) + "\n"
            }
            let ids = Set(differences.split(separator: "\n").compactMap { NoteLine(String($0))?.id })
            result.problems.append(
                "still different \(seconds(ledger.now - settled)) after the engine settled (\(counts) notes):\n"
                    + differences
                    + ids.sorted().map { "note \($0):\n" + expectations.history(of: $0) }.joined(separator: "\n")
                    + labelHistory(differences)
            )
        }
        return (lists, [result, copies, quiet])
    }

    /// The watch processes stop cleanly; then every check against the ledger, on each device's
    /// final state.
    func check(convergence: (lists: [String: [String]], checks: [CheckResult])) -> [CheckResult] {
        var stopped = CheckResult(name: "watch processes stop cleanly")
        for watch in watches {
            let (status, errors) = watch.stop()
            if status != 0 || !watch.lines.contains("stopped") {
                stopped.problems.append("\(watch.device.name): exit \(status.map(String.init) ?? "killed"), \(errors)")
            }
        }
        watches = []
        let expectations = LedgerExpectations(ledger.all, watchLines: ledger.watchLines)
        var checks = convergence.checks + [stopped, expectations.commandsEnded()]
        for device in devices {
            let lines = convergence.lists[device.name] ?? []
            let notes = lines.compactMap(NoteLine.init)
            let folders = ledger.run(.listFolders, on: device, by: "check").lines.filter { $0.hasPrefix("folder ") }
            report.append("\(device.name) folders: \(folders.joined(separator: ", "))")
            checks += expectations.presence(in: notes, device: device.name)
            checks += expectations.lastWriters(in: notes, device: device.name)
            checks += expectations.duplicates(notes: notes, folders: folders, device: device.name)
        }
        // Each store agrees with its own sync history (what no later log would repair).
        var history = CheckResult(name: "each store in step with its sync history")
        for device in devices {
            let lines = ledger.run(.status, on: device, by: "check").lines
            if !lines.contains("history in step with the store") {
                history.problems.append(
                    "\(device.name): \(lines.first { $0.hasPrefix("history") } ?? "no history line in `notes status`")"
                )
            }
        }
        checks.append(history)
        let warnings = ledger.text().split(separator: "\n").filter { $0.contains("sync warning") }
        report.append("sync warnings printed: \(warnings.count)" + warnings.prefix(5).map { "\n  " + $0 }.joined())
        var logged: [String: Int] = [:]
        for entry in ledger.all {
            for warning in entry.loggedWarnings {
                // The same warning about different files counts once.
                logged[
                    warning.replacing(#/\/[^ ]*/#, with: "PATH").replacing(#/[0-9a-f]{8}-[0-9a-f-]{27}/#, with: "ID"),
                    default: 0
                ] += 1
            }
        }
        report.append(
            "warnings logged on standard error by commands that succeeded: \(logged.values.reduce(0, +))"
                + logged.sorted { $0.value > $1.value }.prefix(5).map { "\n  \($0.value)× \($0.key)" }.joined()
        )
        for check in checks {
            report.append(
                check.passed ? "PASS \(check.name)" : "FAIL \(check.name): \(check.problems.count) problem(s)"
            )
        }
        return checks
    }

    /// The `note ...` lines of a `list` run on `device`.
    private func notesLines(_ operation: NotesOperation, on device: EngineDevice) -> [String] {
        ledger.run(operation, on: device, by: "check").lines.filter { $0.hasPrefix("note ") }
    }

    /// For each tag label in `differences`: the first commands on each device that used it
    /// (a label made on both devices is two records until the duplicate policy keeps one).
    private func labelHistory(_ differences: String) -> String {
        let labels = Set(
            differences.split(separator: "\n").compactMap { NoteLine(String($0))?.fields["tags"] }
                .flatMap {
                    $0.trimmingCharacters(in: CharacterSet(charactersIn: "[]")).split(separator: ",").map(String.init)
                }
        )
        var lines: [String] = []
        for label in labels.sorted() {
            for device in devices.map(\.name) {
                let first = ledger.all.first { entry in
                    guard entry.device == device, entry.acknowledged else { return false }
                    switch entry.operation {
                    case .addNote(_, _, let tag, _): return tag == label
                    case .tagNote(_, let tagged, let remove): return tagged == label && !remove
                    default: return false
                    }
                }
                lines.append("tag \(label) first used on \(device): " + (first?.summary ?? "never"))
            }
        }
        return lines.isEmpty ? "" : "\n" + lines.joined(separator: "\n")
    }
}
