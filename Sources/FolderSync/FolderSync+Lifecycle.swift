#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import FileCoordination
import FileWatching
import Foundation
import Logging
import Persistence
import Synchronization

/// Where sync stands for one store on this device.
public enum SyncState: Sendable, Hashable, CustomStringConvertible {
    /// Not syncing: never enabled, or disabled (this device's registration removed).
    case off
    /// Enabled, waiting for the container to become usable; sync starts as soon as it is.
    case waitingForContainer(ContainerAvailability)
    /// Exporting local saves and importing other devices' logs.
    case syncing
    /// Paused: still registered, saves keep their history, nothing is exported or imported until
    /// ``FolderSync/resume()``.
    case paused
    /// Stopped because the container was reset while syncing; the local store is intact. Enabling
    /// sync again registers anew (as a returning device).
    case reset(ContainerResetReason)

    public var description: String {
        switch self {
        case .off: return "off"
        case .waitingForContainer(let availability): return "waiting for the container (\(availability))"
        case .syncing: return "syncing"
        case .paused: return "paused"
        case .reset(let reason): return "stopped by a container reset (\(reason))"
        }
    }
}

/// Whether a container can be used, and if not, why.
public enum ContainerAvailability: Sendable, Hashable, CustomStringConvertible {
    /// It is a folder this process can read and write.
    case available
    /// Nothing is at its path: not created yet, deleted, or on a volume that is not mounted.
    case missing
    /// Something other than a folder is at its path.
    case notAFolder
    /// It can be read but not written: a read-only mount, or permissions.
    case readOnly
    /// It cannot be examined (permissions, I/O error); the `errno` description.
    case inaccessible(String)

    public var description: String {
        switch self {
        case .available: return "available"
        case .missing: return "missing (deleted, or its volume is not mounted)"
        case .notAFolder: return "not a folder"
        case .readOnly: return "read-only"
        case .inaccessible(let cause): return "inaccessible: \(cause)"
        }
    }

    /// The availability of the folder at `url` now.
    public static func of(_ url: URL) -> ContainerAvailability {
        var info = stat()
        if stat(url.path, &info) != 0 {
            let code = errno
            return code == ENOENT || code == ENOTDIR ? .missing : .inaccessible(String(cString: strerror(code)))
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { return .notAFolder }
        if access(url.path, R_OK | X_OK) != 0 { return .inaccessible(String(cString: strerror(errno))) }
        if access(url.path, W_OK) != 0 { return .readOnly }
        return .available
    }
}

/// Why sync stopped by itself.
public enum ContainerResetReason: String, Sendable, Hashable, CustomStringConvertible {
    /// The container (or the store's folder in it) disappeared while syncing.
    case containerDeleted
    /// This device's registration disappeared from the sentinel while syncing: someone reset the
    /// container or removed this device.
    case registrationRemoved
    /// The container was started anew (another device replaced it with its data) while this
    /// device's registration survived or came back (a sync engine can bring back a file it saw
    /// deleted while another machine still wrote it).
    case containerReplaced

    public var description: String {
        switch self {
        case .containerDeleted: return "the container was deleted"
        case .registrationRemoved: return "this device's registration was removed"
        case .containerReplaced: return "the container was replaced by another device's data"
        }
    }
}

/// What enabling sync found. `others` are the other devices registered in the container or with
/// data in it (logs or a baseline).
public enum SyncJoinSituation: Sendable, Hashable {
    /// The container holds nothing of other devices for this store: the local data starts it.
    case newContainer
    /// This device never synced with this store's container, which already holds other devices'.
    case newDevice(others: [String])
    /// This device synced before, and is no longer registered, or was disabled: it stopped
    /// syncing (disabled, or a reset) and its old history cannot simply be resumed.
    case returningDevice(others: [String])
    /// This device is registered and synced before (after a pause or a relaunch): sync resumes.
    case resuming
    /// The container holds history of this device id (logs numbered up to `ownLogs`) that the
    /// store does not: the store was lost and made anew, or restored from an older backup, under
    /// the same device id. Whatever the choice, numbering goes on after `ownLogs`, never over them.
    case restoringDevice(others: [String], ownLogs: UInt64)
}

/// What happens to the local data and the container's when a device joins.
public enum SyncJoinChoice: String, Sendable, Hashable {
    /// Keep both: every local record is exported (and wins over the container's copy of the same
    /// record, being newer), and the container's records are imported.
    case mergeLocalIntoContainer
    /// Keep the container's: the local records are deleted (not as edits: nothing is exported)
    /// and the container's data is imported, this device's own earlier logs included.
    case replaceLocalWithContainer
    /// Keep the local data: the store's folder in the container (every device's logs and
    /// registrations) is removed and started anew from the local data. The other devices see a
    /// reset and choose again.
    case replaceContainerWithLocal
}

/// The app's say in how a device joins a container that already holds data: a pure function of
/// the situation.
public struct SyncJoinPolicy: Sendable {
    /// Chooses for a ``SyncJoinSituation/newDevice(others:)`` or
    /// ``SyncJoinSituation/returningDevice(others:)`` situation.
    public let choose: @Sendable (SyncJoinSituation) -> SyncJoinChoice

