#if canImport(Glibc)
import Glibc
#endif
import ConcordSystem
import Foundation

/// Where the lock files live: a local, per-user runtime directory, never the coordinated tree.
///
/// Resolution order: `$CONCORD_LOCK_DIR` if set; else `$XDG_RUNTIME_DIR/concord-locks` if
/// `XDG_RUNTIME_DIR` names an existing directory; else `/tmp/concord-locks-<uid>`. Every process
/// that coordinates the same files must resolve the same directory: set `CONCORD_LOCK_DIR`
/// explicitly when processes run with different environments (a systemd service and a login
/// shell, say) or as different users (then point it at a directory all of them can write).
///
/// A process resolves the directory once, at its first coordination; changing the environment
/// afterwards has no effect on it. Lock files are small and empty, one or two per path ever
/// coordinated; they stay (removing a lock file safely would need a lock of its own) and cost
/// nothing but a directory entry on the runtime file system.
public enum LockDirectory {
    /// The environment variable that overrides the lock directory.
    public static let environmentVariable = "CONCORD_LOCK_DIR"

    /// The lock directory this process uses, created (mode `0700`) if missing.
    public static func resolved() throws(FileCoordinationError) -> String {
        let environment = ProcessInfo.processInfo.environment
        let path: String
        let mustBeOwned: Bool
        if let explicit = environment[environmentVariable], !explicit.isEmpty {
            path = explicit
            mustBeOwned = false
        } else if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty,
            (try? FileSystem.identity(at: runtime))??.kind == .directory
        {
            path = runtime + "/concord-locks"
            mustBeOwned = true
        } else {
            path = "/tmp/concord-locks-\(getuid())"
            mustBeOwned = true
        }
        do {
            try FileSystem.createDirectory(at: path, mode: 0o700)
        } catch {
            throw FileCoordinationError(
                code: .lockDirectoryUnusable, url: URL(fileURLWithPath: path),
                message: "cannot create the lock directory (set \(environmentVariable) to a writable local directory)",
                underlyingError: error)
        }
        if mustBeOwned {
            var info = stat()
            if lstat(path, &info) != 0 || info.st_uid != getuid() || (info.st_mode & S_IFMT) != S_IFDIR {
                throw FileCoordinationError(
                    code: .lockDirectoryUnusable, url: URL(fileURLWithPath: path),
                    message: "the lock directory is not a directory owned by this user; refusing to use it "
                        + "(remove it, or set \(environmentVariable))")
            }
        }
        return path
    }
}

/// Names lock files after the canonical path they guard.
///
/// A name is a 128-bit hash of the path as 32 hex digits. Distinct paths that collided would only
/// share a lock (more exclusion than needed), never lose one. The hash is computed in one pass
/// that also yields the names of every ancestor, since a path's prefix hashes to its ancestor's
/// name.
enum LockKey {
    private struct State {
        var first: UInt64 = 0xcbf2_9ce4_8422_2325
        var second: UInt64 = 0x6c62_272e_07bb_0142

        @inline(__always)
        mutating func add(_ byte: UInt8) {
            first = (first ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            second = (second &+ UInt64(byte)) &* 0x9e37_79b9_7f4a_7c15
            second ^= second >> 29
        }

        func name(suffix: StaticString) -> String {
            let digits: StaticString = "0123456789abcdef"
            return String(unsafeUninitializedCapacity: 32 + suffix.utf8CodeUnitCount) { buffer in
                digits.withUTF8Buffer { hex in
                    for index in 0..<16 {
                        let shift = UInt64(60 - 4 * index)
                        buffer[index] = hex[Int((first >> shift) & 0xf)]
                        buffer[16 + index] = hex[Int((second >> shift) & 0xf)]
                    }
                }
                suffix.withUTF8Buffer { tail in
                    for index in 0..<tail.count { buffer[32 + index] = tail[index] }
                }
                return 32 + suffix.utf8CodeUnitCount
            }
        }
    }

    /// The lock names for a canonical path: `<hash>.tree` for each proper ancestor except `/`,
    /// and `<hash><itemSuffix>` (plus `<hash>.tree` when `tree`) for the path itself.
    static func names(
        for path: String, itemSuffix: StaticString, tree: Bool, _ body: (String, _ isAncestor: Bool) -> Void
    ) {
        var state = State()
        var first = true
        for byte in path.utf8 {
            if byte == UInt8(ascii: "/") && !first { body(state.name(suffix: ".tree"), true) }
            first = false
            state.add(byte)
        }
        body(state.name(suffix: itemSuffix), false)
        if tree { body(state.name(suffix: ".tree"), false) }
    }
}
