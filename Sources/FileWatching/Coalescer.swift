import Foundation

/// One raw change, by path, before coalescing and routing.
enum RawChange: Equatable {
    case appeared(String)
    case changed(String)
    case removed(String)
    /// `replaced`: something already existed at `to`.
    case moved(from: String, to: String, replaced: Bool)
    case rescanned(String)
    /// The first half of a rename, holding its place until the second half comes or it expires.
    case pending(cookie: UInt32, from: String)

    /// The event a watch of `root` should see, if any.
    func routed(to root: String, recursive: Bool) -> FileSystemEvent? {
        func covers(_ path: String) -> Bool {
            if path == root { return true }
            guard isInside(path, root) else { return false }
            return recursive || (path as NSString).deletingLastPathComponent == root
        }
        func url(_ path: String) -> URL { URL(fileURLWithPath: path) }
        switch self {
        case .appeared(let path): return covers(path) ? .appeared(url(path)) : nil
        case .changed(let path): return covers(path) ? .changed(url(path)) : nil
        case .removed(let path):
            if covers(path) { return .removed(url(path)) }
            // A directory holding the root went away: so did the root.
            return isInside(root, path) ? .removed(url(root)) : nil
        case .rescanned(let path): return path == root ? .rescanned(url(path)) : nil
        case .pending: return nil
        case .moved(let from, let to, let replaced):
            switch (covers(from), covers(to)) {
            case (true, true): return .moved(from: url(from), to: url(to))
            case (true, false):
                // The watched item itself moved: its new place is known, so say where it went.
                return from == root ? .moved(from: url(from), to: url(to)) : .removed(url(from))
            case (false, true): return replaced ? .changed(url(to)) : .appeared(url(to))
            case (false, false):
                // A directory holding the root moved: the root moved with it.
                if isInside(root, from) {
                    let suffix = String(decoding: root.utf8.dropFirst(from.utf8.count), as: UTF8.self)
                    return .moved(from: url(root), to: url(to + suffix))
                }
                return nil
            }
        }
    }
}

/// Gathers the changes of one settle window and folds the ones that cancel or repeat:
/// created-then-written is one appearance, written twice is one change, created-then-deleted is
/// nothing, deleted-then-created is a change, and a file created and then renamed over another
/// (an atomic save) is a change of the target.
struct Coalescer {
    /// When off (a zero settle window), every change is kept as it came.
    var enabled = true
    private var changes: [RawChange] = []
    /// How many of ``changes`` (placeholders aside) each path keys: a path the window has not
    /// seen is known without a scan (a burst of writes to many files, an SQLite checkpoint
    /// among them, made every change scan the whole window).
    private var keyed: [String: Int] = [:]
    /// Paths that did not exist when the window opened and appeared in it.
    private var fresh: Set<String> = []

    var isEmpty: Bool { changes.isEmpty }

    mutating func add(_ change: RawChange) {
        guard enabled else {
            append(change)
            return
        }
        switch change {
        case .pending:
            append(change)
        case .appeared(let path):
            if let index = lastIndex(of: path), case .removed = changes[index] {
                changes[index] = .changed(path)
                return
            }
            if lastIndex(of: path) != nil { return }
            if replacesMovedItem(at: path) { return }
            fresh.insert(path)
            append(change)
        case .changed(let path):
            if let index = lastIndex(of: path) {
                switch changes[index] {
                case .appeared, .changed: return
                default: break
                }
            }
            append(change)
        case .removed(let path):
            if fresh.remove(path) != nil {
                // Nothing to say about a path that came and went, except where a move into it
                // came from: that item is gone.
                changes = changes.compactMap { change in
                    guard change.path == path else { return change }
                    if case .moved(let from, _, _) = change { return .removed(from) }
                    return nil
                }
                recount()
                return
            }
            changes.removeAll { if case .changed(path) = $0 { return true } else { return false } }
            recount()
            append(change)
        case .moved(let from, let to, let replaced):
            if fresh.remove(from) != nil {
                // Written under a temporary name, then renamed into place; for a directory made
                // and filled in this window, what was reported inside it now lives under `to`.
                changes.removeAll { change in
                    if case .pending = change { return false }
                    return change.path == from
                }
                changes = changes.map { $0.relocated(from: from, to: to) }
                recount()
                fresh = Set(
                    fresh.map { isInside($0, from) ? RawChange.appeared($0).relocated(from: from, to: to).path : $0 }
                )
                add(replaced ? .changed(to) : .appeared(to))
                return
            }
            append(change)
        case .rescanned:
            append(change)
        }
    }

