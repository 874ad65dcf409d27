import ConcordSystem
import Foundation

extension FileVersion {
    /// Puts this version's content in place of the item at `url` (usually ``itemURL``), under
    /// coordination: a write that replaces the item, so its presenters are asked to relinquish it
    /// first and told it changed afterwards.
    ///
    /// The content goes to a temporary file beside the item, which is `fsync`ed and renamed over
    /// it, and the directory is `fsync`ed: a crash at any instant leaves the old content or the
    /// new one. With ``ReplacingOptions/byMoving`` the version's own file is removed afterwards.
    ///
    /// - Returns: `url`, which now holds this version's content.
    /// - Throws: ``FileCoordinationError``; ``FileCoordinationError/Code/invalidRequest`` if this
    ///   version changed or went away since it was listed (nothing is replaced then).
    @discardableResult
    public func replaceItem(at url: URL, options: ReplacingOptions = []) throws -> URL {
        let moving = options.contains(.byMoving) && !isCurrent
        let source: FileAccessIntent =
            moving
            ? .writingIntent(with: self.url, options: .forDeleting)
            : .readingIntent(with: self.url, options: .withoutChanges)
        try FileCoordinator().coordinate(with: [source, .writingIntent(with: url, options: .forReplacing)]) { urls in
            try checkUnchanged(urls[0])
            if urls[0].standardizedFileURL.path == urls[1].standardizedFileURL.path { return }
            do {
                try FileSystem.copyFile(at: urls[0].path, to: urls[1].path)
                if moving {
                    try FileSystem.removeFile(at: urls[0].path)
                    try FileSystem.synchronizeDirectory(at: FileSystem.parentPath(of: urls[0].path))
                }
            } catch let error as SystemCallError {
                throw FileCoordinationError.systemCall(error, url: url)
            }
        }
        return url
    }

    /// Removes this version's file (the engine's copy), under coordination as a deletion: the
    /// engine then removes it on every device, and presenters everywhere hear
    /// ``FilePresenter/presentedItemDidLose(_:)``.
    ///
    /// - Throws: ``FileCoordinationError``: ``FileCoordinationError/Code/invalidRequest`` for the
    ///   current version (remove the item itself for that) or for a copy that changed since it was
    ///   listed.
    public func remove() throws {
        guard !isCurrent else {
            throw FileCoordinationError(
                code: .invalidRequest,
                url: url,
                message: "the current version cannot be removed as a version; delete the item instead"
            )
        }
        try FileCoordinator().coordinate(writingItemAt: url, options: .forDeleting) { url in
            try checkUnchanged(url)
            try Self.removeFile(url)
        }
    }

    /// Removes every version of the item at `url` but the current one (the engines' copies and the
    /// versions the app kept), in one coordination that deletes each; a copy that changed since it was listed (an engine still writing it)
    /// stays, and is reported in the error.
    ///
    /// - Throws: ``FileCoordinationError`` if the versions cannot be listed or removed.
    public static func removeOtherVersionsOfItem(at url: URL) throws {
        let versions = try versionsOfItem(at: url)
        if versions.isEmpty { return }
        let changed = try FileCoordinator().coordinate(
            with: versions.map { .writingIntent(with: $0.url, options: .forDeleting) }
        ) { urls -> [URL] in
            var changed: [URL] = []
            for (version, url) in zip(versions, urls) {
                guard (try? version.checkUnchanged(url)) != nil else {
                    changed.append(url)
                    continue
                }
                try removeFile(url, synchronizing: false)
            }
            // Once per directory: the item's, and the local versions' store.
            for directory in Set(urls.map { FileSystem.parentPath(of: $0.path) }) {
                do throws(SystemCallError) {
                    try FileSystem.synchronizeDirectory(at: directory)
                } catch {
                    throw FileCoordinationError.systemCall(error, url: URL(fileURLWithPath: directory))
                }
            }
            return changed
        }
        if !changed.isEmpty {
            throw FileCoordinationError(
                code: .invalidRequest,
                url: url,
                message: "kept \(changed.count) version(s) that changed since they were listed: "
                    + changed.map { $0.lastPathComponent }.joined(separator: ", ")
            )
        }
    }

    private static func removeFile(_ url: URL, synchronizing: Bool = true) throws {
        do throws(SystemCallError) {
            try FileSystem.removeFile(at: url.path)
            if synchronizing { try FileSystem.synchronizeDirectory(at: FileSystem.parentPath(of: url.path)) }
        } catch {
            throw FileCoordinationError.systemCall(error, url: url)
        }
    }
}
