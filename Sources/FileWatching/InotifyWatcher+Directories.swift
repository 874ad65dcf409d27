import ConcordSystem
import Foundation

/// The directories an ``InotifyWatcher`` watches, kept on its thread: installing watches for a
/// root (its parent, its tree, its ancestors), following directories that moved, forgetting
/// those that left, and relisting everything after a queue overflow.
extension InotifyWatcher {
    // MARK: Installing watches

    /// Watches what `root` needs: its parent (to see the root itself come, go and move), the root
    /// if it is a directory, and everything inside it when recursive.
    ///
    /// Every ancestor above the parent is watched for its own renames, and the nearest directory
    /// (the root if it is one, else its parent) gets an anchor, so a rename of any folder above
    /// the root is followed (see ``followMovedDirectory(_:)``).
    func install(root: String, recursive: Bool) {
        let parent = (root as NSString).deletingLastPathComponent
        let name = (root as NSString).lastPathComponent
        // Known from now on, whether another watch lists the parent or not: a creation of the
        // root still queued from before this watch is no appearance of it.
        if let node = addDirectory(parent, listed: false), exists(root) { node.known.insert(name) }
        let rootIsDirectory = isDirectory(root)
        if rootIsDirectory { addTree(root, recursive: recursive, report: false) }
        if let descriptor = descriptorByPath[rootIsDirectory ? root : parent], let node = directories[descriptor],
            node.anchor == nil
        {
            node.anchor = (try? DirectoryAnchor(path: node.path)) ?? nil
        }
        addAncestors(of: parent)
    }

    /// Watches every directory above `directory`, up to `/`, for its own renames.
    func addAncestors(of directory: String) {
        var path = directory
        while path.count > 1 {
            path = (path as NSString).deletingLastPathComponent
            if let descriptor = descriptorByPath[path], directories[descriptor] != nil { continue }
            guard let descriptor = (try? Inotify.addWatch(inotifyFD, path: path, mask: Self.ancestorInterest)) ?? nil
            else {
                continue
            }
            // Already watched under another name (a link): the mask was only added to.
            if directories[descriptor] != nil { continue }
            let node = Directory(path: path, listed: false)
            node.ancestorOnly = true
            node.inode = ((try? FileSystem.identity(at: path)) ?? nil)?.inode ?? 0
            directories[descriptor] = node
            descriptorByPath[path] = descriptor
        }
    }

