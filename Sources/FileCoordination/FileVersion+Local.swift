import ConcordSystem
import Foundation
import Synchronization

extension FileVersion {
    /// How ``addOfItem(at:withContentsOf:options:)`` takes the content.
    public struct AddingOptions: OptionSet, Sendable, Hashable {
        /// The option bits.
        public let rawValue: UInt
        /// Creates options from their bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The file the content comes from is removed once the version holds it.
        public static let byMoving = AddingOptions(rawValue: 1 << 0)
    }

    /// The environment variable that overrides ``localVersionsDirectory``.
    public static let localVersionsEnvironmentVariable = "CONCORD_VERSIONS_DIR"

    private static let localDirectory = Mutex<URL?>(nil)

    /// Where the versions an app keeps itself are stored: never inside a synced tree, so no
    /// engine carries them. `$CONCORD_VERSIONS_DIR` if set, else `$XDG_DATA_HOME/concord-versions`,
    /// else `~/.local/share/concord-versions` (a data directory, not the lock directory: a
    /// runtime directory is emptied at logout, and a version is kept to outlive that). Set it
    /// before the first version is added to keep them where the app says.
    public static var localVersionsDirectory: URL {
        get {
            localDirectory.withLock { directory in
                if let directory { return directory }
                let environment = ProcessInfo.processInfo.environment
                let resolved: URL
                if let explicit = environment[localVersionsEnvironmentVariable], !explicit.isEmpty {
                    resolved = URL(fileURLWithPath: explicit)
                } else if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") {
                    resolved = URL(fileURLWithPath: data).appendingPathComponent("concord-versions")
                } else {
                    resolved = FileManager.default.homeDirectoryForCurrentUser
                        .appendingPathComponent(".local/share/concord-versions")
                }
                directory = resolved
                return resolved
            }
        }
        set { localDirectory.withLock { $0 = newValue } }
    }

    /// Keeps the content of `contentsURL` (usually the item itself) as a version of the item at
    /// `url`, in ``localVersionsDirectory``: the app's own "revert to an earlier version". The
    /// version keeps the content's modification date; it is listed among the item's
    /// ``otherVersionsOfItem(at:)`` with ``isLocal`` set, on this machine only.
    ///
    /// Runs under coordination: a read of `contentsURL` (its presenters save first), or with
    /// ``AddingOptions/byMoving`` a deletion of it. The content goes into the store through a
    /// temporary file, `fsync` and `rename`, as every durable write of Concord's.
    ///
    /// - Returns: the new version.
    /// - Throws: ``FileCoordinationError``.
    @discardableResult
    public static func addOfItem(
        at url: URL,
        withContentsOf contentsURL: URL,
        options: AddingOptions = []
    ) throws -> FileVersion {
        let item = try CanonicalPath.of(url)
        let folder = try localFolder(for: item, creating: true)
        let stamp = UInt64(Date().timeIntervalSince1970 * 1e9)
        let destination = URL(
            fileURLWithPath: "\(folder)/\(stamp)-\(Platform.processID)-\(UInt32.random(in: .min ... .max)).version"
        )
        let moving = options.contains(.byMoving)
        let source: FileAccessIntent =
            moving ? .writingIntent(with: contentsURL, options: .forDeleting) : .readingIntent(with: contentsURL)
        let identity = try FileCoordinator().coordinate(with: [source, .writingIntent(with: destination)]) {
            urls -> FileIdentity? in
            let modified = try? FileManager.default.attributesOfItem(atPath: urls[0].path)[.modificationDate]
            do throws(SystemCallError) {
                try FileSystem.copyFile(at: urls[0].path, to: urls[1].path)
            } catch {
                throw FileCoordinationError.systemCall(error, url: contentsURL)
            }
            if let modified {
                try? FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: urls[1].path)
            }
            if moving {
                do throws(SystemCallError) {
                    try FileSystem.removeFile(at: urls[0].path)
                    try FileSystem.synchronizeDirectory(at: FileSystem.parentPath(of: urls[0].path))
                } catch {
                    throw FileCoordinationError.systemCall(error, url: contentsURL)
                }
            }
            return (try? FileSystem.identity(at: urls[1].path)) ?? nil
        }
        guard let identity else {
            throw FileCoordinationError(code: .systemCallFailed, url: destination, message: "the new version vanished")
        }
        return FileVersion(url: destination, itemURL: url, identity: identity, origin: .local)
    }

    /// The versions the app kept of the item at `url`.
    static func localVersions(of url: URL) -> [FileVersion] {
        guard let item = try? CanonicalPath.of(url), let folder = try? localFolder(for: item, creating: false),
            let names = try? FileManager.default.contentsOfDirectory(atPath: folder)
        else { return [] }
        return names.filter { $0.hasSuffix(".version") }.compactMap { name in
            let path = folder + "/" + name
            guard let identity = (try? FileSystem.identity(at: path)) ?? nil, identity.kind == .regular else {
                return nil
            }
            return FileVersion(url: URL(fileURLWithPath: path), itemURL: url, identity: identity, origin: .local)
        }
    }

    /// The store's folder for the item at canonical path `item`: named by a hash of the path, and
    /// holding the path itself (in `item`) so that two paths of one hash never share a folder.
    private static func localFolder(for item: String, creating: Bool) throws -> String {
        let root = localVersionsDirectory.path
        let base = root + "/" + VersionResolutions.markName(for: item).replacingOccurrences(of: ".resolved", with: "")
        for attempt in 0..<8 {
            let folder = attempt == 0 ? base : "\(base)-\(attempt)"
            let recorded = (try? AtomicFile.read(at: folder + "/item")).map { String(decoding: $0, as: UTF8.self) }
            if recorded == item { return folder }
            if recorded != nil { continue }
            guard creating else { throw FileCoordinationError(code: .invalidRequest, url: nil, message: "no versions") }
            do {
                try FileManager.default.createDirectory(
                    atPath: root,
                    withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700]
                )
            } catch {
                throw FileCoordinationError(
                    code: .systemCallFailed,
                    url: URL(fileURLWithPath: root),
                    message: "cannot create the local versions directory (set \(localVersionsEnvironmentVariable))",
                    underlyingError: error
                )
            }
            do throws(SystemCallError) {
                try FileSystem.createDirectory(at: folder, mode: 0o700)
                try AtomicFile.write(Array(item.utf8), to: folder + "/item")
            } catch {
                throw FileCoordinationError.systemCall(error, url: URL(fileURLWithPath: folder))
            }
            return folder
        }
        throw FileCoordinationError(
            code: .invalidRequest,
            url: URL(fileURLWithPath: item),
            message: "too many items share this item's hash in the versions store"
        )
    }
}
