import ConcordSystem
import Foundation

/// The file-system calls sync makes outside its durable writes, through the system layer
/// (`ConcordSystem.FileSystem`): folder listings, what is at a path, folders made, entries
/// removed. Errors are `SystemCallError`s that name the call, the errno and the path.
enum SyncFiles {
    /// The names in `folder` (no `.` or `..`, in no particular order); none when it cannot be
    /// listed (missing, not a folder, unreadable): the callers look again at their next pass.
    static func names(in folder: URL) -> [String] {
        (try? FileSystem.directoryEntries(at: folder.path)) ?? []
    }

    /// The names in `folder`; `nil` when there is no such folder.
    /// - Throws: the `SystemCallError` that keeps a folder that is there from being listed.
    static func listing(of folder: URL) throws(SystemCallError) -> [String]? {
        do {
            return try FileSystem.directoryEntries(at: folder.path)
        } catch  where error.errno == .noSuchFileOrDirectory {
            return nil
        }
    }

    /// What is at `url`, a symbolic link followed (as `FileManager.fileExists(atPath:)` sees it),
    /// or `nil` when nothing is (or it cannot be looked at).
    static func item(at url: URL) -> FileIdentity? {
        (try? FileSystem.identity(at: url.path, followingLinks: true)) ?? nil
    }

    /// Whether anything is at `url` (a symbolic link followed).
    static func exists(_ url: URL) -> Bool { item(at: url) != nil }

    /// Whether a folder is at `url` (a symbolic link followed).
    static func isFolder(_ url: URL) -> Bool { item(at: url)?.kind == .directory }

    /// When the item at `url` was last modified, or `nil` when nothing is there.
    static func modificationDate(of url: URL) -> Date? {
        item(at: url).map { Date(timeIntervalSince1970: $0.modificationTime) }
    }

    /// Creates the folder `url` and any missing parents; an existing folder is fine.
    static func createFolder(_ url: URL) throws {
        try FileSystem.createDirectory(at: url.path)
    }

    /// Removes the file (or empty folder) at `url`; nothing there is fine.
    static func remove(_ url: URL) throws {
        try FileSystem.removeEntry(at: url.path)
    }
}

extension FileIdentity {
    /// The last modification time, in seconds since the epoch.
    var modificationTime: TimeInterval {
        TimeInterval(modificationSeconds) + TimeInterval(modificationNanoseconds) / 1e9
    }
}
