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

    /// Waits until every daemon is connected (`true`) or disconnected (`false`) to every other.
    func waitUntilConnected(_ connected: Bool = true, timeout: Duration) throws {
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

    /// Waits until the engine has carried everything: in sync at two looks `settle` apart with no
    /// daemon's sequence moving in between (a file written just before the first look has had its
    /// watcher delay to show up). Returns how long it took, or `nil` and the last look.
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
}

extension SyncthingCluster {
    /// The files of each daemon's copy of the folder (relative path → contents), without the
    /// daemon's own marker.
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

    /// Whether `path` is one of the daemon's own temporary files (`.syncthing.NAME.tmp`: a pull
    /// in progress, or left behind when the file it pulled vanished; kept for a day to resume,
    /// never synced).
    static func isEngineTemporary(_ path: String) -> Bool {
        let name = path.split(separator: "/").last ?? ""
        return name.hasPrefix(".syncthing.") && name.hasSuffix(".tmp")
    }

    /// How the daemons' copies of the folder differ (empty when they are identical; the
    /// daemons' own temporary files aside, which are listed apart), and how many files the
    /// first holds. Conflict copies count as differences.
    func folderDifferences() -> (files: Int, differences: [String], temporaries: [String]) {
        let copies = daemons.map { name in
            (name.name, contents(of: name.name).filter { !Self.isEngineTemporary($0.key) })
        }
        let temporaries = daemons.flatMap { daemon in
            contents(of: daemon.name).keys.filter(Self.isEngineTemporary).sorted().map { "\(daemon.name): \($0)" }
        }
        guard let (firstName, first) = copies.first else { return (0, [], temporaries) }
        var differences: [String] = []
        for (name, files) in copies {
            for path in files.keys.sorted() where path.contains(".sync-conflict-") {
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

/// The engine's state at one look.
struct EngineSnapshot: CustomStringConvertible {
    var inSync: Bool
    var sequences: [Int]
    var description: String
}
