import ConcordSystem
import Foundation

/// Turning the kernel's events into changes, on the watcher thread.
extension InotifyWatcher {
    // MARK: Processing events

    func process(_ events: [Inotify.Event]) {
        for event in events {
            if event.mask.contains(.queueOverflow) {
                rescan()
                continue
            }
            guard let node = directories[event.watch] else { continue }
            if event.mask.contains(.ignored) {
                directories[event.watch] = nil
                if descriptorByPath[node.path] == event.watch { descriptorByPath[node.path] = nil }
                continue
            }
            if event.name.isEmpty {
                // Self events. The parent's watch reports them with a path, unless the parent is
                // not watched: a directory that moved with no one to say where leaves its path
                // stale, so it (and what was watched through it) is gone from where it was.
                if event.mask.contains(.moveSelf),
                    ((try? FileSystem.identity(at: node.path)) ?? nil)?.inode != node.inode
                {
                    if !followMovedDirectory(node) {
                        let old = node.path
                        forgetDirectories(under: old, evenIfParentOfRoot: true)
                        batch.add(.removed(old))
                    }
                    if batchDeadline == nil { batchDeadline = Deadline.after(settleWindow) }
                }
                continue
            }
            let path = node.path + "/" + event.name
            // The halves of a rename usually come back to back, but other events may come between
            // them. A pending move is settled early only by an event about the same name (it
            // cannot still be on its way) or by a barrier (written after the rename returned, so
            // its other half, if any, is already queued); otherwise the pairing window decides.
            if !pendingMoves.isEmpty && !(event.mask.contains(.movedTo) && pendingMoves[event.cookie] != nil) {
                if event.name.hasPrefix(Self.barrierPrefix) {
                    expireMoves(all: true)
                } else if pendingMoves.values.contains(where: { $0.path == path || isInside(path, $0.path) }) {
                    expireMoves(all: true)
                }
            }
            if event.name.hasPrefix(Self.barrierPrefix) {
                if event.mask.contains(.create), let signal = barriers.removeValue(forKey: event.name) {
                    flush()
                    delivery.async { signal() }
                }
                continue
            }
            let isDirectory = event.mask.contains(.isDirectory)
            // A file Concord is writing under a temporary name is not an item: renaming it over
            // one is that item's change, however long the write took (it may span batches).
            if !isDirectory, event.name.hasSuffix(Self.temporarySuffix) {
                if event.mask.contains(.create) || event.mask.contains(.movedTo) {
                    node.known.insert(event.name)
                } else if !event.mask.isDisjoint(with: [.delete, .movedFrom]) {
                    node.known.remove(event.name)
                }
                continue
            }
            if event.mask.contains(.create) {
                if node.known.insert(event.name).inserted { batch.add(.appeared(path)) }
                if isDirectory { directoryAppeared(path) }
            } else if event.mask.contains(.movedFrom) {
                node.known.remove(event.name)
                node.writtenUnclosed.remove(event.name)
                pendingMoves[event.cookie] = (path, isDirectory, Deadline.now)
                batch.add(.pending(cookie: event.cookie, from: path))
            } else if event.mask.contains(.movedTo) {
                let replaced = !node.known.insert(event.name).inserted
                if let from = pendingMoves.removeValue(forKey: event.cookie) {
                    if from.isDirectory { renameDirectories(from: from.path, to: path) }
                    batch.resolve(cookie: event.cookie, with: .moved(from: from.path, to: path, replaced: replaced))
                    if isDirectory { directoryAppeared(path) }
                } else {
                    batch.add(replaced ? .changed(path) : .appeared(path))
                    if isDirectory { directoryAppeared(path) }
                }
            } else if event.mask.contains(.delete) {
                node.known.remove(event.name)
                node.writtenUnclosed.remove(event.name)
                batch.add(.removed(path))
            } else if !event.mask.isDisjoint(with: [.modify, .attributes, .closeWrite]) {
                guard !isDirectory else { continue }
                if event.mask.contains(.modify) {
                    node.writtenUnclosed.insert(event.name)
                } else if event.mask.contains(.closeWrite), !event.mask.contains(.attributes),
                    node.writtenUnclosed.remove(event.name) != nil || !modified(path, since: node.watchedSince)
                {
                    continue
                }
                batch.add(.changed(path))
            }
        }
    }

    /// Whether the file at `path` was modified at `time` or later (seconds since 1970); a file
    /// that cannot be examined counts as modified.
    private func modified(_ path: String, since time: Double) -> Bool {
        guard let identity = (try? FileSystem.identity(at: path)) ?? nil else { return true }
        return Double(identity.modificationSeconds) + Double(identity.modificationNanoseconds) / 1e9 >= time
    }
}
