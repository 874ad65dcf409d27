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
    /// Sends this device's writes out again in place of logs lost with its store.
    let lostLogs: LostLogs
}

extension Importer {
    /// Creations that meet a record made under their id at another time (see
    /// ``CreationConflicts``).
    var conflicts: CreationConflicts { CreationConflicts(context: context) }
}
