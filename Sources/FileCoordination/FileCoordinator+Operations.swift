import ConcordSystem
import Foundation

/// Coordinated versions of the file operations apps do every day. Each runs as one
/// coordination, so presenters are asked and told as for any other access, and each keeps
/// invariant 1: a crash at any instant leaves either the old content or the new.
///
/// Failures throw ``FileCoordinationError`` for the coordination itself, or
/// ``ConcordSystem/SystemCallError`` (naming the call, the errno and the file) for the operation.
extension FileCoordinator {
    /// Reads the whole content of the file at `url`.
    public func contentsOfItem(at url: URL, options: ReadingOptions = []) throws -> Data {
        try coordinate(readingItemAt: url, options: options) { url in
            Data(try AtomicFile.read(at: url.path))
        }
    }

    /// Replaces the content of the file at `url` with `data` (creating it if needed): a temporary
    /// file in the same directory, `fsync`, `rename`, then an `fsync` of the directory.
    ///
    /// A failure of that last `fsync` throws a `SystemCallError` whose `contentReplaced` is set:
    /// the new content is in place (do not write it again), though not confirmed durable.
    public func replaceContentsOfItem(at url: URL, with data: Data, options: WritingOptions = []) throws {
        try coordinate(writingItemAt: url, options: options) { url in
            try data.withUnsafeBytes { buffer in try AtomicFile.write(buffer, to: url.path) }
        }
    }

    /// Reads the file at `url` (`nil` if it does not exist), lets `transform` compute the new
    /// content, and replaces it atomically, all in one exclusive coordination: a read-modify-write
    /// that no other coordinated writer, in any process, can interleave with.
    ///
    /// - Returns: the new content.
    @discardableResult
    public func updateContentsOfItem(at url: URL, _ transform: (Data?) throws -> Data) throws -> Data {
        try coordinate(writingItemAt: url, options: .forMerging) { url in
            let current: Data?
            do {
                current = Data(try AtomicFile.read(at: url.path))
            } catch let error as SystemCallError where error.errno == .noSuchFileOrDirectory {
                current = nil
            }
            let updated = try transform(current)
            try updated.withUnsafeBytes { buffer in try AtomicFile.write(buffer, to: url.path) }
            return updated
        }
    }

    /// Moves the item at `source` to `destination` (replacing what is there), together with its
    /// companion files, as one coordinated item.
    ///
    /// A companion is the item's path plus a suffix: pass `["-wal", "-shm"]` for an SQLite
    /// database. Companions move first and the main item last, so a move interrupted by a crash
    /// can be completed by running it again; a destination companion whose source companion does
    /// not exist is removed, so a stale write-ahead log never meets the moved database. Presenters
    /// of each file are told ``FilePresenter/presentedItemDidMove(to:)``. Moves across file
    /// systems fall back to a durable copy followed by a removal.
    public func moveItem(at source: URL, to destination: URL, companionSuffixes: [String] = []) throws {
        let pairs =
            [(source, destination)]
            + companionSuffixes.map { suffix in
                (URL(fileURLWithPath: source.path + suffix), URL(fileURLWithPath: destination.path + suffix))
            }
        let intents =
            pairs.map { FileAccessIntent.writingIntent(with: $0.0, options: .forMoving) }
            + pairs.map { FileAccessIntent.writingIntent(with: $0.1, options: .forReplacing) }
        try coordinate(with: intents) { urls in
            let count = pairs.count
            let sources = Array(urls[..<count])
            let destinations = Array(urls[count...])
            guard try FileSystem.identity(at: sources[0].path) != nil else {
                throw SystemCallError(systemCall: "rename", errno: .noSuchFileOrDirectory, path: sources[0].path)
            }
            // Companions first, the main item last.
            for index in (0..<count).reversed() {
                let from = sources[index].path
                let to = destinations[index].path
                guard try FileSystem.identity(at: from) != nil else {
                    if index > 0 { try FileSystem.removeEntry(at: to) }
                    continue
                }
                item(at: sources[index], willMoveTo: destinations[index])
                if try !FileSystem.moveEntry(at: from, to: to) {
                    try moveAcrossFileSystems(from, to)
                }
                item(at: sources[index], didMoveTo: destinations[index])
            }
        }
    }

    /// Deletes the item at `url` (a directory with everything inside it), telling its presenters
    /// and those of everything inside it beforehand. A missing item is not an error.
    public func removeItem(at url: URL) throws {
        try coordinate(writingItemAt: url, options: .forDeleting) { url in
            guard try FileSystem.identity(at: url.path) != nil else { return }
            try FileManager.default.removeItem(at: url)
            try FileSystem.synchronizeDirectory(at: FileSystem.parentPath(of: url.path))
        }
    }

    /// Copies the item at `source` to `destination` (replacing what is there), reading the
    /// source and writing the destination in one coordination. A file is copied durably through
    /// a temporary file; a directory is copied beside the destination and renamed into place.
    public func copyItem(at source: URL, to destination: URL) throws {
        try coordinate(readingItemAt: source, options: [], writingItemAt: destination, options: .forReplacing) {
            (source: URL, destination: URL) throws in
            try Self.copyEntry(source.path, destination.path)
        }
    }

    private static func copyEntry(_ source: String, _ destination: String) throws {
        guard let identity = try FileSystem.identity(at: source) else {
            throw SystemCallError(systemCall: "open", errno: .noSuchFileOrDirectory, path: source)
        }
        if identity.kind != .directory {
            try FileSystem.copyFile(at: source, to: destination)
            return
        }
        let directory = FileSystem.parentPath(of: destination)
        let staging =
            "\(directory)/.\(URL(fileURLWithPath: destination).lastPathComponent).\(UInt32.random(in: .min ... .max)).concord-tmp"
        try FileManager.default.copyItem(atPath: source, toPath: staging)
        do {
            if try FileSystem.identity(at: destination) != nil {
                try FileManager.default.removeItem(atPath: destination)
            }
            try FileSystem.rename(staging, to: destination)
            try FileSystem.synchronizeDirectory(at: directory)
        } catch {
            try? FileManager.default.removeItem(atPath: staging)
            throw error
        }
    }

    private func moveAcrossFileSystems(_ source: String, _ destination: String) throws {
        try Self.copyEntry(source, destination)
        try FileManager.default.removeItem(atPath: source)
        try FileSystem.synchronizeDirectory(at: FileSystem.parentPath(of: source))
    }
}
