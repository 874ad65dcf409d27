import ConcordSystem
import FileWatching
import Foundation
import Logging
import Synchronization

/// Tells presenters about changes that no coordinator in this process made: another process, a
/// sync engine, a plain `cp`. Each registered presenter's item is watched through one shared
/// ``FileWatching/InotifyWatcher``; the inotify echo of this process's own coordinated writes is
/// dropped (their presenters were already told by the coordinator).
final class PresenterWatching: Sendable {
    static let shared = PresenterWatching()

    /// How long changes are gathered before presenters hear of them (see ``FileCoordinator/presenterSettleWindow``).
    let settleWindow = Mutex<Duration>(.milliseconds(10))
    private let watcher = Mutex<InotifyWatcher?>(nil)
    /// Where presenter watching says what went wrong (see ``FileCoordinator/logger``).
    let logger = Mutex(Logger(label: "concord.coordination"))

    private func sharedWatcher() -> InotifyWatcher? {
        if let watcher = watcher.withLock({ $0 }) { return watcher }
        let logger = logger.withLock { $0 }
        let created: InotifyWatcher
        do {
            created = try InotifyWatcher(settleWindow: settleWindow.withLock { $0 }, logger: logger)
        } catch {
            logger.warning("presenters will not hear about other processes' changes: \(error)")
            return nil
        }
        return watcher.withLock { current in
            if let current {
                created.stop()
                return current
            }
            current = created
            return created
        }
    }

    /// Watches the presenter's current item, replacing any earlier watch.
    func start(_ registration: PresenterRegistry.Registration) {
        // The canonical spelling, the one coordinations record their writes under, so the echo
        // of a coordinated write is recognised whatever symbolic links the presenter's URL has.
        guard let (_, root) = registration.canonicalPath() else {
            stop(registration)
            return
        }
        start(registration, root: root)
    }

    /// Moves `registration`'s watch to `destination`, where its item just moved, before the
    /// presenter hears of the move: a change made there once it has heard (by a process that
    /// waited for the message) is then never missed. (`start(_:)` after the message follows the
    /// presenter's own URL, in case it chose another.)
    func follow(_ registration: PresenterRegistry.Registration, to destination: URL) {
        guard let root = try? CanonicalPath.of(destination) else { return }
        start(registration, root: root)
    }

    private func start(_ registration: PresenterRegistry.Registration, root: String) {
        guard let watcher = sharedWatcher() else {
            stop(registration)
            return
        }
        VersionWatching.shared.start(registration, root: root, watcher: watcher)
        let previous = registration.watch.withLock { $0?.root }
        if previous == root { return }
        // The item moved: other processes look for it at its new path from now on. (A new
        // presenter is published by addFilePresenter.)
        defer { if previous != nil { PresenterDirectory.shared.publish() } }
        let watch: InotifyWatcher.Watch?
        do {
            watch = try watcher.watch(URL(fileURLWithPath: root), recursive: true, immediate: true, onStop: nil) {
                [weak registration] events in
                guard let registration else { return }
                PresenterWatching.deliver(events, root: root, to: registration)
            }
        } catch {
            // addFilePresenter cannot throw (Apple's shape): say it here, once per presenter.
            logger.withLock { $0 }.warning(
                "a presenter will not hear about other processes' changes: \(error)",
                metadata: ["concord.item": "\(root)"]
            )
            watch = nil
        }
        let old = registration.watch.withLock { current in
            defer { current = watch.map { (root, $0) } }
            return current?.watch
        }
        old?.cancel()
    }

    /// Waits until every change made under `url` before the call has reached the presenters'
    /// queues, and those queues have run it (for tests and tools).
    func synchronize(_ url: URL, timeout: Duration = .seconds(10)) throws {
        // First the presenters' queues: a presenter told its item moved starts watching the new
        // place from its queue, after the message (on a busy machine, not yet when it is heard).
        drainPresenterQueues()
        try sharedWatcher()?.barrier(for: url, timeout: timeout)
        drainPresenterQueues()
    }

    private func drainPresenterQueues() {
        for registration in PresenterRegistry.shared.snapshot() {
            let done = DispatchSemaphore(value: 0)
            registration.queue.post { done.signal() }
            _ = done.wait(timeout: .now() + .seconds(10))
        }
    }

