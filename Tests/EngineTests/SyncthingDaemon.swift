import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What went wrong with a Syncthing daemon: which one, and what it said.
struct SyncthingError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One Syncthing daemon for tests: its own home (keys, config, database, log), its REST API and
/// its sync listener on 127.0.0.1 only, no discovery, relays, NAT, usage or crash reporting, or
/// upgrades. Started and stopped by PID; every wait is bounded.
final class SyncthingDaemon: @unchecked Sendable {
    let name: String
    let home: URL
    let deviceID: String
    let apiKey: String
    let guiPort: Int
    let listenPort: Int
    /// The daemon's log (its standard output and error).
    var logURL: URL { home.appendingPathComponent("syncthing.log") }
    var listenAddress: String { "tcp://127.0.0.1:\(listenPort)" }

    private let running = Mutex<Process?>(nil)
    private let exited = DispatchSemaphore(value: 0)

    /// The executable: `$CONCORD_SYNCTHING`, else Debian's `/usr/bin/syncthing`.
    static var executableURL: URL {
        URL(fileURLWithPath: ProcessInfo.processInfo.environment["CONCORD_SYNCTHING"] ?? "/usr/bin/syncthing")
    }

    /// Whether the executable is there (the Makefile's `deps-engine` installs it).
    static var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: executableURL.path) }

    /// Generates the daemon's keys in `home` (`syncthing generate`) and keeps the ports it will use.
    init(name: String, home: URL, guiPort: Int, listenPort: Int) throws {
        self.name = name
        self.home = home
        self.guiPort = guiPort
        self.listenPort = listenPort
        apiKey = "concord-" + UUID().uuidString.lowercased()
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        let output = try Self.runToEnd(
            ["generate", "--home=\(home.path)", "--no-default-folder"],
            timeout: .seconds(30)
        )
        guard let match = output.firstMatch(of: /Device ID: ([A-Z0-9-]{63})/) else {
            throw SyncthingError("syncthing generate for \(name) printed no device id: \(output)")
        }
        deviceID = String(match.1)
    }

    /// Writes the whole `config.xml`: one folder `folderID` at `path`, shared with `peers` (each
    /// at its explicit loopback address); REST and sync on 127.0.0.1 only, nothing else on the
    /// network. The folder's marker (`.stfolder`) is made so the daemon accepts the folder.
    func configure(
        folderID: String,
        path: URL,
        peers: [SyncthingDaemon],
        rescanIntervalS: Int = 10,
        watcherDelayS: Int = 1
    ) throws {
        try FileManager.default.createDirectory(
            at: path.appendingPathComponent(".stfolder"),
            withIntermediateDirectories: true
        )
        func escaped(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
                .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
        }
        let members = ([self] + peers).map { "        <device id=\"\($0.deviceID)\" introducedBy=\"\"></device>" }
        let devices =
            [
                "    <device id=\"\(deviceID)\" name=\"\(escaped(name))\" compression=\"metadata\" introducer=\"false\">",
                "        <address>dynamic</address>", "        <paused>false</paused>", "    </device>",
            ]
            + peers.flatMap { peer in
                [
                    "    <device id=\"\(peer.deviceID)\" name=\"\(escaped(peer.name))\" compression=\"metadata\" introducer=\"false\">",
                    "        <address>\(peer.listenAddress)</address>", "        <paused>false</paused>",
                    "        <autoAcceptFolders>false</autoAcceptFolders>", "    </device>",
                ]
            }
        let lines =
            [
                "<configuration version=\"36\">",
                "    <folder id=\"\(folderID)\" label=\"\(folderID)\" path=\"\(escaped(path.path))\" type=\"sendreceive\" "
                    + "rescanIntervalS=\"\(rescanIntervalS)\" fsWatcherEnabled=\"true\" fsWatcherDelayS=\"\(watcherDelayS)\" "
                    + "ignorePerms=\"false\" autoNormalize=\"true\">",
                "        <filesystemType>basic</filesystemType>",
            ]
            + members
            + [
                "        <minDiskFree unit=\"%\">0</minDiskFree>", "        <maxConflicts>10</maxConflicts>",
                "        <markerName>.stfolder</markerName>", "    </folder>",
            ]
            + devices
            + [
                "    <gui enabled=\"true\" tls=\"false\" debugging=\"false\">",
                "        <address>127.0.0.1:\(guiPort)</address>", "        <apikey>\(apiKey)</apikey>", "    </gui>",
                "    <options>",
                "        <listenAddress>\(listenAddress)</listenAddress>",
                "        <globalAnnounceEnabled>false</globalAnnounceEnabled>",
                "        <localAnnounceEnabled>false</localAnnounceEnabled>",
                "        <relaysEnabled>false</relaysEnabled>",
                "        <natEnabled>false</natEnabled>",
                "        <stunKeepaliveStartS>0</stunKeepaliveStartS>",
                "        <urAccepted>-1</urAccepted>",
                "        <crashReportingEnabled>false</crashReportingEnabled>",
                "        <autoUpgradeIntervalH>0</autoUpgradeIntervalH>",
                "        <startBrowser>false</startBrowser>",
                "        <reconnectionIntervalS>2</reconnectionIntervalS>",
                "        <announceLANAddresses>false</announceLANAddresses>",
                "        <minHomeDiskFree unit=\"%\">0</minHomeDiskFree>",
                "        <setLowPriority>false</setLowPriority>",
                "    </options>",
                "</configuration>",
            ]
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(
            to: home.appendingPathComponent("config.xml"),
            options: .atomic
        )
    }

    // MARK: Lifecycle

    /// Starts `syncthing serve` (no monitor process: the PID is the daemon's) with its output in
    /// ``logURL``, and waits (bounded) until its REST API answers.
    func start(timeout: Duration = .seconds(30)) throws {
        guard FileManager.default.createFile(atPath: logURL.path, contents: nil) else {
            throw SyncthingError("cannot create \(logURL.path)")
        }
        let log = try FileHandle(forWritingTo: logURL)
        let process = Process()
        process.executableURL = Self.executableURL
        process.arguments = [
            "serve", "--home=\(home.path)", "--no-browser", "--no-restart", "--no-upgrade", "--no-default-folder",
            "--logflags=3",
        ]
        var environment = ProcessInfo.processInfo.environment
        environment["STNODEFAULTFOLDER"] = "1"
        environment["STNOUPGRADE"] = "1"
        environment["STNORESTART"] = "1"
        environment["HOME"] = home.path
        process.environment = environment
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        let exited = self.exited
        process.terminationHandler = { _ in exited.signal() }
        try withCleanSignalMask { try process.run() }
        try? log.close()
        running.withLock { $0 = process }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if !process.isRunning {
                throw SyncthingError(
                    "syncthing \(name) exited at start (status \(process.terminationStatus)): \(logTail())"
                )
            }
            if (try? json("GET", "/rest/system/ping"))?["ping"] as? String == "pong" { return }
            Thread.sleep(forTimeInterval: 0.1)
        }
        throw SyncthingError("syncthing \(name) did not answer on 127.0.0.1:\(guiPort) within \(timeout): \(logTail())")
    }

    /// The daemon's PID while it runs.
    var pid: Int32? { running.withLock { process in process.flatMap { $0.isRunning ? $0.processIdentifier : nil } } }

    /// The signal mask and ignored signals a child starts with when spawned as the daemons are
    /// (`SigBlk`, `SigIgn` of a probe child's /proc/self/status): the daemon's own main thread
    /// cannot show it, since the Go runtime blocks signals there itself.
    static func childSignalState() throws -> (blocked: String, ignored: String) {
        let status = try runToEnd(
            ["-E", "^Sig(Blk|Ign):", "/proc/self/status"],
            executable: URL(fileURLWithPath: "/bin/grep"),
            timeout: .seconds(10)
        )
        func field(_ name: String) -> String {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }.map {
                $0.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces)
            } ?? "?"
        }
        return (field("SigBlk"), field("SigIgn"))
    }

    /// Stops the daemon by its PID: SIGTERM, then SIGKILL if it is still there after `grace`.
    /// Returns how it ended, for the test's report. Safe to call more than once.
    @discardableResult
    func stop(grace: Duration = .seconds(10)) -> String {
        guard
            let process = running.withLock({ process in
                defer { process = nil }
                return process
            })
        else { return "\(name): not running" }
        guard process.isRunning else { return "\(name): had exited (status \(process.terminationStatus))" }
        let pid = process.processIdentifier
        kill(pid, SIGTERM)
        if exited.wait(timeout: .now() + .milliseconds(Int(grace.components.seconds * 1000))) == .success {
            return "\(name): stopped by SIGTERM (pid \(pid), status \(process.terminationStatus))"
        }
        kill(pid, SIGKILL)
        _ = exited.wait(timeout: .now() + .seconds(5))
        return "\(name): did not stop within \(grace) of SIGTERM; killed (pid \(pid))"
    }

    deinit {
        if let process = running.withLock({ $0 }), process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// The last `count` lines of the daemon's log.
    func logTail(_ count: Int = 30) -> String {
        let text = (try? String(contentsOf: logURL, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(count).joined(separator: "\n")
    }

    // MARK: REST

    /// Calls the REST API (`X-API-Key`), bounded by `timeout`; the body on a 2xx answer.
    func request(_ method: String, _ path: String, timeout: Duration = .seconds(5)) throws -> Data {
        guard let url = URL(string: "http://127.0.0.1:\(guiPort)\(path)") else {
            throw SyncthingError("bad REST path \(path)")
        }
        var request = URLRequest(
            url: url,
            cachePolicy: .reloadIgnoringLocalCacheData,
            timeoutInterval: Double(timeout.components.seconds)
        )
        request.httpMethod = method
        request.setValue(apiKey, forHTTPHeaderField: "X-API-Key")
        let done = DispatchSemaphore(value: 0)
        let result = Guarded<Result<(Data, Int), any Error>?>(nil)
        let task = Self.session.dataTask(with: request) { data, response, error in
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            result.withLock { $0 = error.map { .failure($0) } ?? .success((data ?? Data(), status)) }
            done.signal()
        }
        task.resume()
        guard done.wait(timeout: .now() + .milliseconds(Int(timeout.components.seconds * 1000) + 500)) == .success
        else {
            task.cancel()
            throw SyncthingError("\(method) \(path) on syncthing \(name): no answer within \(timeout)")
        }
        switch result.withLock({ $0 }) {
        case .success(let (data, status)) where (200..<300).contains(status): return data
        case .success(let (data, status)):
            throw SyncthingError(
                "\(method) \(path) on syncthing \(name): HTTP \(status) \(String(decoding: data, as: UTF8.self))"
            )
        case .failure(let error): throw SyncthingError("\(method) \(path) on syncthing \(name): \(error)")
        case nil: throw SyncthingError("\(method) \(path) on syncthing \(name): no result")
        }
    }

    /// A REST call whose answer is a JSON object.
    func json(_ method: String, _ path: String) throws -> [String: Any] {
        let data = try request(method, path)
        if data.isEmpty { return [:] }
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw SyncthingError(
                "\(method) \(path) on syncthing \(name): not a JSON object: \(String(decoding: data, as: UTF8.self))"
            )
        }
        return object
    }

    private static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.connectionProxyDictionary = [:]
        return URLSession(configuration: configuration)
    }()

    /// Whether this daemon has a live connection to `peer`.
    func isConnected(to peer: SyncthingDaemon) throws -> Bool {
        let connections = try json("GET", "/rest/system/connections")["connections"] as? [String: Any]
        return (connections?[peer.deviceID] as? [String: Any])?["connected"] as? Bool ?? false
    }

    /// Pauses (or resumes) this daemon's link to `peer`: nothing is sent or received until resumed.
    func setPaused(_ paused: Bool, peer: SyncthingDaemon) throws {
        _ = try request("POST", "/rest/system/\(paused ? "pause" : "resume")?device=\(peer.deviceID)")
    }

    /// Asks for a scan of the folder now (instead of waiting for the watcher or the interval).
    func scan(folderID: String) throws {
        _ = try request("POST", "/rest/db/scan?folder=\(folderID)", timeout: .seconds(30))
    }

    /// The folder's state as this daemon sees it (`/rest/db/status`).
    func folderStatus(_ folderID: String) throws -> FolderStatus {
        FolderStatus(try json("GET", "/rest/db/status?folder=\(folderID)"))
    }

    /// How complete `peer` is on the folder as this daemon knows (`/rest/db/completion`).
    func completion(folderID: String, peer: SyncthingDaemon) throws -> (percent: Double, needItems: Int) {
        let answer = try json("GET", "/rest/db/completion?folder=\(folderID)&device=\(peer.deviceID)")
        return (
            (answer["completion"] as? NSNumber)?.doubleValue ?? -1, (answer["needItems"] as? NSNumber)?.intValue ?? -1
        )
    }

    /// Runs `syncthing ARGUMENTS` to its end (bounded); its output.
    private static func runToEnd(
        _ arguments: [String],
        executable: URL = executableURL,
        timeout: Duration
    ) throws -> String {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        var environment = ProcessInfo.processInfo.environment
        environment["STNODEFAULTFOLDER"] = "1"
        process.environment = environment
        let ended = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in ended.signal() }
        try withCleanSignalMask { try process.run() }
        let output = Guarded(Data())
        let drained = DispatchSemaphore(value: 0)
        let descriptor = pipe.fileHandleForReading.fileDescriptor
        // read(2) itself, retried on EINTR (FileHandle's reads trap on an interrupted call).
        Thread.detachNewThread {
            var data = Data()
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(descriptor, &chunk, chunk.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                data.append(contentsOf: chunk[..<count])
            }
            output.withLock { $0 = data }
            drained.signal()
        }
        guard ended.wait(timeout: .now() + .seconds(Int(timeout.components.seconds))) == .success else {
            kill(process.processIdentifier, SIGKILL)
            throw SyncthingError("\(executable.path) \(arguments.joined(separator: " ")) did not end within \(timeout)")
        }
        // (Closed once read to its end: Foundation leaves a pipe's read end open otherwise.)
        if drained.wait(timeout: .now() + .seconds(5)) == .success { try? pipe.fileHandleForReading.close() }
        return String(decoding: output.withLock { $0 }, as: UTF8.self)
    }
}

