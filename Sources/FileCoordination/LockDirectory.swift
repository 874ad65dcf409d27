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
            path = "/tmp/concord-locks-\(Platform.userID)"
            mustBeOwned = true
        }
        do {
            try FileSystem.createDirectory(at: path, mode: 0o700)
        } catch {
            throw FileCoordinationError(
                code: .lockDirectoryUnusable,
                url: URL(fileURLWithPath: path),
                message: "cannot create the lock directory (set \(environmentVariable) to a writable local directory)",
                underlyingError: error
            )
        }
        if mustBeOwned {
            // Anything but a directory of this user's, or an item that cannot be examined, is refused.
            let ownership = (try? FileSystem.ownership(at: path)) ?? nil
            if ownership?.kind != .directory || ownership?.owner != Platform.userID {
                throw FileCoordinationError(
                    code: .lockDirectoryUnusable,
                    url: URL(fileURLWithPath: path),
                    message: "the lock directory is not a directory owned by this user; refusing to use it "
                        + "(remove it, or set \(environmentVariable))"
                )
            }
        }
        return path
    }
}
