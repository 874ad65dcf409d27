import ConcordSystem
import Foundation

/// Which conflict copies are marked resolved, shared by every process on the machine: one small
/// file per copy in `versions/` under the ``LockDirectory`` (never in the synced tree, so no
/// engine carries it), holding the copy's canonical path and its identity when it was marked. A
/// copy is resolved while a mark names it with that identity: a new copy that takes the name of
/// an old one is not.
///
/// Presenter watching watches the folder, so every process hears a mark appear. A mark outlives
/// its copy for a while (a process that presents the item may read it after the copy is gone);
/// marking sweeps away the marks of copies gone for a minute or more.
enum VersionResolutions {
    /// How long a mark of a copy that is gone is kept.
    static let staleAfter: TimeInterval = 60

    /// Where the marks live, created if missing.
    static func directory() throws -> String {
        let path = try LockDirectory.resolved() + "/versions"
        do {
            try FileSystem.createDirectory(at: path, mode: 0o700)
        } catch {
            throw FileCoordinationError.systemCall(error, url: URL(fileURLWithPath: path))
        }
        return path
    }

    /// The mark file's name for the copy at canonical `path`.
    static func markName(for path: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in path.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return String(hash, radix: 16) + ".resolved"
    }

    static func canonical(_ path: String) -> String {
        (try? CanonicalPath.of(URL(fileURLWithPath: path))) ?? path
    }

    /// Whether the copy at `path` is marked resolved with `identity`.
    static func isResolved(path: String, identity: FileIdentity) -> Bool {
        let canonical = canonical(path)
        guard let directory = try? directory(),
            let mark = read(directory + "/" + markName(for: canonical))
        else { return false }
        return mark.path == canonical && mark.identity == text(of: identity)
    }

    /// Marks the copy at `path` resolved.
    static func mark(path: String, identity: FileIdentity) throws {
        let canonical = canonical(path)
        let file = try directory() + "/" + markName(for: canonical)
        let text = "\(canonical)\n\(text(of: identity))\n"
        do {
            try AtomicFile.write(Array(text.utf8), to: file)
        } catch {
            throw FileCoordinationError.systemCall(error, url: URL(fileURLWithPath: file))
        }
        sweep(FileSystem.parentPath(of: file))
    }

    /// Removes the marks, older than ``staleAfter``, whose copy is gone or is another file now.
    static func sweep(_ directory: String, now: Date = Date()) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where name.hasSuffix(".resolved") {
            let file = directory + "/" + name
            guard let identity = (try? FileSystem.identity(at: file)) ?? nil,
                now.timeIntervalSince1970 - Double(identity.modificationSeconds) > staleAfter,
                let mark = read(file)
            else { continue }
            let copy = (try? FileSystem.identity(at: mark.path)) ?? nil
            if copy.map(text(of:)) != mark.identity { try? FileSystem.removeFile(at: file) }
        }
    }

    /// Forgets any mark of the copy at `path`.
    static func forget(path: String) throws {
        let file = try directory() + "/" + markName(for: canonical(path))
        do {
            try FileSystem.removeFile(at: file)
        } catch {
            throw FileCoordinationError.systemCall(error, url: URL(fileURLWithPath: file))
        }
    }

    /// An identity as a mark writes it.
    static func text(of identity: FileIdentity) -> String {
        "\(identity.device) \(identity.inode) \(identity.size) "
            + "\(identity.modificationSeconds) \(identity.modificationNanoseconds)"
    }

    /// What a mark file says (the copy's canonical path and its identity as ``text(of:)`` writes
    /// it), or `nil` for one that is missing or not a mark.
    static func read(_ file: String) -> (path: String, identity: String)? {
        guard let bytes = try? AtomicFile.read(at: file), bytes.count < 64 * 1024,
            let text = String(validating: bytes, as: UTF8.self)
        else { return nil }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count >= 2, lines[1].split(separator: " ").count == 5 else { return nil }
        return (String(lines[0]), String(lines[1]))
    }
}