    /// Runs `body` while the watcher reads no events, so that every change `body` makes (or
    /// waits for another process to make) is read, coalesced and delivered as one burst (for tests).
    func withEventsHeld<T>(_ body: () throws -> T) rethrows -> T {
        guard let watcher = sharedWatcher() else { return try body() }
        let held = DispatchSemaphore(value: 0)
        let resume = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            watcher.suspendForTesting {
                held.signal()
                resume.wait()
            }
        }
        held.wait()
        defer { resume.signal() }
        return try body()
    }

    func stop(_ registration: PresenterRegistry.Registration) {
        registration.watch.withLock { current in
            defer { current = nil }
            return current?.watch
        }?.cancel()
        VersionWatching.shared.stop(registration)
    }

    /// Turns watcher events into presenter messages, in order, on the presenter's queue.
    private static func deliver(
        _ events: [FileSystemEvent],
        root: String,
        to registration: PresenterRegistry.Registration
    ) {
        guard let presenter = registration.presenter else { return }
        VersionWatching.forward(events, to: registration)
        let queue = registration.queue
        func path(_ url: URL) -> String { url.standardizedFileURL.path }
        func ours(_ path: String, covered: Bool = true, content: Bool = false, removal: Bool = false) -> Bool {
            path.hasSuffix(".concord-tmp")
                || EchoFilter.shared.isEcho(
                    path,
                    includingCovered: covered,
                    aboutContent: content,
                    aboutRemoval: removal
                )
        }
        for event in events {
            switch event {
            case .appeared(let url), .changed(let url):
                let path = path(url)
                // A file written inside a folder this process just moved or replaced is someone
                // else's change: moving a folder changes no file's content.
                if case .changed = event, ours(path, covered: false, content: true) { continue }
                if case .appeared = event, ours(path, content: true) { continue }
                if path == root {
                    queue.post { presenter.presentedItemDidChange() }
                } else if case .appeared = event {
                    queue.post { presenter.presentedSubitemDidAppear(at: url) }
                } else {
                    queue.post { presenter.presentedSubitemDidChange(at: url) }
                }
            case .removed(let url):
                let path = path(url)
                if ours(path, removal: true) { continue }
                if path == root, let destination = MoveJournal.destination(of: path) {
                    // Moved by another process's coordinated move to a place inotify cannot see.
                    let newURL = URL(fileURLWithPath: destination)
                    queue.post {
                        PresenterWatching.shared.follow(registration, to: newURL)
                        presenter.presentedItemDidMove(to: newURL)
                    }
                    queue.post { PresenterWatching.shared.start(registration) }
                } else if path == root {
                    queue.post { presenter.accommodatePresentedItemDeletion { _ in } }
                } else {
                    queue.post { presenter.accommodatePresentedSubitemDeletion(at: url) { _ in } }
                }
            case .moved(let from, let to):
                let fromPath = path(from)
                let toPath = path(to)
                // A move is this process's echo if its destination is (the source is then either
                // a temporary file of an atomic save or a coordinated move's source).
                if EchoFilter.shared.isEcho(toPath, aboutContent: true) { continue }
                if fromPath.hasSuffix(".concord-tmp") {
                    // Another process's atomic save that arrived in two batches.
                    if toPath == root {
                        queue.post { presenter.presentedItemDidChange() }
                    } else {
                        queue.post { presenter.presentedSubitemDidChange(at: to) }
                    }
                } else if fromPath == root, VersionWatching.isCopy(toPath, of: root) {
                    // The engine renamed the item to a conflict copy of itself (rclone bisync
                    // before 1.66 renames both sides): the item is gone from its place, and the
                    // presenter, which keeps presenting the place, hears of the copy as a version.
                    queue.post { presenter.accommodatePresentedItemDeletion { _ in } }
                } else if fromPath == root {
                    queue.post {
                        PresenterWatching.shared.follow(registration, to: to)
                        presenter.presentedItemDidMove(to: to)
                    }
                    queue.post { PresenterWatching.shared.start(registration) }
                } else if toPath == root {
                    queue.post { presenter.presentedItemDidChange() }
                } else {
                    queue.post { presenter.presentedSubitem(at: from, didMoveTo: to) }
                }
            case .rescanned:
                queue.post { presenter.presentedItemDidChange() }
            }
        }
    }
}

