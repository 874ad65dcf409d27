import ConcordSystem
import Foundation
import Synchronization

/// Which processes on the machine present which items: the daemon-free registry that lets a
/// coordination in one process ask presenters in every other one first.
///
/// It lives in `<lock directory>/presenters`: each presenting process keeps one file,
/// `<pid>.paths`, listing the canonical paths its presenters present (one a line, replaced
/// atomically whenever the set changes), and listens on `<pid>.sock` for coordinations' requests
/// (see ``PresenterChannel``). A coordination reads the directory only when its modification time
/// changed since it last did; otherwise a look-up costs one `stat` and a few hash look-ups, so
/// coordinations stay cheap however many presenters other processes register on other items.
/// Entries of processes that died are found when their socket refuses a connection, and removed.
final class PresenterDirectory: Sendable {
    static let shared = PresenterDirectory()

    /// `<lock directory>/presenters`, or `nil` if it cannot be used (cross-process messaging is
    /// then off, and presenters hear of other processes' changes only afterwards, through inotify).
    let path: String?

    private struct Index {
        var modification: (seconds: Int, nanoseconds: Int)
        /// When the directory was read, in seconds since 1970, to tell whether it could have changed
        /// within the same timestamp tick after the read.
        var readAt: Double
        /// Presented path → the processes presenting it.
        var exact: [String: [Int32]] = [:]
        /// Every folder holding a presented path → the processes presenting something inside it.
        var interior: [String: [Int32]] = [:]
        /// The hashes of the keys of `exact` and of `interior`, so that a look-up that finds
        /// nothing (the common case) builds no string.
        var exactHashes: Set<UInt64> = []
        var interiorHashes: Set<UInt64> = []
    }
    private let index = Mutex<Index?>(nil)
    /// What this process last published, to skip rewriting the same list.
    private let published = Mutex<[String]>([])
    /// A directory modified this recently (seconds) before it was read may have changed again
    /// within the same timestamp: it is read again next time.
    private let racyWindow = 0.1

    private init() {
        guard let locks = try? LockDirectory.resolved() else {
            path = nil
            return
        }
        let folder = locks + "/presenters"
        path = (try? FileSystem.createDirectory(at: folder, mode: 0o700)) != nil ? folder : nil
    }

    static let currentProcess = LocalSocket.currentProcess

    func socketPath(of process: Int32) -> String? { path.map { "\($0)/\(process).sock" } }
    private func listPath(of process: Int32) -> String? { path.map { "\($0)/\(process).paths" } }

    // MARK: Publishing this process's presenters

    /// Writes the canonical paths this process's presenters present now (removing the entry when
    /// there are none). Called whenever a presenter is added, removed or follows its item.
    func publish() {
        // The canonical paths last resolved (on registration, and again whenever the presenter
        // followed its item), so that registering many presenters stays linear in cost per call.
        let paths = PresenterRegistry.shared.snapshot().compactMap { registration in
            registration.canonicalCache.withLock { $0?.1 } ?? registration.canonicalPath()?.1
        }
        guard let file = listPath(of: Self.currentProcess) else { return }
        // Serialised by the lock: two publishes never write the list in the wrong order.
        published.withLock { last in
            if last == paths { return }
            if !paths.isEmpty, !PresenterChannel.shared.startIfNeeded() { return }
            last = paths
            if paths.isEmpty {
                try? FileSystem.removeEntry(at: file)
            } else {
                // Replaced whole (readers never see half a list); no fsync: the list describes this
                // boot's processes only.
                let text = paths.joined(separator: "\n") + "\n"
                let staging = file + "-new"
                if (try? Data(text.utf8).write(to: URL(fileURLWithPath: staging))) != nil {
                    try? FileSystem.rename(staging, to: file)
                }
            }
        }
    }