    /// A policy that asks `choose`.
    public init(_ choose: @escaping @Sendable (SyncJoinSituation) -> SyncJoinChoice) {
        self.choose = choose
    }

    /// Always the same choice.
    public static func always(_ choice: SyncJoinChoice) -> SyncJoinPolicy { SyncJoinPolicy { _ in choice } }

    /// The default: a new device merges its data into the container (nothing is lost); a
    /// returning device replaces the container with its data when no other device is registered
    /// or has data there (the container was wiped: its data seeds it again), and otherwise
    /// replaces its data with the container's (the devices that kept syncing hold the shared
    /// truth). A replacement of the container is refused while the sentinel cannot be read in full.
    ///
    /// A restoring device (its store lost or restored from a backup) merges: its own earlier saves
    /// come back from the container and whatever the new store holds is kept.
    public static let `default` = SyncJoinPolicy { situation in
        switch situation {
        case .returningDevice(let others): return others.isEmpty ? .replaceContainerWithLocal : .replaceLocalWithContainer
        default: return .mergeLocalIntoContainer
        }
    }
}

/// What ``FolderSync/enable(policy:live:)`` did: the state it reached and, when it joined the
/// container (anything but an already-syncing device), how.
public struct SyncEnabling: Sendable, Hashable {
    /// ``SyncState/syncing``, or ``SyncState/waitingForContainer(_:)`` while the container cannot
    /// be used (the join happens when it can, announced by ``SyncEvent/enabled(_:)``).
    public var state: SyncState
    /// How the device joined: the situation found, the choice made, what was exported, replaced
    /// and imported. `nil` when sync was already running or the container is awaited.
    public var join: SyncJoin?

    /// An outcome.
    public init(state: SyncState, join: SyncJoin? = nil) {
        self.state = state
        self.join = join
    }
}

/// How enabling sync went.
public struct SyncJoin: Sendable, Hashable, CustomStringConvertible {
    /// What enabling found.
    public var situation: SyncJoinSituation
    /// What was done about it (`nil` when resuming, or starting a new container, which needs no choice).
    public var choice: SyncJoinChoice?
    /// Local records exported as the device joined.
    public var recordsExported = 0
    /// Records deleted locally (``SyncJoinChoice/replaceLocalWithContainer``).
    public var recordsReplaced = 0
    /// Record changes imported as the device joined.
    public var changesImported = 0

    public var description: String {
        var text: String
        switch situation {
        case .newContainer: text = "started a new container"
        case .newDevice(let others): text = "joined as a new device (\(others.count) other device(s))"
        case .returningDevice(let others): text = "rejoined as a returning device (\(others.count) other device(s))"
        case .resuming: text = "resumed"
        case .restoringDevice(let others, let ownLogs):
            text = "restored a device whose store was lost or older than its \(ownLogs) log(s) in the container (\(others.count) other device(s))"
        }
        if let choice { text += ", \(choice.rawValue)" }
        return text + ": \(recordsExported) record(s) exported, \(recordsReplaced) replaced, \(changesImported) change(s) imported"
    }
}

/// Told of what sync does by itself. Every method has a do-nothing default. Calls come on a
/// serial queue of their own, never while sync holds a lock, so a delegate may call back into
/// ``FolderSync``.
public protocol FolderSyncDelegate: AnyObject, Sendable {
    /// The container was reset while syncing (told once per reset): sync stopped and the local
    /// store is intact. Enable sync again to join the container anew.
    func folderSync(_ sync: FolderSync, didStopAfterReset reason: ContainerResetReason)
    /// Sync's state changed.
    func folderSync(_ sync: FolderSync, didChangeState state: SyncState)
}

extension FolderSyncDelegate {
    public func folderSync(_ sync: FolderSync, didStopAfterReset reason: ContainerResetReason) {}
    public func folderSync(_ sync: FolderSync, didChangeState state: SyncState) {}
}

/// The lifecycle's state, guarded by ``FolderSync/lifecycle``.
struct Lifecycle: Sendable {
    var state: SyncState = .off
    var policy: SyncJoinPolicy = .default
    weak var delegate: (any FolderSyncDelegate)?
    var watchers: ResetWatchers?
    /// Bumped whenever the state changes, so an availability check of an earlier wait does nothing.
    var generation: UInt64 = 0
    var checkQueued = false
    var availabilityInterval: Duration = .seconds(2)
    /// Sentinel files reported as damaged (once each).
    var reportedProblems: Set<String> = []
    var lastUnavailable: ContainerAvailability?
    /// When a reset was first seen, if it is waiting for confirmation.
    var suspectedAt: ContinuousClock.Instant?
    var resetGracePeriod: Duration = .milliseconds(250)
    var confirmationScheduled = false
    var tombstoneLifetime: Duration = .seconds(30 * 24 * 3600)
    /// Whether sync runs by itself once enabled (``FolderSync/enable(policy:live:)``).
    var live = true

