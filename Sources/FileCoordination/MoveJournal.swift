import ConcordSystem
import Foundation

/// Where coordinated moves leave a note for other processes' presenters.
///
/// inotify reports a file moved into a directory nobody watches as gone. So before a coordinated
/// move renames an item, the mover writes "source → destination" into the lock directory (shared
/// by every process that coordinates, never inside the coordinated tree); a process whose
/// presenter sees the item vanish looks there first and, for a fresh note whose destination
/// exists, reports a move instead of a deletion.
enum MoveJournal {
    /// Notes older than this are ignored.
    static let freshness: TimeInterval = 30

    private static let folder: String? = {
        guard let locks = try? LockDirectory.resolved() else { return nil }
        let path = locks + "/moves"
        try? FileManager.default.createDirectory(
            atPath: path,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        return path
    }()

    private static func notePath(for source: String) -> String? {
        guard let folder else { return nil }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in source.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return folder + "/" + String(hash, radix: 16)
    }

    /// Records that `source` is about to move to `destination` (best effort: a failure only
    /// means other processes may report a deletion instead of the move).
    static func record(from source: String, to destination: String) {
        guard let path = notePath(for: source) else { return }
        try? AtomicFile.write(Array((source + "\n" + destination).utf8), to: path)
    }

    /// Where `source` was moved, if a fresh note says so and the destination exists.
    static func destination(of source: String) -> String? {
        guard let path = notePath(for: source),
            let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let modified = attributes[.modificationDate] as? Date, Date().timeIntervalSince(modified) < freshness,
            let text = try? String(contentsOfFile: path, encoding: .utf8)
        else { return nil }
        let lines = text.split(separator: "\n", maxSplits: 1).map(String.init)
        guard lines.count == 2, lines[0] == source, FileManager.default.fileExists(atPath: lines[1]) else { return nil }
        return lines[1]
    }
}
