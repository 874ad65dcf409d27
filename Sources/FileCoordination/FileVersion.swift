import ConcordSystem
import Foundation

/// A version of a file: its current content, or a copy a file-sync engine made beside it (a
/// conflict copy, or a backup): the Linux counterpart of Foundation's `NSFileVersion`.
///
/// When two devices change `notes.md` before they hear of each other, the engine keeps both and
/// names one of them after its own convention (`notes.sync-conflict-20261124-101500-ABCDEF1.md`
/// for Syncthing; see ``ConflictNaming``). Those copies are `notes.md`'s other versions:
///
/// ```swift
/// for version in FileVersion.unresolvedConflictVersionsOfItem(at: notesURL) ?? [] {
///     // show it next to the current content; say the user keeps theirs:
///     _ = try version.replaceItem(at: notesURL)
///     version.isResolved = true
/// }
/// try FileVersion.removeOtherVersionsOfItem(at: notesURL)
/// ```
///
/// Removing a copy removes the engine's file, so the engine carries the resolution to every
/// device. Presenters of the item hear of copies as they come and go, whoever made them
/// (``FilePresenter/presentedItemDidGain(_:)``, ``FilePresenter/presentedItemDidLose(_:)``,
/// ``FilePresenter/presentedItemDidResolveConflict(_:)``), in every process that presents it.
///
/// Every operation runs under coordination: listing reads the item's directory (without asking
/// presenters to save), replacing writes the item, removing deletes the copy. A version is a
/// snapshot of what was found: an operation on a copy that changed since refuses with
/// ``FileCoordinationError/Code/invalidRequest`` rather than act on content nobody looked at.
public final class FileVersion: Sendable, Hashable, CustomStringConvertible {
    /// How ``replaceItem(at:options:)`` puts the version's content in place.
    public struct ReplacingOptions: OptionSet, Sendable, Hashable {
        /// The option bits.
        public let rawValue: UInt
        /// Creates options from their bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The version's own file goes away once its content is in place (keeping a conflict copy
        /// this way also ends it), instead of staying as a version.
        public static let byMoving = ReplacingOptions(rawValue: 1 << 0)
    }

    /// Where the version's content is: the item itself for the current version, the copy
    /// otherwise.
    public let url: URL
    /// The item this is a version of.
    public let itemURL: URL
    /// Whether this version is a conflict copy (rather than the current version or a backup).
    public let isConflict: Bool
    /// When the version's content was last modified, as the file system says.
    public let modificationDate: Date?
    /// The name of the device or user that saved this version, when the engine's naming says.
    public let localizedNameOfSavingComputer: String?
    /// The name to show for the version: its file name.
    public var localizedName: String? { url.lastPathComponent }
    /// The engine whose naming this copy follows (``ConflictNaming/engine``); `nil` for the
    /// current version.
    public let engine: String?
    /// The date and time the copy's name carries (the engine's local time: no time zone).
    public let nameDate: DateComponents?

    /// The item as it was found, to notice a copy changed since.
    let identity: FileIdentity

    /// Where a version comes from.
    enum Origin: Sendable, Hashable {
        /// The item itself.
        case current
        /// A copy an engine made beside the item.
        case copy
        /// A version the app kept (``addOfItem(at:withContentsOf:options:)``), outside the synced tree.
        case local
    }
    let origin: Origin

    init(
        url: URL,
        itemURL: URL,
        identity: FileIdentity,
        naming: ConflictNaming? = nil,
        match: ConflictNaming.Match? = nil,
        origin: Origin? = nil
    ) {
        self.url = url
        self.itemURL = itemURL
        self.identity = identity
        self.origin = origin ?? (naming == nil ? .current : .copy)
        self.isConflict = match?.isConflict ?? false
        self.localizedNameOfSavingComputer =
            self.origin == .local ? ProcessInfo.processInfo.hostName : match?.savingComputer
        self.engine = naming?.engine
        self.nameDate = match?.dateComponents
        self.modificationDate = Date(
            timeIntervalSince1970: Double(identity.modificationSeconds) + Double(identity.modificationNanoseconds) / 1e9
        )
    }

    /// Whether this is the item's current version (its own file), not a copy.
    public var isCurrent: Bool { origin == .current }

    /// Whether this is a version the app kept itself (``addOfItem(at:withContentsOf:options:)``),
    /// stored outside the synced tree on this machine only, rather than an engine's copy.
    public var isLocal: Bool { origin == .local }

    /// Whether the conflict this version records has been resolved: `false` for a conflict copy
    /// until someone (in any process on this machine) sets it to `true`; `true` for every other
    /// version. Setting it tells the item's presenters
    /// (``FilePresenter/presentedItemDidResolveConflict(_:)``); it leaves the copy in place
    /// (remove it to end the conflict on every device). Use ``setResolved(_:)`` to hear of a
    /// failure; this setter logs it (``FileCoordinator/logger``).
    public var isResolved: Bool {
        get {
            guard isConflict else { return true }
            return VersionResolutions.isResolved(path: url.path, identity: identity)
        }
        set {
            do {
                try setResolved(newValue)
            } catch {
                FileCoordinator.logger.warning(
                    "could not mark a file version resolved: \(error)",
                    metadata: ["concord.item": "\(url.path)"]
                )
            }
        }
    }

