import Foundation
import Synchronization

/// A real file-sync engine that keeps the devices' copies of one folder in step, as the engine
/// tests drive it: started and stopped (every process by its PID), its link between the laptop
/// and the desktop paused and resumed, asked whether it has carried everything.
protocol FileSyncEngine: AnyObject, Sendable {
    /// The engine's name, for the report.
    var name: String { get }
    /// Each device's copy of the folder, by device name.
    var folders: [String: URL] { get }
    /// Starts the engine.
    func start() throws
    /// Stops every process it started; how each ended, for the report. Safe to call twice.
    @discardableResult
    func stop() -> [String]
    /// Lines for the report about what was started (PIDs, commands).
    func startReport() -> [String]
    /// Waits until the devices are linked (`true`) or apart (`false`).
    func waitUntilConnected(_ connected: Bool, timeout: Duration) throws
    /// Pauses (`true`) or resumes the link between the laptop and the desktop.
    func setLinkPaused(_ paused: Bool) throws
    /// What the engine says now.
    func snapshot() -> EngineSnapshot
    /// Whether `path` (relative to a copy of the folder) is one of the engine's own temporaries.
    func isEngineTemporary(_ path: String) -> Bool
    /// Whether `path` is one of the engine's conflict copies.
    func isConflictCopy(_ path: String) -> Bool
}

extension FileSyncEngine {
    /// Waits until the engine has carried everything: in sync at two looks `settle` apart with
    /// nothing moving in between. Returns how long it took, or `nil` and the last look.
    func waitUntilInSync(
        timeout: Duration,
        settle: Duration = .milliseconds(1500)
    ) -> (took: Duration?, last: EngineSnapshot) {
        let start = ContinuousClock.now
        let deadline = start + timeout
        var last = snapshot()
        while ContinuousClock.now < deadline {
            if last.inSync {
                Thread.sleep(
                    forTimeInterval: Double(settle.components.seconds) + Double(settle.components.attoseconds) / 1e18
                )
                let again = snapshot()
                if again.inSync && again.sequences == last.sequences { return (ContinuousClock.now - start, again) }
                last = again
                continue
            }
            Thread.sleep(forTimeInterval: 0.25)
            last = snapshot()
        }
        return (nil, last)
    }

    /// The files of `name`'s copy of the folder (relative path → contents), without the
    /// engine's own marker folders.
    func contents(of name: String) -> [String: Data] {
        guard let folder = folders[name]?.standardizedFileURL else { return [:] }
        var files: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.isRegularFileKey])
        while let url = enumerator?.nextObject() as? URL {
            guard (try? url.resourceValues(forKeys: [.isRegularFileKey]))?.isRegularFile == true else { continue }
            let path = String(url.standardizedFileURL.path.dropFirst(folder.path.count + 1))
            if path.hasPrefix(".stfolder") { continue }
            files[path] = (try? Data(contentsOf: url)) ?? Data()
        }
        return files
    }

    /// How the copies of the folder differ (empty when identical; the engine's own temporary
    /// files aside, listed apart, and Concord's own temporaries, which the engines are told to
    /// ignore), and how many files the first holds. Conflict copies count as differences.
    func folderDifferences() -> (files: Int, differences: [String], temporaries: [String]) {
        let names = folders.keys.sorted()
        func kept(_ path: String) -> Bool {
            !isEngineTemporary(path) && !(path.split(separator: "/").last ?? "").hasSuffix(".concord-tmp")
        }
        let copies = names.map { name in (name, contents(of: name).filter { kept($0.key) }) }
        let temporaries = names.flatMap { name in
            contents(of: name).keys.filter { !kept($0) }.sorted().map { "\(name): \($0)" }
        }
        guard let (firstName, first) = copies.first else { return (0, [], temporaries) }
        var differences: [String] = []
        for (name, files) in copies {
            for path in files.keys.sorted() where isConflictCopy(path) {
                differences.append("\(name) holds a conflict copy: \(path)")
            }
        }
        for (name, other) in copies.dropFirst() {
            for path in Set(first.keys).union(other.keys).sorted() {
                switch (first[path], other[path]) {
                case (nil, _?): differences.append("only on \(name): \(path)")
                case (_?, nil): differences.append("only on \(firstName): \(path)")
                case (let a?, let b?) where a != b:
                    differences.append("differs: \(path) (\(a.count) and \(b.count) bytes)")
                default: break
                }
            }
        }
        return (first.count, differences, temporaries)
    }
}