/// Runs `body`, which starts a child process, with no signal blocked on this thread, then puts
/// the thread's mask back. A child starts with the mask of the thread that spawned it, and
/// Foundation's `Process` does not reset it: threads of Swift's pool and of Dispatch block
/// SIGTERM, SIGINT and others, which a daemon stopped by SIGTERM must not inherit.
func withCleanSignalMask<Result>(_ body: () throws -> Result) rethrows -> Result {
    var empty = sigset_t()
    var saved = sigset_t()
    sigemptyset(&empty)
    pthread_sigmask(SIG_SETMASK, &empty, &saved)
    defer { pthread_sigmask(SIG_SETMASK, &saved, nil) }
    return try body()
}

/// A value threads share, guarded by a mutex; a class, so closures can capture it.
final class Guarded<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<Result>(_ body: (inout sending Value) throws -> sending Result) rethrows -> sending Result {
        try mutex.withLock(body)
    }
}

/// A folder's state on one daemon (the fields of `/rest/db/status` the tests read).
struct FolderStatus: CustomStringConvertible {
    var state: String
    var needItems: Int
    var pullErrors: Int
    var errors: Int
    var globalItems: Int
    var localItems: Int
    var sequence: Int

    init(_ json: [String: Any]) {
        func int(_ key: String) -> Int { (json[key] as? NSNumber)?.intValue ?? -1 }
        state = json["state"] as? String ?? "?"
        needItems = int("needTotalItems")
        pullErrors = int("pullErrors")
        errors = int("errors")
        globalItems = int("globalFiles") + int("globalDirectories") + int("globalDeleted")
        localItems = int("localFiles") + int("localDirectories") + int("localDeleted")
        sequence = int("sequence")
    }

    var description: String {
        "state=\(state) need=\(needItems) pullErrors=\(pullErrors) errors=\(errors) global=\(globalItems) local=\(localItems) sequence=\(sequence)"
    }
}

/// Free TCP ports on 127.0.0.1: each bound (all at once, so they differ) and released for a
/// daemon to bind right after.
func freeLoopbackPorts(_ count: Int) throws -> [Int] {
    var sockets: [Int32] = []
    defer { for socket in sockets { close(socket) } }
    var ports: [Int] = []
    for _ in 0..<count {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw SyncthingError("socket(): errno \(errno)") }
        sockets.append(descriptor)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else { throw SyncthingError("bind(127.0.0.1:0): errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard named == 0 else { throw SyncthingError("getsockname(): errno \(errno)") }
        ports.append(Int(UInt16(bigEndian: address.sin_port)))
    }
    return ports
}