    /// Moves to `state`; says whether it changed.
    mutating func move(to state: SyncState) -> Bool {
        guard self.state != state else { return false }
        self.state = state
        generation += 1
        return true
    }
}

/// What watches a syncing container for a reset: a presenter of the container, and an item
/// query of the sentinel's files (belt and braces: a deletion and an update can race).
struct ResetWatchers: Sendable {
    let presenter: ContainerPresenter
    let query: ItemQuery.Observation
    let watcher: InotifyWatcher

    func cancel() {
        FileCoordinator.removeFilePresenter(presenter)
        query.cancel()
        watcher.stop()
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

let onSyncQueue = DispatchSpecificKey<ObjectIdentifier>()

extension Duration {
    var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}

extension FolderSync {
    static let contributedKey = "sync.contributed"
    /// The choice of a join begun and not finished.
    static let joiningKey = "sync.joining"
    /// Set by ``disable()``: the next enable is a returning device's, whatever the sentinel says.
    static let disabledKey = "sync.disabled"
    /// The identity of the container this device joined.
    static let containerIDKey = "sync.container"

    // MARK: Public lifecycle

    /// Sync's state now.
    public var state: SyncState { lifecycle.withLock { $0.state } }

    /// Told of resets and state changes; held weakly.
    public var delegate: (any FolderSyncDelegate)? {
        get { lifecycle.withLock { $0.delegate } }
        set { lifecycle.withLock { $0.delegate = newValue } }
    }

    /// How often a container that cannot be used is looked at again (default 2 s).
    public var availabilityCheckInterval: Duration {
        get { lifecycle.withLock { $0.availabilityInterval } }
        set { lifecycle.withLock { $0.availabilityInterval = newValue } }
    }

    /// How long what looks like a container reset must last before sync stops for it (default
    /// 250 ms): a sync engine that replaces a registration by deleting and re-creating it is not
    /// a reset, and a container deleted file by file is reported as deleted.
    public var resetGracePeriod: Duration {
        get { lifecycle.withLock { $0.resetGracePeriod } }
        set { lifecycle.withLock { $0.resetGracePeriod = newValue } }
    }

    /// How long a deleted record's tombstone (the clock of its deletion, kept in the store and in
    /// baselines) is kept at least, counted from the deletion (default 30 days). Compaction
    /// collects a tombstone only once every device has seen its deletion and this device has
    /// applied every log written before that, and then only after this long: a device that was
    /// away for longer and merges its old data back (``SyncJoinChoice/mergeLocalIntoContainer``)
    /// brings back records deleted meanwhile.
    public var tombstoneLifetime: Duration {
        get { lifecycle.withLock { $0.tombstoneLifetime } }
        set { lifecycle.withLock { $0.tombstoneLifetime = newValue } }
    }

    /// Whether the container can be used now.
    public var containerAvailability: ContainerAvailability { ContainerAvailability.of(layout.container) }

    /// Turns sync on: checks the sentinel, joins the container as its situation and `policy`
    /// say, registers this device, and starts live sync (``start(watcher:rescanInterval:)``).
    ///
    /// - A device registered since it last synced (after ``pause()`` or a relaunch) resumes: the
    ///   saves it made meanwhile are exported, what arrived is imported.
    /// - An empty container is started with the local data.
    /// - A device that never synced with a container holding data, or a device that synced before
    ///   and is no longer registered (it was disabled, or the container was reset), asks `policy`
    ///   (``SyncJoinChoice``); whatever it chooses keeps the data it says to keep.
    /// - A container that cannot be used (missing, not mounted, read-only) is reported
    ///   (``SyncEvent/containerUnavailable(_:)``), the state becomes
    ///   ``SyncState/waitingForContainer(_:)``, and the container is looked at every
    ///   ``availabilityCheckInterval`` until it can be used; then sync starts by itself.
    ///
    /// While syncing, the container and the sentinel are watched: if the container disappears or
    /// this device's registration is removed, sync stops (``SyncState/reset(_:)``), the local store
    /// stays intact and usable, and the app is told once: the delegate, ``SyncEvent/containerReset(_:)``
    /// and ``Foundation/Notification/Name/concordSyncContainerReset``.
    ///
    /// - Returns: the state reached: ``SyncState/syncing``, or ``SyncState/waitingForContainer(_:)``.
    /// - Throws: the store's errors, ``SyncError`` when the container or the sentinel cannot be
    ///   written or read; sync is then not started, and the local data is as the failed step left
    ///   it (each step is idempotent: enabling again completes it).
    ///
    /// - Parameter live: whether sync then runs by itself (exports after saves, imports on
    ///   arrival, reset watching); `false` for a process that drives ``exportPending()`` and
    ///   ``importAvailable(batchSize:)`` itself, such as a one-shot command-line tool.
    @discardableResult
    public func enable(policy: SyncJoinPolicy = .default, live: Bool = true) throws -> SyncEnabling {
        lifecycle.withLock {
            $0.policy = policy
            $0.live = live
        }
        return try onQueue { try performEnable() }
    }

    /// Pauses sync: no exports, no imports, no reset watching; the device stays registered and its
    /// saves keep their history, which ``resume()`` exports.
    public func pause() {
        onQueue {
            let changed = lifecycle.withLock { state -> Bool in
                guard state.state != .off, state.state != .paused else { return false }
                if case .reset = state.state { return false }
                return state.move(to: .paused)
            }
            guard changed else { return }
            stopWatching()
            stopLive()
            logger.debug("sync paused", metadata: ["concord.device": "\(deviceID)"])
            announce(.paused)
        }
    }

    /// Resumes paused sync: the same as ``enable(policy:)``, with the policy last given unless
    /// `policy` is (it is asked only if this device's registration disappeared meanwhile).
    @discardableResult
    public func resume(policy: SyncJoinPolicy? = nil) throws -> SyncEnabling {
        if let policy { lifecycle.withLock { $0.policy = policy } }
        return try onQueue { try performEnable() }
    }

    /// Turns sync off for this device: live sync stops, this device's registration is removed
    /// from the sentinel (its logs stay for the others). The local data stays, and saves keep their
    /// history: enabling sync again later joins as a returning device, and a merge then exports
    /// what changed meanwhile with the clocks it had.
    public func disable() throws {
        try onQueue {
            stopWatching()
            stopLive()
            // Saves keep their history while sync is off: a merge when the device comes back
            // exports what it changed, with the clocks it had.
            lifecycle.withLock { state in
                _ = state.move(to: .off)
                state.generation += 1  // an enable in progress stops short
            }
            // The next enable joins anew, even if the registration below cannot be removed now
            // (an unavailable container).
            try store.commit(StoreChanges(metadataEntries: [Self.disabledKey: Data("1".utf8)]))
            if ContainerAvailability.of(layout.storeFolder) == .available {
                // Compaction stops waiting for a device that left.
                _ = try? publishAcknowledgement(left: true)
                try sentinel.unregister(deviceID)
            }
            logger.debug("sync disabled", metadata: ["concord.device": "\(deviceID)"])
            announce(.off)
        }
    }

    // MARK: Enabling

    private func performEnable() throws -> SyncEnabling {
        let current = lifecycle.withLock { $0.state }
        if current == .syncing { return SyncEnabling(state: current) }
        // Saves from now on keep their history, also while the container is awaited.
        coordinator.removeSaveParticipant(self)
        coordinator.addSaveParticipant(self)
        let availability = containerAvailability
        guard availability == .available else {
            let report = lifecycle.withLock { state -> Bool in
                _ = state.move(to: .waitingForContainer(availability))
                defer { state.lastUnavailable = availability }
                return state.lastUnavailable != availability
            }
            if report {
                logger.info("the container cannot be used yet; waiting", metadata: ["concord.container": "\(layout.container.path)", "concord.availability": "\(availability)"])
                emit(.containerUnavailable(availability))
                announce(.waitingForContainer(availability))
            }
            scheduleAvailabilityCheck()
            return SyncEnabling(state: .waitingForContainer(availability))
        }
        // A pause, disable or stop while joining (from an event observer, or another thread)
        // wins: the join's work stays (each step is idempotent), but the device is not registered
        // and sync does not start.
        let started = lifecycle.withLock { $0.generation }
        func interrupted() -> SyncError {
            SyncError(.invalidState, "sync was paused, disabled or stopped while it was being enabled", url: layout.container)
        }
        let policy = lifecycle.withLock { $0.policy }
        // Another process of this device may be enabling the same store: one joins, the other
        // then finds it registered and resumes.
        let join = try syncLock.withLock {
            let join = try joinContainer(policy: policy)
            guard lifecycle.withLock({ $0.generation == started }) else { throw interrupted() }
            try sentinel.register(DeviceRegistration(device: deviceID, host: ProcessInfo.processInfo.hostName, schemaVersion: coordinator.schema.version))
            let removed: Data? = nil
            // The container joined: the smallest of its ids (its identity file, or a conflict copy).
            let joinedID: Data? = containerIDs().min().map { Data($0.utf8) }
            try store.commit(StoreChanges(metadataEntries: [
                Self.contributedKey: Data("1".utf8), Self.joiningKey: removed, Self.disabledKey: removed,
                Self.containerIDKey: joinedID,
            ]))
            return join
        }
        guard lifecycle.withLock({ state -> Bool in
            guard state.generation == started else { return false }
            state.lastUnavailable = nil
            return state.move(to: .syncing) || state.state == .syncing
        }) else { throw interrupted() }
        if lifecycle.withLock({ $0.live }) {
            do {
                try startWatching()
                try start()
            } catch {
                stopWatching()
                _ = lifecycle.withLock { $0.move(to: .off) }
                throw error
            }
        }
        logger.debug("sync enabled", metadata: ["concord.device": "\(deviceID)", "concord.join": "\(join)"])
        emit(.enabled(join))
        announce(.syncing)
        return SyncEnabling(state: .syncing, join: join)
    }

    /// Decides how this device joins and does it; the device is not registered yet. Local commits
    /// wait meanwhile (the join resets and rewrites what they would read).
    private func joinContainer(policy: SyncJoinPolicy) throws -> SyncJoin {
        return try syncLock.withLock {
            for folder in [layout.storeFolder, layout.devicesFolder, layout.deviceFolder(deviceID)] {
                do {
                    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                } catch {
                    throw SyncError(.containerUnavailable, "cannot create the folder", url: folder, underlying: error)
                }
            }
            let marks = try store.metadataEntries(forKeys: [Self.contributedKey, Self.joiningKey, Self.disabledKey])
            let contributed = marks[Self.contributedKey] != nil
            let pending = marks[Self.joiningKey].flatMap { SyncJoinChoice(rawValue: String(decoding: $0, as: UTF8.self)) }
            // History of this device id the store does not hold: the store was lost, or restored
            // from a backup. Its numbers are never used again.
            let ownLogs = ownHistoryInContainer()
            let restoring = ownLogs > (try lastLocalSequence()) && isSameContainer()
            if restoring { try continueNumbering(after: ownLogs) }
            if !restoring, contributed, pending == nil, marks[Self.disabledKey] == nil, isSameContainer(), try sentinel.isRegistered(deviceID) {
                return SyncJoin(situation: .resuming)
            }
            let contents = try sentinel.contents()
            reportSentinelProblems(contents.problems)
            // Others are the devices registered, and those that left data in the container (a device
            // still joining registers last; a registration may not have arrived yet).
            let others = Set(contents.registrations.map(\.device)).union(devicesWithData()).subtracting([deviceID])
                .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            let situation: SyncJoinSituation
            if restoring {
                situation = .restoringDevice(others: others, ownLogs: ownLogs)
                logger.warning(
                    "this device id has \(ownLogs) log(s) in the container that its store does not hold: restoring",
                    metadata: ["concord.device": "\(deviceID)", "concord.folder": "\(layout.deviceFolder(deviceID).path)"])
            } else if contributed {
                situation = .returningDevice(others: others)
            } else if others.isEmpty {
                situation = .newContainer
            } else {
                situation = .newDevice(others: others)
            }
            var join = SyncJoin(situation: situation)
            if situation == .newContainer {
                if containerIDs().isEmpty { _ = try startContainerIdentity() }
                join.recordsExported = try exportExistingData()
                return join
            }
            // A join interrupted (a crash, a failure) goes on with the choice it made, never another.
            let choice = pending ?? policy.choose(situation)
            join.choice = choice
            if choice == .replaceContainerWithLocal, let problem = contents.problems.first {
                throw SyncError(
                    .corruptSentinel, "will not replace the container while its sentinel cannot be read in full: \(problem.message)",
                    url: problem.url)
            }
            if pending == nil { try store.commit(StoreChanges(metadataEntries: [Self.joiningKey: Data(choice.rawValue.utf8)])) }
            logger.info("joining the container", metadata: ["concord.device": "\(deviceID)", "concord.situation": "\(situation)", "concord.choice": "\(choice.rawValue)"])
            switch choice {
            case .mergeLocalIntoContainer where restoring:
                // This device's own earlier saves come back with everyone else's; then what the
                // store holds that the container lacks (records without clocks) goes out.
                join.changesImported = try startFromBaseline(includingOwnHistory: true)
                join.changesImported += try importAvailable(includingOwnLogs: true).changes
                join.recordsExported = try exportExistingData()
            case .mergeLocalIntoContainer:
                if contributed, !isSameContainer() {
                    // Another container: everything local goes out anew, numbered anew. Deletions
                    // stay final: their clocks are kept, so the container cannot bring them back.
                    try resetSyncMetadata(keepingSequence: false, keepingDeletions: true)
                }
                // In the same container a returning device keeps its clocks: what it changed while
                // away is in its outbox (saves keep their history while sync is off) and goes out
                // with the clocks it had; deletions and newer writes others made meanwhile win.
                join.recordsExported = try exportExistingData()
                // History folded into a baseline (and its logs removed) arrives through the baseline.
                join.changesImported = try startFromBaseline()
                join.changesImported += try importAvailable().changes
            case .replaceLocalWithContainer:
                join.recordsReplaced = try deleteLocalRecords()
                // In another container (replaced by a device's data) this device's numbering starts
                // anew: its old logs are not there, and the others would wait for them.
                try resetSyncMetadata(keepingSequence: isSameContainer(), keepingDeletions: false)
                join.changesImported = try startFromBaseline(includingOwnHistory: true)
                join.changesImported += try importAvailable(includingOwnLogs: true).changes
            case .replaceContainerWithLocal:
                do {
                    try SentinelFiles.coordinator.removeItem(at: layout.storeFolder)
                    try FileManager.default.createDirectory(at: layout.deviceFolder(deviceID), withIntermediateDirectories: true)
                } catch {
                    throw SyncError(.ioFailed, "cannot replace the store's folder in the container", url: layout.storeFolder, underlying: error)
                }
                try resetSyncMetadata(keepingSequence: false, keepingDeletions: false)
                _ = try startContainerIdentity()
                join.recordsExported = try exportExistingData()
            }
            return join
        }
    }

    /// The other devices that left data in the container (registered or not): a log or a baseline.
    private func devicesWithData() -> [String] {
        let devices = ((try? FileManager.default.contentsOfDirectory(atPath: layout.devicesFolder.path)) ?? [])
            .filter { ContainerLayout.isValidDeviceID($0) && $0 != deviceID }
        return devices.filter { device in
            ((try? FileManager.default.contentsOfDirectory(atPath: layout.deviceFolder(device).path)) ?? []).contains { name in
                if case .log = ContainerLayout.classify(fileName: name) { return true }
                return name.hasPrefix(Self.baselinePrefix)
            }
        }
    }

    /// Forgets what sync knew of the container: clocks (but, with `keepingDeletions`, those of
    /// deleted records), applied logs, the outbox (and, for a new container, the log numbering).
    /// The device id and the clock stay.
    private func resetSyncMetadata(keepingSequence: Bool, keepingDeletions: Bool) throws {
        try syncLock.withLock {
            let entries = try store.metadata().entries
            var changes: [String: Data?] = [:]
            for (key, value) in entries
            where key.hasPrefix(RecordClocks.keyPrefix) || key.hasPrefix(Self.appliedPrefix) || key.hasPrefix(Self.outboxPrefix) {
                // (A record made again after its deletion is live: its clocks go, so that the join
                // exports it.)
                if keepingDeletions, key.hasPrefix(RecordClocks.keyPrefix),
                    let clocks = try? RecordClocks.decode(value), clocks.deleted != nil, !clocks.isAlive
                { continue }
                // Logs already in the container stay in the outbox (healing needs them).
                if keepingSequence, key.hasPrefix(Self.outboxPrefix) { continue }
                changes[key] = .some(nil)
            }
            changes[Self.dependenciesKey] = .some(nil)
            let sequence = Self.number(entries[Self.sequenceKey]) ?? 0
            // Numbers this device id already has in the container are never used again.
            let own = keepingSequence ? 0 : ownHistoryInContainer()
            if own > 0 {
                changes[Self.sequenceKey] = .some(Data(String(own).utf8))
                changes[Self.outboxFromKey] = .some(Data(String(own + 1).utf8))
            }
            if keepingSequence {
                // Logs committed and not yet written carry what is being given up: each goes out
                // empty instead, so the other devices see no gap in this device's numbering.
                let from = Self.number(entries[Self.outboxFromKey]) ?? 1
                if from <= sequence {
                    for number in from...sequence where entries[Self.outboxKey(number)] != nil {
                        let empty = LogFile(
                            device: deviceID, sequence: number, schemaVersion: coordinator.schema.version, created: Date(),
                            payload: try SyncPayload(changes: []).encoded())
                        changes[Self.outboxKey(number)] = .some(empty.encoded())
                    }
                }
            } else {
                for key in entries.keys where key.hasPrefix(Self.outboxPrefix) { changes[key] = .some(nil) }
                changes[Self.keptFromKey] = .some(nil)
                if own == 0 { for key in [Self.sequenceKey, Self.outboxFromKey] { changes[key] = .some(nil) } }
            }
            try store.commit(StoreChanges(metadataEntries: changes))
        }
    }

    /// The highest log number of this device id the container knows of: its logs, what its own
    /// acknowledgement says it exported and committed, what baselines cover of it.
    func ownHistoryInContainer() -> UInt64 {
        var highest = (try? layout.logSequences(device: deviceID).last) ?? 0
        if let own = acknowledgements().first(where: { $0.device == deviceID }) {
            highest = max(highest, own.applied[deviceID] ?? 0, own.committed ?? 0)
        }
        if let baseline = newestBaseline() { highest = max(highest, baseline.payload.covers[deviceID] ?? 0) }
        return highest
    }

    /// Makes the next local log number come after `sequence`.
    private func continueNumbering(after sequence: UInt64) throws {
        let next = Data(String(sequence + 1).utf8)
        try store.commit(StoreChanges(metadataEntries: [Self.sequenceKey: Data(String(sequence).utf8), Self.outboxFromKey: next]))
    }

    /// Deletes every local record of the store as an import (nothing is exported); returns how many.
    private func deleteLocalRecords() throws -> Int {
        return try syncLock.withLock {
            importing.withLock { $0 = true }
            defer { importing.withLock { $0 = false } }
            let context = ObjectContext(coordinator: coordinator, origin: .import, name: "sync replace local data")
            var count = 0
            for entity in coordinator.schema.entities {
                try store.enumerateRecords(of: entity.name, batchSize: 1000) { records in
                    for record in records { try context.deleteWithoutRules(record.id) }
                    count += records.count
                }
            }
            try context.save()
            return count
        }
    }

    // MARK: The container's identity

    /// `STORE/container.plist`: the container's identity, written once by the device that starts
    /// it (a new container, or one replaced with a device's data). Two devices starting one at
    /// once leave a sync engine's conflict copy: every id found names the same container.
    var identityURL: URL { layout.storeFolder.appendingPathComponent("container.plist", isDirectory: false) }

    struct ContainerIdentity: Codable {
        var id: String
        var created: Date
        var device: String
    }

    /// The ids the container's identity file and its conflict copies hold (empty: no identity,
    /// as in containers started before it existed). Damaged files are reported and skipped.
    func containerIDs() -> Set<String> {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: layout.storeFolder.path)) ?? []
        var ids: Set<String> = []
        for name in names where name == "container.plist" || (name.hasPrefix("container") && name.hasSuffix(".plist") && name.contains("onflict")) {
            let url = layout.storeFolder.appendingPathComponent(name, isDirectory: false)
            do {
                guard let data = try SentinelFiles.read(url) else { continue }
                let identity: ContainerIdentity = try SentinelFiles.decode(data, url: url)
                ids.insert(identity.id)
            } catch {
                reportSentinelProblems([error])
            }
        }
        return ids
    }

