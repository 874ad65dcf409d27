import Foundation
import Logging
import Persistence

extension FolderSync {
    /// Writes every outgoing log not yet in the container; returns how many it wrote. A log
    /// that cannot be written (an unmounted or read-only container) stays in the outbox and is
    /// tried again next time: the error thrown then (and the ``SyncEvent/exportDeferred(_:)``
    /// event) is not about the saves, which are committed; nothing needs saving again. A damaged copy of a log in the container is replaced with the log
    /// (``SyncEvent/republished(_:)``). A valid log of other bytes under a log's name is never
    /// overwritten nor taken for the log: it is reported (``SyncEvent/logConflict(_:)`` and a log
    /// line naming the file) and the log is renumbered after the last one, so nothing is lost.
    /// When another device has replaced the container with its data, nothing is written: sync
    /// stops (``SyncEvent/containerReset(_:)``) and ``SyncError/Code/invalidState`` is thrown.
    @discardableResult
    public func exportPending() throws -> Int {
        try exportPending(holding: nil)
    }

    /// ``exportPending()``, under `permit` when the caller holds the sync lock; `containerChecked`
    /// when the caller has just looked for a reset (live sync's pass, after ``detectReset()``).
    @discardableResult
    func exportPending(holding permit: SyncLock.Permit?, containerChecked: Bool = false) throws -> Int {
        try refuseReplacedContainer(containerChecked: containerChecked)
        // Logs written before that vanished from the container go out again too (best effort:
        // a container that cannot take them now fails the export below, which reports it).
        _ = try? parts.lostLogs.republishLostLogs(holding: permit)
        let written = try parts.outbox.writePending(holding: permit, deferring: deferExport)
        if written > 0 { _ = machine.withLock { $0.exportDeferred(nil) } }
        return written
    }

    /// Reports logs that wait in the outbox because the container cannot take them now: an event,
    /// and a warning the first time for the same cause (debug while it repeats).
    private func deferExport(_ error: SyncError) {
        let cause = "\(error.code)|\(error.url?.path ?? "")"
        let repeated = machine.withLock { $0.exportDeferred(cause) }
        let metadata: Logger.Metadata = [
            "concord.device": "\(deviceID)", "concord.file": "\(error.url?.path ?? "?")", "concord.error": "\(error)",
        ]
        if repeated {
            logger.debug("the export still waits for the container", metadata: metadata)
        } else {
            logger.warning("saved; the logs wait in the outbox until the container takes them", metadata: metadata)
        }
        emit(.exportDeferred(error))
    }
}