    /// Adds a watch on the directory at `path` (before listing it). Returns the node, or `nil`
    /// if it does not exist or the watch failed (recorded in `watchFailure`).
    @discardableResult
    func addDirectory(_ path: String, listed: Bool) -> Directory? {
        do {
            // Always ask the kernel (it returns the same descriptor for the same directory): the
            // directory now at `path` may not be the one watched under that name before (replaced
            // by a move, or deleted and recreated while the queue overflowed).
            guard let descriptor = try Inotify.addWatch(inotifyFD, path: path, mask: Self.interest) else { return nil }
            if let stale = descriptorByPath[path], stale != descriptor, let old = directories[stale], old.path == path {
                directories[stale] = nil
                Inotify.removeWatch(inotifyFD, stale)
            }
            if let node = directories[descriptor] {
                // Watched for its renames only until now: the full mask replaced that one.
                node.ancestorOnly = false
                if node.path != path {
                    // The same directory under another name (it moved); follow the new name.
                    if descriptorByPath[node.path] == descriptor { descriptorByPath[node.path] = nil }
                    node.path = path
                }
                descriptorByPath[path] = descriptor
                if listed { node.listed = true }
                return node
            }
            let node = Directory(path: path, listed: listed)
            node.inode = ((try? FileSystem.identity(at: path)) ?? nil)?.inode ?? 0
            directories[descriptor] = node
            descriptorByPath[path] = descriptor
            return node
        } catch {
            if error.errno == .noSpace {
                let limit =
                    (try? String(contentsOfFile: Inotify.watchLimitPath, encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
                watchFailure = WatchError(
                    code: .watchLimitReached,
                    path: path,
                    message: "the inotify watch limit (\(limit), \(Inotify.watchLimitPath)) is reached; raise it, for "
                        + "example with `sysctl fs.inotify.max_user_watches=524288`",
                    underlyingError: error
                )
            } else if error.errno != .permissionDenied {
                watchFailure = WatchError(
                    code: .systemCallFailed,
                    path: path,
                    message: "cannot watch the directory",
                    underlyingError: error
                )
            }
            if let watchFailure { logger.warning("\(watchFailure)") }
            return nil
        }
    }

    /// Watches and lists a directory (and, when recursive, its subdirectories), reporting what
    /// it finds as appeared when `report` is set. Watching comes before listing, so nothing
    /// created in between is missed; `known` keeps anything from being reported twice.
    func addTree(_ path: String, recursive: Bool, report: Bool) {
        guard let node = addDirectory(path, listed: true) else { return }
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: path) else { return }
        for name in entries where !name.hasPrefix(Self.barrierPrefix) {
            let child = path + "/" + name
            if node.known.insert(name).inserted, report { batch.add(.appeared(child)) }
            if recursive && isDirectory(child) { addTree(child, recursive: true, report: report) }
        }
    }

    /// Removes watches that no spec needs any more.
    func pruneWatches() {
        let roots = specs.values
        for (descriptor, node) in directories {
            let needed = roots.contains { spec in
                node.path == spec.root || isInside(spec.root, node.path)
                    || (spec.recursive && isInside(node.path, spec.root))
            }
            if !needed {
                Inotify.removeWatch(inotifyFD, descriptor)
                directories[descriptor] = nil
                descriptorByPath[node.path] = nil
            }
        }
    }

    func isWatchedRecursively(_ path: String) -> Bool {
        specs.values.contains { $0.recursive && (path == $0.root || isInside(path, $0.root)) }
    }

    func isWatchedDirectly(_ path: String) -> Bool {
        specs.values.contains { path == $0.root || ($0.recursive && isInside(path, $0.root)) }
    }

    // MARK: Following directories

    /// A directory came into being at `path` (created or moved in): watch and list it if a spec
    /// covers it, reporting what is already inside.
    func directoryAppeared(_ path: String) {
        if let spec = specs.values.first(where: { $0.root == path }) {
            addTree(path, recursive: spec.recursive, report: true)
        } else if isWatchedRecursively((path as NSString).deletingLastPathComponent) {
            addTree(path, recursive: true, report: true)
        }
    }

    /// A move whose other half did not come within the pairing window left what is watched.
    func expireMoves(all: Bool = false) {
        guard !pendingMoves.isEmpty else { return }
        let limit = all ? 0 : nanoseconds(pairingWindow)
        let now = Deadline.now.nanoseconds
        for (cookie, move) in pendingMoves where now >= move.at.nanoseconds + limit {
            pendingMoves[cookie] = nil
            if move.isDirectory { forgetDirectories(under: move.path) }
            batch.resolve(cookie: cookie, with: .removed(move.path))
            if batchDeadline == nil { batchDeadline = Deadline.after(settleWindow) }
        }
    }

    /// A watched directory was renamed and no watched parent reported where to: ask an anchor at
    /// or under it where it is now, report the move, and follow it. `false` if no anchor knows.
    func followMovedDirectory(_ node: Directory) -> Bool {
        let old = node.path
        var destination: String?
        for candidate in directories.values
        where candidate.anchor != nil && (candidate.path == old || isInside(candidate.path, old)) {
            guard let current = candidate.anchor?.currentPath else { continue }
            // The anchor's path below the moved directory is unchanged by the move.
            let suffix = Array(candidate.path.utf8.dropFirst(old.utf8.count))
            let bytes = Array(current.utf8)
            guard bytes.count > suffix.count, bytes.suffix(suffix.count).elementsEqual(suffix) else { continue }
            let moved = String(decoding: bytes.dropLast(suffix.count), as: UTF8.self)
            if ((try? FileSystem.identity(at: moved)) ?? nil)?.inode == node.inode {
                destination = moved
                break
            }
        }
        guard let destination else { return false }
        if let (cookie, _) = pendingMoves.first(where: { $0.value.path == old }) {
            // Its parent saw it leave, for a place no watch covers.
            pendingMoves[cookie] = nil
            batch.resolve(cookie: cookie, with: .moved(from: old, to: destination, replaced: false))
        } else {
            batch.add(.moved(from: old, to: destination, replaced: false))
        }
        for (descriptor, moved) in directories where moved.path == old || isInside(moved.path, old) {
            let newPath = destination + String(decoding: moved.path.utf8.dropFirst(old.utf8.count), as: UTF8.self)
            if descriptorByPath[moved.path] == descriptor { descriptorByPath[moved.path] = nil }
            moved.path = newPath
            descriptorByPath[newPath] = descriptor
        }
        return true
    }

    /// Follows a directory that moved: every watched directory at or under `from` now lives
    /// under `to` (the kernel keeps the watches; only the names change).
    func renameDirectories(from: String, to: String) {
        for (descriptor, node) in directories where node.path == from || isInside(node.path, from) {
            let newPath = to + String(decoding: node.path.utf8.dropFirst(from.utf8.count), as: UTF8.self)
            if descriptorByPath[node.path] == descriptor { descriptorByPath[node.path] = nil }
            node.path = newPath
            descriptorByPath[newPath] = descriptor
        }
        // Moved out of every recursive scope: stop watching inside it, unless it carried a watched
        // item along (its watcher hears of the move and may follow it there).
        let carriedRoot = specs.values.contains { $0.root == from || isInside($0.root, from) }
        if !isWatchedDirectly(to) && !carriedRoot { forgetDirectories(under: to) }
    }

    func forgetDirectories(under path: String, evenIfParentOfRoot: Bool = false) {
        for (descriptor, node) in directories where node.path == path || isInside(node.path, path) {
            let stillNeeded = specs.values.contains { node.path == ($0.root as NSString).deletingLastPathComponent }
            if stillNeeded && !evenIfParentOfRoot { continue }
            Inotify.removeWatch(inotifyFD, descriptor)
            directories[descriptor] = nil
            if descriptorByPath[node.path] == descriptor { descriptorByPath[node.path] = nil }
        }
    }

    /// After a queue overflow: relist everything, watch what is new, and tell every spec.
    func rescan() {
        overflows += 1
        // A warning once; later overflows of the same watcher at debug.
        logger.log(
            level: overflows == 1 ? .warning : .debug,
            "the kernel's inotify queue overflowed: events were lost; rescanning what is watched",
            metadata: [
                "concord.overflows": "\(overflows)", "concord.queue_limit": "/proc/sys/fs/inotify/max_queued_events",
            ]
        )
        pendingMoves.removeAll()
        for node in directories.values {
            node.writtenUnclosed.removeAll()
            if node.listed { node.known.removeAll() }
        }
        for spec in specs.values { install(root: spec.root, recursive: spec.recursive) }
        for node in Array(directories.values) where node.listed {
            if let entries = try? FileManager.default.contentsOfDirectory(atPath: node.path) {
                node.known = Set(entries.filter { !$0.hasPrefix(Self.barrierPrefix) })
            }
        }
        for spec in specs.values { batch.add(.rescanned(spec.root)) }
        if batchDeadline == nil { batchDeadline = Deadline.now }
    }

    func exists(_ path: String) -> Bool { ((try? FileSystem.identity(at: path)) ?? nil) != nil }
    func isDirectory(_ path: String) -> Bool { ((try? FileSystem.identity(at: path)) ?? nil)?.kind == .directory }
}