    /// Writes a new identity (the container is new, or replaced); returns it.
    func startContainerIdentity() throws -> String {
        let identity = ContainerIdentity(id: UUID().uuidString, created: Date(), device: deviceID)
        try SentinelFiles.write(SentinelFiles.encode(identity), to: identityURL)
        return identity.id
    }

    /// Whether the container is the one this device joined: true when either side has no
    /// identity to compare (a container or a join from before identities).
    func isSameContainer() -> Bool {
        guard let joined = (try? store.metadataEntries(forKeys: [Self.containerIDKey]))?[Self.containerIDKey] else { return true }
        let ids = containerIDs()
        return ids.isEmpty || ids.contains(String(decoding: joined, as: UTF8.self))
    }

    // MARK: Watching for a reset

    private func startWatching() throws {
        stopWatching()
        let watcher = try InotifyWatcher(settleWindow: .zero, logger: logger)
        let presenter = ContainerPresenter(url: layout.container) { [weak self] in self?.requestResetCheck() }
        FileCoordinator.addFilePresenter(presenter)
        // Callbacks, not an iteration: the check must not wait for Swift concurrency's threads.
        // The end of the watch (the sentinel's folder went away) is a reason to look too.
        let query: ItemQuery.Observation
        do {
            query = try ItemQuery(scope: sentinel.folder, matching: sentinel.filePattern, watcher: watcher)
                .observe(onEnd: { [weak self] in self?.requestResetCheck() }) { [weak self] _ in self?.requestResetCheck() }
        } catch {
            FileCoordinator.removeFilePresenter(presenter)
            watcher.stop()
            throw error
        }
        lifecycle.withLock { $0.watchers = ResetWatchers(presenter: presenter, query: query, watcher: watcher) }
    }