/// Remembers what this process's coordinated writes left behind, so their inotify echo can be
/// recognised and dropped: a path written right now, or one whose current identity (inode, size,
/// modification time) is what a coordinated write left there moments ago.
final class EchoFilter: Sendable {
    static let shared = EchoFilter()

    private struct Expectation {
        var writing = 0
        var identity: FileIdentity?
        var expires = Deadline.now
        /// The write deleted, moved or replaced a directory: everything inside it echoes too.
        var coversContents = false
    }
    private let expectations = Mutex<[String: Expectation]>([:])
    private let lifetime: Duration = .seconds(2)

    /// A coordinated write of `paths` is about to run.
    func begin(_ paths: [String], coversContents: [Bool]) {
        expectations.withLock { table in
            for (path, covers) in zip(paths, coversContents) {
                table[path, default: Expectation()].writing += 1
                if covers { table[path]!.coversContents = true }
            }
        }
    }

    /// The write ended and left `identities` (nil for a path that no longer exists).
    func end(_ paths: [String], identities: [FileIdentity?]) {
        let expires = Deadline.after(lifetime)!
        expectations.withLock { table in
            let now = Deadline.now
            table = table.filter { $0.value.writing > 0 || $0.value.expires > now }
            for (path, identity) in zip(paths, identities) {
                var expectation = table[path, default: Expectation()]
                expectation.writing = max(0, expectation.writing - 1)
                expectation.identity = identity
                expectation.expires = expires
                table[path] = expectation
            }
        }
    }

    /// Whether an event about `path` is the echo of a coordinated write in this process.
    ///
    /// - Parameter includingCovered: whether a write that deleted, moved or replaced a folder
    ///   holding `path` counts (for events about where items are, not about their content).
    /// - Parameter aboutContent: whether the event says the item was written, appeared or moved in (then
    ///   an item gone since the write still makes it the write's echo: the deletion or rename that
    ///   came later brings its own event).
    /// - Parameter aboutRemoval: whether the event says the item went away (then a write that left
    ///   nothing there makes it the write's echo, whatever is there now: an item that arrived since
    ///   brings its own event, and was not there when this one was queued).
    func isEcho(
        _ path: String,
        includingCovered: Bool = true,
        aboutContent: Bool = false,
        aboutRemoval: Bool = false
    ) -> Bool {
        let (exact, covering) = expectations.withLock { table -> (Expectation?, [(String, Expectation)]) in
            if table.isEmpty { return (nil, []) }
            let covering = table.filter { $0.value.coversContents && path.hasPrefix($0.key + "/") }.map {
                ($0.key, $0.value)
            }
            return (table[path], covering)
        }
        if let exact {
            if matches(exact, at: path, goneIsEcho: aboutContent, removal: aboutRemoval) { return true }
            // Someone else changed it since: forget what we wrote, so none of their later
            // changes (deleting it again, say) is taken for ours.
            expectations.withLock { table in
                if table[path]?.writing == 0 { table[path] = nil }
            }
        }
        // A folder that is still the one the write left there (files inside it may have changed
        // since: that does not make it another folder).
        return covering.contains {
            (includingCovered || $0.1.writing > 0) && matches($0.1, at: $0.0, sameItemSuffices: true)
        }
    }

    private func matches(
        _ expectation: Expectation,
        at path: String,
        sameItemSuffices: Bool = false,
        goneIsEcho: Bool = false,
        removal: Bool = false
    ) -> Bool {
        if expectation.writing > 0 { return true }
        if expectation.expires.hasPassed { return false }
        // The write removed the item: its removal event is queued before anything that came back.
        if removal && expectation.identity == nil { return true }
        let current = (try? FileSystem.identity(at: path)) ?? nil
        // Written, and gone since the write left it: still the write's echo.
        if goneIsEcho && current == nil && expectation.identity != nil { return true }
        if sameItemSuffices, let current, let expected = expectation.identity, current.kind == .directory {
            return current.kind == expected.kind && current.device == expected.device && current.inode == expected.inode
        }
        return current == expectation.identity
    }
}