    /// Marks the conflict resolved (or not), under coordination, as setting ``isResolved`` does,
    /// and throws what went wrong. Does nothing for a version that is not a conflict.
    ///
    /// - Throws: ``FileCoordinationError``; ``FileCoordinationError/Code/invalidRequest`` when the
    ///   copy changed or went away since it was listed.
    public func setResolved(_ resolved: Bool) throws {
        guard isConflict else { return }
        try FileCoordinator().coordinate(readingItemAt: url, options: .withoutChanges) { url in
            try checkUnchanged(url)
            if resolved {
                try VersionResolutions.mark(path: url.path, identity: identity)
            } else {
                try VersionResolutions.forget(path: url.path)
            }
        }
    }

    // MARK: - Finding versions

    /// The item's current version, or `nil` if there is no item at `url`.
    public static func currentVersionOfItem(at url: URL) -> FileVersion? {
        try? FileCoordinator().coordinate(readingItemAt: url, options: .withoutChanges) { readURL in
            guard let identity = try? FileSystem.identity(at: readURL.path) else { return nil }
            return FileVersion(url: url, itemURL: url, identity: identity)
        }
    }

    /// The item's other versions: the copies beside it that a file-sync engine made and the
    /// versions the app kept (``addOfItem(at:withContentsOf:options:)``), oldest first; `nil` if
    /// its directory cannot be read. The item itself need not exist (rclone bisync
    /// before 1.66 renames every side of a conflict).
    public static func otherVersionsOfItem(at url: URL) -> [FileVersion]? {
        try? versionsOfItem(at: url)
    }

    /// The item's conflict copies that nobody has marked resolved, oldest first; `nil` if its
    /// directory cannot be read.
    public static func unresolvedConflictVersionsOfItem(at url: URL) -> [FileVersion]? {
        otherVersionsOfItem(at: url)?.filter { $0.isConflict && !$0.isResolved }
    }

    /// The item's other versions, oldest first, or the error that kept them from being listed.
    ///
    /// - Parameters:
    ///   - url: the item.
    ///   - namings: the engines' namings to look for (``ConflictNaming/registered`` unless given).
    /// - Throws: ``FileCoordinationError`` if the directory cannot be coordinated or read.
    public static func versionsOfItem(
        at url: URL,
        namings: [ConflictNaming] = ConflictNaming.registered
    ) throws -> [FileVersion] {
        let directory = url.deletingLastPathComponent()
        let itemName = url.lastPathComponent
        return try FileCoordinator().coordinate(readingItemAt: directory, options: .withoutChanges) { readURL in
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: readURL.path)
            } catch {
                throw FileCoordinationError(
                    code: .systemCallFailed,
                    url: directory,
                    message: "cannot list the directory for an item's versions",
                    underlyingError: error
                )
            }
            let copies = scan(directory: directory, names: Set(names), itemName: itemName, namings: namings)
            return (copies + localVersions(of: url)).sorted(by: isOlder)
        }
    }

    /// Oldest first; by name between versions of one instant.
    static func isOlder(_ lhs: FileVersion, _ rhs: FileVersion) -> Bool {
        (lhs.modificationDate ?? .distantPast, lhs.url.lastPathComponent)
            < (rhs.modificationDate ?? .distantPast, rhs.url.lastPathComponent)
    }

    /// The versions of `itemName` among `names`, the entries of `directory` (no coordination).
    static func scan(
        directory: URL,
        names: Set<String>,
        itemName: String,
        namings: [ConflictNaming]
    ) -> [FileVersion] {
        let itemURL = directory.appendingPathComponent(itemName)
        var versions: [FileVersion] = []
        for name in names {
            guard let (naming, match) = ConflictNaming.firstMatch(name, in: namings), match.originalName == itemName,
                match.evidence.contains(where: { $0 != name && names.contains($0) })
            else { continue }
            let url = directory.appendingPathComponent(name)
            // Only files are versions (a folder named like a copy is someone's folder).
            guard let identity = (try? FileSystem.identity(at: url.path)) ?? nil, identity.kind == .regular else {
                continue
            }
            versions.append(FileVersion(url: url, itemURL: itemURL, identity: identity, naming: naming, match: match))
        }
        return versions.sorted(by: isOlder)
    }

    /// Throws unless the file at `url` is still the one this version was made from.
    func checkUnchanged(_ url: URL) throws {
        let current = (try? FileSystem.identity(at: url.path)) ?? nil
        guard current == identity else {
            throw FileCoordinationError(
                code: .invalidRequest,
                url: url,
                message: current == nil
                    ? "the version is gone" : "the version changed since it was listed; list the versions again"
            )
        }
    }

    // MARK: - Hashable, CustomStringConvertible

    /// Two versions are equal when they name the same file with the same content identity.
    public static func == (lhs: FileVersion, rhs: FileVersion) -> Bool {
        lhs.url == rhs.url && lhs.identity == rhs.identity
    }

    /// Hashes the file and its identity.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(url)
        hasher.combine(identity)
    }

    /// The file, the engine and whether it is a conflict.
    public var description: String {
        if isCurrent { return "FileVersion(current: \(url.path))" }
        if isLocal { return "FileVersion(local: \(url.path))" }
        return "FileVersion(\(engine ?? "?") \(isConflict ? "conflict" : "backup"): \(url.path))"
    }
}
