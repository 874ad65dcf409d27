import FileCoordination
import FileWatching
import Foundation
import Synchronization

/// Watches a syncing container for a reset and looks at it: the container deleted or moved away,
/// replaced by another device's data (its identity), or this device's registration removed. What
/// it sees goes to the engine, whose machine confirms a reset a grace period later.
final class ContainerMonitor: SyncPart, Sendable {
    let context: SyncContext
    let identities: ContainerIdentities
    /// The store's one inotify watcher, shared with live sync.
    private let watcher: SyncWatcher
    /// What watches the container while syncing.
    private let watchers = Mutex<ResetWatchers?>(nil)

    init(context: SyncContext, identities: ContainerIdentities, watcher: SyncWatcher) {
        self.context = context
        self.identities = identities
        self.watcher = watcher
    }

    /// This device's registration in the sentinel.
    var registrar: Registrar { Registrar(context: context) }

    /// Watches the container (replacing any watch begun before); `changed` is called whenever
    /// anything in it is deleted, moved or changed, or the watch of the sentinel's files ends.
    func startWatching(changed: @escaping @Sendable () -> Void) throws {
        stopWatching()
        let shared = try watcher.acquire()
        let presenter = ContainerPresenter(url: layout.container, changed: changed)
        FileCoordinator.addFilePresenter(presenter)
        // Callbacks, not an iteration: the check must not wait for Swift concurrency's threads.
        // The end of the watch (the sentinel's folder went away) is a reason to look too.
        let query: ItemQuery.Observation
        do {
            query = try ItemQuery(scope: sentinel.folder, matching: sentinel.filePattern, watcher: shared)
                .observe(onEnd: changed) { _ in changed() }
        } catch {
            FileCoordinator.removeFilePresenter(presenter)
            watcher.release()
            throw error
        }
        watchers.withLock { $0 = ResetWatchers(presenter: presenter, query: query, watcher: watcher) }
    }

    /// Ends the watch, if any.
    func stopWatching() {
        watchers.withLock { watchers in
            defer { watchers = nil }
            return watchers
        }?.cancel()
    }

    /// Whether another device replaced the container with its data (its identity says so).
    func isReplacedContainer() -> Bool { identities.isReplacedContainer() }

    /// The reset the container shows now, if any. A registration found damaged is written again
    /// only while `stillSyncing` says so (asked when the read fails).
    func observedReset(stillSyncing: () -> Bool) -> ContainerResetReason? {
        if ContainerAvailability.of(layout.container) == .missing
            || ContainerAvailability.of(layout.storeFolder) == .missing
        {
            return .containerDeleted
        }
        if !identities.isSameContainer() { return .containerReplaced }
        do {
            guard !(try registrar.isRegistered(healing: stillSyncing)) else {
                return nil
            }
        } catch {
            // A sentinel that cannot be read now is not a reset: report it and look again later.
            if let error = error as? SyncError { reportSentinelProblems([error]) }
            return nil
        }
        return ContainerAvailability.of(layout.container) == .missing ? .containerDeleted : .registrationRemoved
    }
}

/// What watches a syncing container for a reset: a presenter of the container, and an item
/// query of the sentinel's files (belt and braces: a deletion and an update can race).
struct ResetWatchers: Sendable {
    let presenter: ContainerPresenter
    let query: ItemQuery.Observation
    let watcher: SyncWatcher

    func cancel() {
        FileCoordinator.removeFilePresenter(presenter)
        query.cancel()
        watcher.release()
    }
}

/// Presents the container and asks for a reset check whenever anything in it is deleted, moved
/// or changed by anyone.
final class ContainerPresenter: FilePresenter, Sendable {
    let presentedItemURL: URL?
    let changed: @Sendable () -> Void

    init(url: URL, changed: @escaping @Sendable () -> Void) {
        presentedItemURL = url
        self.changed = changed
    }

    func accommodatePresentedItemDeletion() throws { changed() }
    func presentedItemDidMove(to newURL: URL) { changed() }
    func presentedItemDidChange() { changed() }
    func accommodatePresentedSubitemDeletion(at url: URL) throws { changed() }
    func presentedSubitemDidChange(at url: URL) { changed() }
    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { changed() }
}