    /// Removes a dead process's entry and socket.
    func forget(_ process: Int32) {
        guard process != Self.currentProcess else { return }
        if let file = listPath(of: process) { try? FileSystem.removeEntry(at: file) }
        if let socket = socketPath(of: process) { try? FileSystem.removeEntry(at: socket) }
        if let file = listPath(of: process) { try? FileSystem.removeEntry(at: file + "-new") }
    }

    // MARK: Looking up the other processes involved in a coordination

    /// The other processes whose presenters present one of `items`, a folder holding one, or
    /// something inside one.
    func processes(involvedIn items: [CoordinatedItem]) -> [Int32] {
        guard let path, let index = currentIndex(path) else { return [] }
        if index.exact.isEmpty { return [] }
        var found: Set<Int32> = []
        for item in items {
            // One pass over the path's bytes hashes the path and each of its folders.
            Self.forEachPrefixHash(of: item.path) { hash, end, isWhole in
                if isWhole {
                    if index.exactHashes.contains(hash), let processes = index.exact[item.path] {
                        found.formUnion(processes)
                    }
                    if index.interiorHashes.contains(hash), let processes = index.interior[item.path] {
                        found.formUnion(processes)
                    }
                } else if index.exactHashes.contains(hash) {
                    let folder = end == 0 ? "/" : String(decoding: item.path.utf8.prefix(end), as: UTF8.self)
                    if let processes = index.exact[folder] { found.formUnion(processes) }
                }
            }
        }
        found.remove(Self.currentProcess)
        return found.sorted()
    }

    /// FNV-1a of `path`'s bytes, reported at each `/` (the folder before it: `end` bytes, `/`
    /// itself for the first) and at the end (`isWhole`).
    private static func forEachPrefixHash(of path: String, _ body: (UInt64, Int, Bool) -> Void) {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        var count = 0
        for byte in path.utf8 {
            if byte == UInt8(ascii: "/") { body(count == 0 ? fnv("/") : hash, count, false) }
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            count += 1
        }
        body(hash, count, true)
    }

    private static func fnv(_ path: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in path.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        return hash
    }

    private func currentIndex(_ path: String) -> Index? {
        guard let identity = (try? FileSystem.identity(at: path)) ?? nil else { return nil }
        let stamp = (identity.modificationSeconds, identity.modificationNanoseconds)
        if let cached = index.withLock({ $0 }), cached.modification == stamp,
            cached.readAt - (Double(stamp.0) + Double(stamp.1) / 1e9) > racyWindow
        {
            return cached
        }
        let fresh = read(path, modification: stamp)
        index.withLock { $0 = fresh }
        return fresh
    }

    private func read(_ path: String, modification: (Int, Int)) -> Index {
        var result = Index(modification: modification, readAt: Date().timeIntervalSince1970)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        for name in names where name.hasSuffix(".sock") {
            // The socket of a process that ended with no presenter left.
            if let process = Int32(name.dropLast(5)), !LocalSocket.processExists(process) { forget(process) }
        }
        for name in names where name.hasSuffix(".paths") {
            guard let process = Int32(name.dropLast(6)), process != Self.currentProcess else { continue }
            // A process that is gone: its entry goes (one signal-0 `kill` per entry, and only
            // when the directory changed).
            guard LocalSocket.processExists(process) else {
                forget(process)
                continue
            }
            guard let text = try? String(contentsOfFile: path + "/" + name, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n") where line.hasPrefix("/") {
                let presented = String(line)
                result.exact[presented, default: []].append(process)
                result.exactHashes.insert(Self.fnv(presented))
                var folder = presented
                while let parent = Self.parent(of: folder) {
                    if result.interior[parent]?.last != process { result.interior[parent, default: []].append(process) }
                    result.interiorHashes.insert(Self.fnv(parent))
                    folder = parent
                }
            }
        }
        return result
    }

    /// The folder holding a canonical path, or `nil` for `/`.
    private static func parent(of path: String) -> String? {
        let bytes = path.utf8
        guard bytes.count > 1, let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        if slash == bytes.startIndex { return "/" }
        return String(path[..<slash])
    }
}