    func stopWatching() {
        lifecycle.withLock { state in
            defer { state.watchers = nil }
            return state.watchers
        }?.cancel()
    }

    /// Queues one reset check on the sync queue (checks asked for while one is queued are one).
    func requestResetCheck() {
        let queue = lifecycle.withLock { state -> Bool in
            guard state.state == .syncing, !state.checkQueued else { return false }
            state.checkQueued = true
            return true
        }
        guard queue else { return }
        live.queue.async { [self] in
            lifecycle.withLock { $0.checkQueued = false }
            _ = detectReset()
        }
    }

    /// On the sync queue, while enabled: whether the container was reset (then sync stops and the
    /// app is told). Called before every live export and import, and on every change the
    /// presenter or the sentinel query sees. Live sync started without ``enable(policy:)`` checks
    /// nothing.
    ///
    /// What looks like a reset is confirmed ``resetGracePeriod`` later before sync stops (sync
    /// holds its exports and imports meanwhile): a sync engine may replace a registration by
    /// deleting and re-creating it, and a container being deleted file by file loses the
    /// registration before the folder, and is then reported as deleted, not as a removal.
    func detectReset() -> Bool {
        guard lifecycle.withLock({ $0.state == .syncing }) else { return false }
        guard observedReset() != nil else {
            lifecycle.withLock { $0.suspectedAt = nil }
            return false
        }
        let now = ContinuousClock.now
        // (confirmed, when to look again if not and no look is scheduled yet)
        let (confirmed, lookAgain) = lifecycle.withLock { state -> (Bool, Duration?) in
            let since = state.suspectedAt ?? now
            state.suspectedAt = since
            let left = state.resetGracePeriod - (now - since)
            if left <= .zero { return (true, nil) }
            guard !state.confirmationScheduled else { return (false, nil) }
            state.confirmationScheduled = true
            return (false, left)
        }
        if !confirmed {
            if let lookAgain {
                live.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(max(lookAgain.nanoseconds, 1_000_000)))) { [weak self] in
                    guard let self else { return }
                    lifecycle.withLock { $0.confirmationScheduled = false }
                    // Not a reset after all: the work held back meanwhile runs now.
                    if !detectReset(), isLive {
                        scheduleExport()
                        scheduleImport()
                    }
                }
            }
            return true
        }
        guard let reason = observedReset() else {
            lifecycle.withLock { $0.suspectedAt = nil }
            return false
        }
        guard lifecycle.withLock({ state -> Bool in
            state.suspectedAt = nil
            return state.state == .syncing && state.move(to: .reset(reason))
        }) else { return false }
        stopWatching()
        stopLive()
        logger.warning("the container was reset; sync stopped, local data kept", metadata: ["concord.device": "\(deviceID)", "concord.reason": "\(reason.rawValue)"])
        emit(.containerReset(reason))
        NotificationCenter.default.post(name: .concordSyncContainerReset, object: self, userInfo: ["reason": reason])
        let delegate = lifecycle.withLock { $0.delegate }
        if let delegate { delegateQueue.async { delegate.folderSync(self, didStopAfterReset: reason) } }
        announce(.reset(reason))
        return true
    }

    /// The reset the container shows now, if any.
    private func observedReset() -> ContainerResetReason? {
        if ContainerAvailability.of(layout.container) == .missing || ContainerAvailability.of(layout.storeFolder) == .missing {
            return .containerDeleted
        }
        if !isSameContainer() { return .containerReplaced }
        do {
            guard !(try sentinel.isRegistered(deviceID)) else { return nil }
        } catch {
            // A sentinel that cannot be read now is not a reset: report it and look again later.
            if let error = error as? SyncError { reportSentinelProblems([error]) }
            return nil
        }
        return ContainerAvailability.of(layout.container) == .missing ? .containerDeleted : .registrationRemoved
    }

    private func reportSentinelProblems(_ problems: [SyncError]) {
        for problem in problems {
            let key = (problem.url?.path ?? "") + "|" + problem.message
            guard lifecycle.withLock({ $0.reportedProblems.insert(key).inserted }) else { continue }
            logger.warning("a sentinel file cannot be read", metadata: ["concord.file": "\(problem.url?.path ?? "?")", "concord.error": "\(problem)"])
            emit(.corruptSentinel(problem))
        }
    }

    // MARK: Waiting for the container

    private func scheduleAvailabilityCheck() {
        let (generation, interval) = lifecycle.withLock { ($0.generation, $0.availabilityInterval) }
        let nanoseconds = interval.nanoseconds
        live.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(max(nanoseconds, 1_000_000)))) { [weak self] in
            guard let self else { return }
            let current = lifecycle.withLock { state -> Bool in
                guard state.generation == generation, case .waitingForContainer = state.state else { return false }
                return true
            }
            guard current else { return }
            guard containerAvailability == .available else {
                // Same state: keep the generation, look again.
                let availability = containerAvailability
                let changed = lifecycle.withLock { state -> Bool in
                    guard state.lastUnavailable != availability else { return false }
                    state.lastUnavailable = availability
                    state.state = .waitingForContainer(availability)
                    return true
                }
                if changed {
                    emit(.containerUnavailable(availability))
                    announce(.waitingForContainer(availability))
                }
                scheduleAvailabilityCheck()
                return
            }
            do {
                _ = try performEnable()
            } catch {
                logger.warning("sync could not start on the container that became available", metadata: ["concord.error": "\(error)"])
                emit(.failed("enable failed: \(error)"))
                scheduleAvailabilityCheck()
            }
        }
    }

    // MARK: Helpers

    /// Runs `body` on the sync queue (directly when already on it).
    func onQueue<T>(_ body: () throws -> T) rethrows -> T {
        // This instance's queue only: another FolderSync's queue is not ours to run on.
        if DispatchQueue.getSpecific(key: onSyncQueue) == ObjectIdentifier(self) { return try body() }
        return try live.queue.sync(execute: body)
    }

    /// Tells listeners and the delegate of a new state.
    private func announce(_ state: SyncState) {
        emit(.stateChanged(state))
        let delegate = lifecycle.withLock { $0.delegate }
        if let delegate { delegateQueue.async { delegate.folderSync(self, didChangeState: state) } }
    }
}
