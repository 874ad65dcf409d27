import Foundation
import Logging
import Persistence

extension SyncEngine {
    /// ``FolderSync/exportPending()``, under `permit` when the caller holds the sync lock; `containerChecked`
    /// when the caller has just looked for a reset (live sync's pass, after ``detectReset()``).
    @discardableResult
    func exportPending(holding permit: SyncLock.Permit? = nil, containerChecked: Bool = false) throws -> Int {
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