/// An engine that syncs two local folders by running one command again and again: unison
/// (`unison A B -batch -auto -times`, with the ignore rule the README gives) or rclone bisync
/// (1.60, with `--resync` after a critical error, and the README's filter). Each pass runs to
/// its end (bounded: a pass that hangs is killed by its PID); pausing lets the running pass end
/// and starts no other until resumed.
final class LoopEngine: FileSyncEngine, @unchecked Sendable {
    enum Kind: String, Sendable, CaseIterable {
        case unison, rclone

        var executable: URL { URL(fileURLWithPath: "/usr/bin/\(rawValue)") }
        var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: executable.path) }
    }

    let kind: Kind
    let folders: [String: URL]
    private let pair: (URL, URL)
    private let work: URL
    private let passTimeout: Duration = .seconds(60)

    private struct State {
        var running = false
        var paused = false
        var stopping = false
        var passing = false
        var child: Int32?
        var passes = 0
        var failedPasses = 0
        var resyncs = 0
        var needsResync = true
        var lastOutput = ""
        /// The last lines of the first failed pass, for the report.
        var firstFailure: String?
        var lastStatus: Int32 = 0
        var loopEnded = false
    }
    private let state = Mutex(State())
    private let changed = NSCondition()

    var name: String { kind == .unison ? "unison" : "rclone bisync" }

    /// Syncs `folders` (two: the laptop's copy first, then the desktop's), with the engine's
    /// state (unison's archives, rclone's listings and filter) in `root`.
    init(_ kind: Kind, root: URL, folders: [(name: String, path: URL)]) throws {
        precondition(folders.count == 2, "a loop engine syncs two folders")
        self.kind = kind
        self.folders = Dictionary(uniqueKeysWithValues: folders.map { ($0.name, $0.path) })
        pair = (folders[0].path, folders[1].path)
        work = root.appendingPathComponent("\(kind.rawValue)-state", isDirectory: true)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        for folder in folders {
            try FileManager.default.createDirectory(at: folder.path, withIntermediateDirectories: true)
        }
        // The README's rule for rclone: Concord's temporaries are not carried.
        try Data("- .*.concord-tmp\n".utf8).write(to: work.appendingPathComponent("filters.txt"))
        try Data().write(to: work.appendingPathComponent("rclone.conf"))
    }

    private var arguments: [String] {
        switch kind {
        case .unison:
            return [
                pair.0.path, pair.1.path, "-batch", "-auto", "-times", "-ui", "text", "-ignore",
                "Name .*.concord-tmp", "-confirmbigdel=false",
            ]
        case .rclone:
            return [
                "bisync", pair.0.path, pair.1.path, "--workdir", work.appendingPathComponent("bisync").path,
                "--filters-file", work.appendingPathComponent("filters.txt").path, "--force",
            ]
        }
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["UNISON"] = work.appendingPathComponent("unison").path
        environment["RCLONE_CONFIG"] = work.appendingPathComponent("rclone.conf").path
        environment["HOME"] = work.path
        return environment
    }

    func start() throws {
        guard kind.isInstalled else {
            throw SyncthingError("\(kind.executable.path) is not installed (make deps-engine)")
        }
        state.withLock { $0.running = true }
        Thread.detachNewThread { [self] in loop() }
    }

    func startReport() -> [String] {
        ["\(name) passes: \(kind.executable.path) \(arguments.joined(separator: " "))"]
    }

    private func loop() {
        while true {
            let (stop, paused) = state.withLock { state in (state.stopping, state.paused) }
            if stop { break }
            if paused {
                changed.lock()
                _ = changed.wait(until: Date().addingTimeInterval(0.1))
                changed.unlock()
                continue
            }
            pass()
            // A short breath between passes: the engine's own latency.
            Thread.sleep(forTimeInterval: 0.2)
        }
        state.withLock { $0.loopEnded = true }
        changed.lock()
        changed.broadcast()
        changed.unlock()
    }

    /// One run of the command, to its end.
    private func pass() {
        let resync = state.withLock { state -> Bool in
            state.passing = true
            return kind == .rclone && state.needsResync
        }
        defer {
            state.withLock { $0.passing = false }
            changed.lock()
            changed.broadcast()
            changed.unlock()
        }
        let process = Process()
        process.executableURL = kind.executable
        process.arguments = arguments + (resync ? ["--resync"] : [])
        process.environment = environment
        // The pass's output goes to a file, read when it ends: no pipe, no reader thread.
        let log = work.appendingPathComponent("pass.log")
        guard FileManager.default.createFile(atPath: log.path, contents: nil),
            let handle = FileHandle(forWritingAtPath: log.path)
        else {
            state.withLock { $0.lastOutput = "cannot create \(log.path)" }
            return
        }
        defer { try? handle.close() }
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        let ended = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in ended.signal() }
        do {
            try withCleanSignalMask { try process.run() }
        } catch {
            state.withLock { $0.lastOutput = "cannot start: \(error)" }
            return
        }
        state.withLock { $0.child = process.processIdentifier }
        if ended.wait(timeout: .now() + .seconds(Int(passTimeout.components.seconds))) != .success {
            kill(process.processIdentifier, SIGKILL)
            _ = ended.wait(timeout: .now() + .seconds(10))
        }
        let text = String(decoding: (try? Data(contentsOf: log)) ?? Data(), as: UTF8.self)
        let status = process.isRunning ? -1 : process.terminationStatus
        state.withLock { state in
            state.child = nil
            state.passes += 1
            state.lastStatus = status
            state.lastOutput = String(text.suffix(2_000))
            if resync { state.resyncs += 1 }
            if kind == .rclone {
                // A critical error says the listings must be made again: the next pass resyncs.
                state.needsResync = status != 0 && (text.contains("critical error") || text.contains("--resync"))
            }
            if status != 0 {
                state.failedPasses += 1
                if state.firstFailure == nil {
                    state.firstFailure = text.split(separator: "\n").filter {
                        $0.contains("ERROR") || $0.contains("error")
                    }
                    .prefix(3).joined(separator: " / ")
                }
            }
        }
    }

    func stop() -> [String] {
        let child = state.withLock { state -> Int32? in
            state.stopping = true
            return state.child
        }
        let wasRunning = state.withLock { $0.running }
        guard wasRunning else { return ["\(name): not started"] }
        // The running pass ends by itself (bounded); past the bound it is killed by its PID.
        let deadline = Date().addingTimeInterval(Double(passTimeout.components.seconds) + 5)
        changed.lock()
        while !state.withLock({ $0.loopEnded }) && Date() < deadline {
            _ = changed.wait(until: min(deadline, Date().addingTimeInterval(0.2)))
            if Date() > deadline.addingTimeInterval(-5), let child { kill(child, SIGKILL) }
        }
        changed.unlock()
        let summary = state.withLock { state in
            state.running = false
            return
                "\(name): \(state.passes) passes, \(state.failedPasses) failed, \(state.resyncs) resync(s); loop \(state.loopEnded ? "ended" : "DID NOT END")"
                + (state.firstFailure.map { "; first failure: \($0)" } ?? "")
        }
        return [summary]
    }

    func waitUntilConnected(_ connected: Bool, timeout: Duration) throws {
        let deadline = Date().addingTimeInterval(
            Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        )
        changed.lock()
        defer { changed.unlock() }
        while Date() < deadline {
            let (paused, passing, passes) = state.withLock { ($0.paused, $0.passing, $0.passes) }
            // Apart: paused and no pass running. Linked: not paused, and a pass has run.
            if connected ? (!paused && passes > 0) : (paused && !passing) { return }
            _ = changed.wait(until: min(deadline, Date().addingTimeInterval(0.1)))
        }
        throw SyncthingError(
            "\(name) was not \(connected ? "running" : "paused") within \(timeout): \(state.withLock { $0.lastOutput })"
        )
    }

    func setLinkPaused(_ paused: Bool) throws {
        state.withLock { $0.paused = paused }
        changed.lock()
        changed.broadcast()
        changed.unlock()
    }

    func snapshot() -> EngineSnapshot {
        let (paused, passes, status, output) = state.withLock { ($0.paused, $0.passes, $0.lastStatus, $0.lastOutput) }
        let compared = folderDifferences()
        var fingerprints: [Int] = []
        for name in folders.keys.sorted() {
            var hasher = Hasher()
            for (path, data) in contents(of: name).sorted(by: { $0.key < $1.key }) {
                hasher.combine(path)
                hasher.combine(data)
            }
            fingerprints.append(hasher.finalize())
        }
        let inSync = !paused && passes > 0 && compared.differences.isEmpty
        let tail = output.split(separator: "\n").suffix(2).joined(separator: " / ")
        return EngineSnapshot(
            inSync: inSync,
            sequences: fingerprints,
            description:
                "\(name): \(passes) passes, last exit \(status)\(paused ? ", paused" : ""), \(compared.files) files, "
                + "\(compared.differences.count) difference(s)\(compared.differences.first.map { " (\($0))" } ?? ""); \(tail)"
        )
    }

    func isEngineTemporary(_ path: String) -> Bool {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        switch kind {
        case .unison: return name.hasPrefix(".unison.") && name.hasSuffix(".unison.tmp")
        case .rclone: return name.hasSuffix(".partial")
        }
    }

    func isConflictCopy(_ path: String) -> Bool {
        switch kind {
        case .unison: return path.contains("(conflict") || path.contains(".unison.conflict")
        case .rclone: return path.hasSuffix("..path1") || path.hasSuffix("..path2")
        }
    }
}
