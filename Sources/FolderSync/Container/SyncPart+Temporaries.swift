import ConcordSystem
import Foundation
import Logging

// Concord's own temporaries in the container: a write interrupted by a crash or a kill leaves
// `.NAME.RANDOM.concord-tmp` behind, and every file-sync engine carries it to every device (rsync
// and rclone's resync for good). A device removes the stale ones of its own making when sync is
// enabled: in its own folder, where every temporary is its own, and in `sentinels/`, those of its
// registration. Another device's temporaries are that device's to remove.
extension SyncPart {
    /// How old one of Concord's temporaries must be before it is taken for a leftover: the settle
    /// interval, and never less than a minute, so another process's write in progress (a log, a
    /// large baseline, a registration) is never taken for one.
    var staleTemporaryAge: TimeInterval { max(scanner.settleSeconds, 60) }

    /// Removes this device's stale temporaries (see ``staleTemporaryAge``) from its own folder and
    /// from the sentinel's folder; returns the paths removed. A temporary that cannot be removed is
    /// left: it is harmless where it is.
    @discardableResult
    func sweepStaleTemporaries() -> [String] {
        let now = self.now().timeIntervalSince1970
        let removed =
            AtomicFile.removeStaleTemporaries(
                in: layout.deviceFolder(deviceID).path,
                prefix: ".",
                olderThan: staleTemporaryAge,
                now: now
            )
            + AtomicFile.removeStaleTemporaries(
                in: sentinel.folder.path,
                prefix: "." + deviceID + ".",
                olderThan: staleTemporaryAge,
                now: now
            )
        if !removed.isEmpty {
            logger.debug(
                "removed stale temporary files left by interrupted writes",
                metadata: ["concord.device": "\(deviceID)", "concord.count": "\(removed.count)"]
            )
        }
        return removed
    }
}