    /// Settles the rename whose first half holds a place: `change` is the move, or the removal
    /// of its source. It takes the placeholder's place unless coalescing folds it away.
    mutating func resolve(cookie: UInt32, with change: RawChange) {
        guard
            let index = changes.firstIndex(where: {
                if case .pending(cookie, _) = $0 { return true } else { return false }
            })
        else {
            add(change)
            return
        }
        changes.remove(at: index)
        let source: String
        switch change {
        case .moved(let from, _, _): source = from
        case .removed(let path): source = path
        default: source = ""
        }
        if !enabled || !fresh.contains(source) {
            changes.insert(change, at: index)
            keyed[change.path, default: 0] += 1
        } else {
            add(change)
        }
    }

    /// An editor's save: the item at `path` was renamed away (to a backup name) earlier in this
    /// window and a new one now takes its place (vim: `mv x x~; write x; rm x~`; emacs:
    /// `mv x x~; write x`). Watchers of `path` hear of one change, not of a move; the backup is
    /// an item that appeared (and that nothing is said about if it goes again in the window).
    private mutating func replacesMovedItem(at path: String) -> Bool {
        guard
            let index = changes.lastIndex(where: {
                if case .moved(path, _, _) = $0 { return true } else { return false }
            }),
            case .moved(_, let backup, let replaced) = changes[index]
        else { return false }
        if replaced {
            changes[index] = .changed(backup)
        } else {
            changes[index] = .appeared(backup)
            fresh.insert(backup)
        }
        // (A move is keyed by its destination, `backup`: so is what took its place.)
        append(.changed(path))
        return true
    }

    mutating func drain() -> [RawChange] {
        defer {
            changes.removeAll()
            keyed.removeAll()
            fresh.removeAll()
        }
        return changes
    }

    /// Adds `change` at the end of the window.
    private mutating func append(_ change: RawChange) {
        changes.append(change)
        if case .pending = change { return }
        keyed[change.path, default: 0] += 1
    }

    /// Counts the paths ``changes`` keys anew, after a change that rewrote the window.
    private mutating func recount() {
        keyed.removeAll(keepingCapacity: true)
        for change in changes {
            if case .pending = change { continue }
            keyed[change.path, default: 0] += 1
        }
    }

    private func lastIndex(of path: String) -> Int? {
        guard keyed[path, default: 0] > 0 else { return nil }
        return changes.lastIndex { change in
            if case .pending = change { return false }
            return change.path == path
        }
    }
}

extension RawChange {
    /// The change with paths inside `from` moved under `to`.
    func relocated(from: String, to: String) -> RawChange {
        func move(_ path: String) -> String {
            isInside(path, from) ? to + String(decoding: path.utf8.dropFirst(from.utf8.count), as: UTF8.self) : path
        }
        switch self {
        case .appeared(let path): return .appeared(move(path))
        case .changed(let path): return .changed(move(path))
        case .removed(let path): return .removed(move(path))
        case .rescanned(let path): return .rescanned(path)
        case .pending(let cookie, let path): return .pending(cookie: cookie, from: move(path))
        case .moved(let a, let b, let replaced): return .moved(from: move(a), to: move(b), replaced: replaced)
        }
    }

    /// The path a change is keyed by (the destination for a move).
    var path: String {
        switch self {
        case .appeared(let path), .changed(let path), .removed(let path), .rescanned(let path): return path
        case .moved(_, let to, _): return to
        case .pending(_, let from): return from
        }
    }
}

/// Whether `path` lies strictly inside `directory` (byte for byte, as the kernel sees paths).
func isInside(_ path: String, _ directory: String) -> Bool {
    let inner = path.utf8
    let outer = directory.utf8
    guard inner.count > outer.count, inner.starts(with: outer) else { return false }
    return directory == "/" || inner[inner.index(inner.startIndex, offsetBy: outer.count)] == UInt8(ascii: "/")
}
