import FileCoordination
import Foundation
import GRDB
import Persistence
import Synchronization

// MARK: - Presenting
extension SQLiteStore {
    /// The database file while the store is open; `nil` once it is closed or removed.
    public var presentedItemURL: URL? {
        state.withLock { $0.phase == .open ? $0.url : nil }
    }

    /// Another connection changed the database (or its log): reports
    /// `StoreEvent.Kind.changedExternally` if it committed anything.
    public func presentedItemDidChange() {
        checkForExternalChanges()
    }

    /// The database is being (or was) deleted: the store closes and reports
    /// `StoreEvent.Kind.removed`.
    public func accommodatePresentedItemDeletion() throws {
        guard let (_, url) = try? connection() else { return }
        if FileManager.default.fileExists(atPath: url.path) {
            tearDown(to: .removed)  // a coordinated deletion, about to happen
        } else {
            confirmRemoval(of: url)  // after the fact: a deletion, or a move still being reported
        }
    }

    /// The database moved (with its companions): the store reopens it at `newURL` and reports
    /// `StoreEvent.Kind.moved(from:to:)`.
    public func presentedItemDidMove(to newURL: URL) {
        followMove(to: newURL.standardizedFileURL)
    }

    /// Before another writer in this process changes or moves the files: the log is
    /// checkpointed into the database and emptied, so the database file alone is complete.
    public func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        checkpoint()
        writer(nil)
    }

    /// Before another reader in this process reads the database (a copy, say): the log is
    /// checkpointed into it, so the database file alone holds every commit.
    public func savePresentedItemChanges() throws {
        checkpoint()
    }

    fileprivate func checkForExternalChanges() {
        guard let (queue, url) = try? connection() else { return }
        if !FileManager.default.fileExists(atPath: url.path) {
            confirmRemoval(of: url)
            return
        }
        let identifier = state.withLock { $0.storeIdentifier }
        do {
            let changed = try queue.inDatabase { db -> Bool in
                let version = try Int.fetchOne(db, sql: "PRAGMA data_version") ?? 0
                return state.withLock { state in
                    guard state.phase == .open, state.dataVersion != version else { return false }
                    state.dataVersion = version
                    return true
                }
            }
            if changed {
                events.send(
                    StoreEvent(
                        storeType: Self.storeType,
                        storeIdentifier: identifier,
                        url: url,
                        kind: .changedExternally
                    )
                )
            }
        } catch {
            guard (try? connection()) != nil else { return }
            let failure = translate(error, url: url, doing: "reading the changed store")
            events.send(
                StoreEvent(
                    storeType: Self.storeType,
                    storeIdentifier: identifier,
                    url: url,
                    kind: .reloadFailed(failure.description)
                )
            )
        }
    }

    /// The database is gone from `url`, but another process moving the files (the companions
    /// first, the database last, each a separate rename) looks the same until the move of the
    /// database is reported: the store is torn down only if, a moment later, it has not followed
    /// a move and the file is still missing.
    private func confirmRemoval(of url: URL) {
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(250)) { [weak self] in
            guard let self else { return }
            let unchanged = self.state.withLock { $0.phase == .open && $0.url == url }
            if unchanged && !FileManager.default.fileExists(atPath: url.path) { self.tearDown(to: .removed) }
        }
    }

    private func checkpoint() {
        guard !options.isReadOnly, let (queue, _) = try? connection() else { return }
        _ = try? queue.inDatabase { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
    }

    private func followMove(to newURL: URL) {
        guard let (oldQueue, oldURL) = try? connection(), oldURL != newURL else { return }
        let identifier = state.withLock { $0.storeIdentifier }
        let opened: Opened
        do {
            opened = try Self.open(
                at: newURL,
                layout: layout,
                options: options,
                busyTimeout: busyTimeout,
                integrityCheck: integrityCheck
            )
        } catch {
            // The old connection's descriptors follow the moved files: keep serving through it.
            events.send(
                StoreEvent(
                    storeType: Self.storeType,
                    storeIdentifier: identifier,
                    url: oldURL,
                    kind: .reloadFailed("\(error)")
                )
            )
            return
        }
        let companion =
            options.presentsFiles
            ? CompanionPresenter(url: URL(fileURLWithPath: newURL.path + "-wal"), store: self) : nil
        let (moved, oldCompanion) = state.withLock { state -> (Bool, CompanionPresenter?) in
            guard state.phase == .open, state.queue === oldQueue else { return (false, nil) }
            let old = state.companion
            state.queue = opened.queue
            state.url = newURL
            state.dataVersion = opened.dataVersion
            state.companion = companion
            state.checkedIntegrity = opened.checkedIntegrity
            return (true, old)
        }
        guard moved else {
            try? opened.queue.close()
            return
        }
        if let oldCompanion { FileCoordinator.removeFilePresenter(oldCompanion) }
        if let companion { FileCoordinator.addFilePresenter(companion) }
        try? oldQueue.close()
        events.send(
            StoreEvent(
                storeType: Self.storeType,
                storeIdentifier: identifier,
                url: newURL,
                kind: .moved(from: oldURL, to: newURL)
            )
        )
    }
}

/// Presents the store's `-wal` file, where other connections' commits land first, and passes
/// what it hears on to the store.
final class CompanionPresenter: FilePresenter {
    private let location: Mutex<URL>
    private weak let store: SQLiteStore?

    init(url: URL, store: SQLiteStore) {
        location = Mutex(url)
        self.store = store
    }

    var presentedItemURL: URL? { location.withLock { $0 } }

    func presentedItemDidChange() { store?.checkForExternalChanges() }

    /// The log went away (SQLite deletes it when the last connection closes): only the
    /// database's own deletion removes the store, so just look again.
    func accommodatePresentedItemDeletion() throws { store?.checkForExternalChanges() }

    func presentedItemDidMove(to newURL: URL) { location.withLock { $0 = newURL } }
}
