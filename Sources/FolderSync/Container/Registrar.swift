import ConcordSystem
import Foundation
import Persistence

/// This device's registration in the sentinel: written, looked for, and what it says of the
/// device's numbering.
struct Registrar: SyncPart {
    let context: SyncContext

    /// Registers this device (the registration writes nothing when it is there alike already),
    /// with where its numbering last leapt to (see ``DeviceRegistration/numberingFrom``).
    func register() throws {
        let runFrom = try store.syncMetadataValue(SyncMetadata.runFrom)
        try sentinel.register(
            DeviceRegistration(
                device: deviceID,
                host: ProcessInfo.processInfo.hostName,
                schemaVersion: coordinator.schema.version,
                numberingFrom: runFrom
            )
        )
    }

    /// The history of this device id that its registration shows: the numbers below where its
    /// numbering last leapt to (an earlier installation's, when this store did not make that
    /// leap); 0 for none.
    func historyShown() -> UInt64 {
        guard let from = (try? sentinel.registration(of: deviceID))??.numberingFrom, from > 0,
            from < Self.plausibleSequences
        else { return 0 }
        return from - 1
    }

    /// Whether this device's registration is in the sentinel. With the default sentinel, the
    /// device's own file that cannot be read (an engine rewrote it in place, a truncation) is
    /// its registration still, as a partial file is a log still: only this device writes it.
    /// It is reported once and, when `healing` says so (asked only then: whether the caller
    /// still syncs), written again once it has settled (the next enable writes it again in any
    /// case). Other sentinels' damage throws.
    func isRegistered(healing: () -> Bool = { false }) throws -> Bool {
        do {
            return try sentinel.isRegistered(deviceID)
        } catch let error as SyncError where error.code == .corruptSentinel && sentinel is DeviceFileSentinel {
            reportSentinelProblems([error])
            if healing(), let url = error.url,
                let identity = try? FileSystem.identity(at: url.path),
                now().timeIntervalSince1970 - Double(identity.modificationSeconds) >= scanner.settleSeconds
            {
                do {
                    try register()
                    logger.info(
                        "this device's registration could not be read: written again",
                        metadata: ["concord.file": "\(url.path)"]
                    )
                } catch {
                    logger.warning(
                        "this device's registration could not be read, nor written again",
                        metadata: ["concord.file": "\(url.path)", "concord.error": "\(error)"]
                    )
                }
            }
            return true
        }
    }
}
