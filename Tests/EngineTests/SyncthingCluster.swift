import Foundation

/// Syncthing daemons on loopback that share one folder: each device has its own copy of the
/// folder, which its daemon keeps in step with the others'. Made, started, watched and stopped
/// by the tests; ``stop()`` must run whatever the outcome (it stops each daemon by its PID).
final class SyncthingCluster: @unchecked Sendable {
    let folderID: String
    let daemons: [SyncthingDaemon]
    /// Each daemon's copy of the shared folder, by daemon name.
    let folders: [String: URL]

    /// Generates a daemon per device in `root` (homes `root/NAME-syncthing`), each sharing
    /// `folderID` at `folders[NAME]` with all the others.
    init(
        root: URL,
        folderID: String = "concord",
        folders: [(name: String, path: URL)],
        rescanIntervalS: Int = 10
    ) throws {
        self.folderID = folderID
        let ports = try freeLoopbackPorts(folders.count * 2)
        var daemons: [SyncthingDaemon] = []
        for (index, device) in folders.enumerated() {
            daemons.append(
                try SyncthingDaemon(
                    name: device.name,
                    home: root.appendingPathComponent("\(device.name)-syncthing"),
                    guiPort: ports[2 * index],
                    listenPort: ports[2 * index + 1]
                )
            )
        }
        for (daemon, device) in zip(daemons, folders) {
            try FileManager.default.createDirectory(at: device.path, withIntermediateDirectories: true)
            // The README's rule: Concord's temporaries are not carried.
            try Data("(?d).*.concord-tmp\n".utf8).write(to: device.path.appendingPathComponent(".stignore"))
            try daemon.configure(
                folderID: folderID,
                path: device.path,
                peers: daemons.filter { $0 !== daemon },
                rescanIntervalS: rescanIntervalS
            )
        }
        self.daemons = daemons
        self.folders = Dictionary(uniqueKeysWithValues: folders.map { ($0.name, $0.path) })
    }

    func daemon(_ name: String) -> SyncthingDaemon { daemons.first { $0.name == name }! }

    /// Starts every daemon (each waits for its REST API).
    func start() throws {
        for daemon in daemons { try daemon.start() }
    }

    /// Stops every daemon by PID (SIGTERM, then SIGKILL after a bound); how each ended.
    @discardableResult
    func stop() -> [String] { daemons.map { $0.stop() } }

    /// Waits until every daemon is connected to every other.
    func waitUntilAllConnected(timeout: Duration) throws {
        try waitUntilConnected(true, between: daemons, timeout: timeout)
    }

    /// Waits until each of `daemons` is connected (`true`) or disconnected (`false`) to each other.
    func waitUntilConnected(_ connected: Bool, between daemons: [SyncthingDaemon], timeout: Duration) throws {
        let deadline = ContinuousClock.now + timeout
        var last = ""
        while ContinuousClock.now < deadline {
            var links: [String] = []
            var done = true
            for daemon in daemons {
                for peer in daemons where peer !== daemon {
                    let state = (try? daemon.isConnected(to: peer))
                    links.append(
                        "\(daemon.name)→\(peer.name): \(state.map { $0 ? "connected" : "not connected" } ?? "no answer")"
                    )
                    if state != connected { done = false }
                }
            }
            last = links.joined(separator: ", ")
            if done { return }
            Thread.sleep(forTimeInterval: 0.2)
        }
        throw SyncthingError(
            "the daemons were not all \(connected ? "connected" : "disconnected") within \(timeout): \(last)\n"
                + daemons.map { "\($0.name) log:\n\($0.logTail(15))" }.joined(separator: "\n")
        )
    }

    /// What the engine reports now: in sync when every daemon is connected to every other, its
    /// folder idle with nothing needed and no errors, every peer complete, and all agree on the
    /// number of global items.
    func snapshot() -> EngineSnapshot {
        var lines: [String] = []
        var inSync = true
        var sequences: [Int] = []
        var globals = Set<Int>()
        for daemon in daemons {
            do {
                let status = try daemon.folderStatus(folderID)
                var line = "\(daemon.name): \(status)"
                if status.state != "idle" || status.needItems != 0 || status.pullErrors > 0 || status.errors > 0 {
                    inSync = false
                }
                sequences.append(status.sequence)
                globals.insert(status.globalItems)
                for peer in daemons where peer !== daemon {
                    let connected = try daemon.isConnected(to: peer)
                    let completion = try daemon.completion(folderID: folderID, peer: peer)
                    line +=
                        "; \(peer.name) \(connected ? "connected" : "NOT connected") \(completion.percent)% need=\(completion.needItems)"
                    if !connected || completion.percent < 100 || completion.needItems != 0 { inSync = false }
                }
                lines.append(line)
            } catch {
                lines.append("\(daemon.name): \(error)")
                inSync = false
            }
        }
        if globals.count > 1 { inSync = false }
        return EngineSnapshot(inSync: inSync, sequences: sequences, description: lines.joined(separator: " | "))
    }
}

extension SyncthingCluster: FileSyncEngine {
    var name: String { daemons.count == 2 ? "Syncthing" : "Syncthing (\(daemons.count) devices)" }

    func startReport() -> [String] {
        ["syncthing pids: " + daemons.map { "\($0.name) \($0.pid ?? -1)" }.joined(separator: ", ")]
    }

    /// Pauses or resumes the second daemon's (the desktop's) link to the first (the laptop's).
    func setLinkPaused(_ paused: Bool) throws {
        try daemons[1].setPaused(paused, peer: daemons[0])
    }

    /// Waits until the laptop and the desktop are linked (`true`) or apart (`false`).
    func waitUntilConnected(_ connected: Bool, timeout: Duration) throws {
        try waitUntilConnected(connected, between: Array(daemons.prefix(2)), timeout: timeout)
    }

    /// Whether `path` is one of the daemon's own temporary files (`.syncthing.NAME.tmp`: a pull
    /// in progress, or left behind when the file it pulled vanished; kept for a day to resume,
    /// never synced).
    func isEngineTemporary(_ path: String) -> Bool {
        let name = path.split(separator: "/").last ?? ""
        return name.hasPrefix(".syncthing.") && name.hasSuffix(".tmp")
    }

    func isConflictCopy(_ path: String) -> Bool { path.contains(".sync-conflict-") }
}

/// The engine's state at one look.
struct EngineSnapshot: CustomStringConvertible {
    var inSync: Bool
    var sequences: [Int]
    var description: String
}
