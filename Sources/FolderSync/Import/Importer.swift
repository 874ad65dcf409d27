import Foundation
import Persistence

/// Applies other devices' logs: one scan of the container, the causal plan, batches of logs in
/// import saves; catching up from a baseline over logs compacted away; a restored device's own
/// history taken back in; another installation under this device's id noticed.
struct Importer: SyncPart {
    let context: SyncContext
    let identities: ContainerIdentities
    let duplicates: DuplicateLedger
    let merger: RecordMerger
    let healer: Healer
    let outbox: Outbox
    let baselines: BaselineReader
    let numbering: Numbering
    let registrar: Registrar
    let acknowledger: Acknowledger
    /// What the import asks of the rest of sync.
    let host: any ImportHost
}

/// What an import asks of the rest of sync (the engine).
protocol ImportHost: AnyObject, Sendable {
    /// Commits every write of this device id that the store holds to new logs, in place of logs
    /// lost with its store; returns how many changes. The caller holds the sync lock.
    func exportOwnWrites(holding permit: SyncLock.Permit) throws -> Int
}
