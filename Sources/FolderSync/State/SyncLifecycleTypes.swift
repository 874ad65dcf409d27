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
    /// ``FolderSync/resume(policy:)``.
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
        case .reset(let reason): return "stopped (\(reason))"
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
    /// Another installation writes under this device's id at the same time (a store copied to a
    /// second machine, a cloned virtual machine, two machines given one device name): one of its
    /// logs follows a log this store wrote. Give one of them another device id
    /// (``FolderSync/assignNewDeviceID(_:to:)``); the local data is intact.
    case deviceIDInUse
    /// The store was given another device id (``FolderSync/assignNewDeviceID(_:to:)``, in this
    /// process or another) while this ``FolderSync`` had it open under the old one: open a new
    /// one for the store.
    case deviceIDChanged

    public var description: String {
        switch self {
        case .containerDeleted: return "the container was deleted"
        case .registrationRemoved: return "this device's registration was removed"
        case .containerReplaced: return "the container was replaced by another device's data"
        case .deviceIDInUse: return "another installation writes under this device's id"
        case .deviceIDChanged: return "the store was given another device id"
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
        case .returningDevice(let others):
            return others.isEmpty ? .replaceContainerWithLocal : .replaceLocalWithContainer
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
            text =
                "restored a device whose store was lost or older than its \(ownLogs) log(s) in the container (\(others.count) other device(s))"
        }
        if let choice { text += ", \(choice.rawValue)" }
        return text
            + ": \(recordsExported) record(s) exported, \(recordsReplaced) replaced, \(changesImported) change(s) imported"
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
    /// An import met two records that two devices created under one id, and kept both: the
    /// earlier keeps the id, the later is now ``CreationConflict/movedTo`` on every device.
    /// Nothing is lost; an app may tell the user, or merge the two itself.
    func folderSync(_ sync: FolderSync, didKeepBothCreations conflict: CreationConflict)
}

extension FolderSyncDelegate {
    public func folderSync(_ sync: FolderSync, didStopAfterReset reason: ContainerResetReason) {}
    public func folderSync(_ sync: FolderSync, didChangeState state: SyncState) {}
    public func folderSync(_ sync: FolderSync, didKeepBothCreations conflict: CreationConflict) {}
}
