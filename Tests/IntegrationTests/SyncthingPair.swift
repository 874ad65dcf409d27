import ConcordTestSupport
import Foundation
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Two Syncthing daemons on loopback sharing one folder, for the conflict-copy tests: each with
/// its own home, REST API and sync listener on 127.0.0.1 only (no discovery, relays, NAT, usage
/// reports or upgrades), started as child processes with a clean signal mask and stopped by PID.
/// Every wait is bounded. (`Tests/EngineTests` drives the Notes sample with a fuller harness of
/// its own.)
final class SyncthingPair: @unchecked Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// One daemon and its copy of the folder.
    final class Node: @unchecked Sendable {
        let name: String
        let home: URL
        let folder: URL
        let guiPort: Int
        let listenPort: Int
        let apiKey = "concord-" + UUID().uuidString.lowercased()
        fileprivate(set) var deviceID = ""
        fileprivate var process: Subprocess?

        init(name: String, root: URL, ports: (Int, Int)) {
            self.name = name
            home = root.appendingPathComponent("\(name)-syncthing")
            folder = root.appendingPathComponent(name)
            (guiPort, listenPort) = ports
        }

        var log: URL { home.appendingPathComponent("syncthing.log") }
        var logTail: String {
            ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").suffix(15)
                .joined(separator: "\n")
        }
    }

    static let executable = ProcessInfo.processInfo.environment["CONCORD_SYNCTHING"] ?? "/usr/bin/syncthing"
    static var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: executable) }

    let folderID = "versions"
    let nodes: [Node]

    /// Generates both daemons' keys and configurations in `root` (folders `root/one`, `root/two`).
    init(root: URL) throws {
        let base = Int.random(in: 20_000..<60_000)
        nodes = [
            Node(name: "one", root: root, ports: (base, base + 1)),
            Node(name: "two", root: root, ports: (base + 2, base + 3)),
        ]
        for node in nodes {
            try FileManager.default.createDirectory(at: node.home, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(
                at: node.folder.appendingPathComponent(".stfolder"),
                withIntermediateDirectories: true
            )
            let generate = try Subprocess(
                Self.executable,
                ["generate", "--home=\(node.home.path)", "--no-default-folder"],
                environment: ProcessInfo.processInfo.environment.merging(["STNODEFAULTFOLDER": "1"]) { $1 },
                captureStandardError: true
            )
            // The device ID goes to standard error, the log lines to standard output.
            var output = ""
            while let line = generate.readLine(timeout: .seconds(30)) { output += line + "\n" }
            output += generate.readStandardError()
            _ = generate.wait(timeout: .seconds(30))
            guard let match = output.firstMatch(of: /Device ID: ([A-Z0-9-]{63})/) else {
                throw Failure(description: "syncthing generate printed no device id: \(output)")
            }
            node.deviceID = String(match.1)
        }
        for node in nodes { try configure(node) }
    }

    private func configure(_ node: Node) throws {
        let peer = nodes.first { $0 !== node }!
        let config = """
            <configuration version="36">
                <folder id="\(folderID)" label="\(folderID)" path="\(node.folder.path)" type="sendreceive" \
            rescanIntervalS="5" fsWatcherEnabled="true" fsWatcherDelayS="1" ignorePerms="false" autoNormalize="true">
                    <filesystemType>basic</filesystemType>
                    <device id="\(node.deviceID)" introducedBy=""></device>
                    <device id="\(peer.deviceID)" introducedBy=""></device>
                    <minDiskFree unit="%">0</minDiskFree>
                    <maxConflicts>10</maxConflicts>
                    <markerName>.stfolder</markerName>
                </folder>
                <device id="\(node.deviceID)" name="\(node.name)" compression="metadata" introducer="false">
                    <address>dynamic</address>
                </device>
                <device id="\(peer.deviceID)" name="\(peer.name)" compression="metadata" introducer="false">
                    <address>tcp://127.0.0.1:\(peer.listenPort)</address>
                    <autoAcceptFolders>false</autoAcceptFolders>
                </device>
                <gui enabled="true" tls="false" debugging="false">
                    <address>127.0.0.1:\(node.guiPort)</address>
                    <apikey>\(node.apiKey)</apikey>
                </gui>
                <options>
                    <listenAddress>tcp://127.0.0.1:\(node.listenPort)</listenAddress>
                    <globalAnnounceEnabled>false</globalAnnounceEnabled>
                    <localAnnounceEnabled>false</localAnnounceEnabled>
                    <relaysEnabled>false</relaysEnabled>
                    <natEnabled>false</natEnabled>
                    <urAccepted>-1</urAccepted>
                    <crashReportingEnabled>false</crashReportingEnabled>
                    <autoUpgradeIntervalH>0</autoUpgradeIntervalH>
                    <startBrowser>false</startBrowser>
                    <reconnectionIntervalS>1</reconnectionIntervalS>
                    <minHomeDiskFree unit="%">0</minHomeDiskFree>
                </options>
            </configuration>

            """
        try Data(config.utf8).write(to: node.home.appendingPathComponent("config.xml"), options: .atomic)
    }

    /// Starts both daemons and waits (bounded) until each answers on its REST API.
    func start() throws {
        for node in nodes {
            var environment = ProcessInfo.processInfo.environment
            environment.merge([
                "STNODEFAULTFOLDER": "1", "STNOUPGRADE": "1", "STNORESTART": "1", "HOME": node.home.path,
            ]) { $1 }
            // The child opens its log for writing without creating it.
            guard FileManager.default.createFile(atPath: node.log.path, contents: nil) else {
                throw Failure(description: "cannot create \(node.log.path)")
            }
            node.process = try Subprocess(
                Self.executable,
                ["serve", "--home=\(node.home.path)", "--no-browser", "--no-restart", "--no-upgrade", "--logflags=3"],
                environment: environment,
                standardOutputPath: node.log.path
            )
        }
        for node in nodes {
            try waitUntil("syncthing \(node.name) answers", timeout: .seconds(30), node: node) {
                (try? self.json(node, "GET", "/rest/system/ping"))?["ping"] as? String == "pong"
            }
        }
    }

    /// Stops both daemons by their PIDs (SIGTERM, then SIGKILL after a bound).
    func stop() {
        for node in nodes {
            _ = node.process?.terminate(grace: .seconds(10))
            node.process = nil
        }
    }

    deinit { stop() }

    /// Waits until the two daemons are connected (or, for `false`, not).
    func waitUntilConnected(_ connected: Bool = true, timeout: Duration = .seconds(60)) throws {
        try waitUntil("the daemons \(connected ? "connect" : "disconnect")", timeout: timeout, node: nodes[0]) {
            self.nodes.allSatisfy { node in
                let peer = self.nodes.first { $0 !== node }!
                let connections = (try? self.json(node, "GET", "/rest/system/connections"))?["connections"]
                let state = ((connections as? [String: Any])?[peer.deviceID] as? [String: Any])?["connected"] as? Bool
                return state == connected
            }
        }
    }

    /// Pauses (or resumes) both daemons' links to each other.
    func setPaused(_ paused: Bool) throws {
        for node in nodes {
            let peer = nodes.first { $0 !== node }!
            _ = try request(node, "POST", "/rest/system/\(paused ? "pause" : "resume")?device=\(peer.deviceID)")
        }
    }

    /// Asks `node` to scan the folder now.
    func scan(_ node: Node) throws {
        _ = try request(node, "POST", "/rest/db/scan?folder=\(folderID)", timeout: .seconds(30))
    }

    /// Polls `condition` (every 100 ms) until it holds, or fails after `timeout` with the log of
    /// `node`.
    func waitUntil(
        _ what: String,
        timeout: Duration,
        node: Node? = nil,
        _ condition: () -> Bool
    ) throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition() { return }
            Thread.sleep(forTimeInterval: 0.1)
        }
        throw Failure(
            description: "waited \(timeout) for: \(what)\n"
                + nodes.map { "\($0.name):\n\($0.logTail)" }.joined(separator: "\n")
        )
    }

    // MARK: REST

    private static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.connectionProxyDictionary = [:]
        return URLSession(configuration: configuration)
    }()

    private func request(_ node: Node, _ method: String, _ path: String, timeout: Duration = .seconds(5)) throws -> Data
    {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(node.guiPort)\(path)")!)
        request.httpMethod = method
        request.timeoutInterval = Double(timeout.components.seconds)
        request.setValue(node.apiKey, forHTTPHeaderField: "X-API-Key")
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<(Data, Int)?>(nil)
        let task = Self.session.dataTask(with: request) { data, response, _ in
            result.withLock { $0 = (data ?? Data(), (response as? HTTPURLResponse)?.statusCode ?? 0) }
            done.signal()
        }
        task.resume()
        guard done.wait(timeout: .now() + .seconds(Int(timeout.components.seconds) + 1)) == .success else {
            task.cancel()
            throw Failure(description: "\(method) \(path) on \(node.name): no answer")
        }
        guard let (data, status) = result.withLock({ $0 }), (200..<300).contains(status) else {
            throw Failure(description: "\(method) \(path) on \(node.name): failed")
        }
        return data
    }

    private func json(_ node: Node, _ method: String, _ path: String) throws -> [String: Any] {
        let data = try request(node, method, path)
        return (try JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
    }
}
