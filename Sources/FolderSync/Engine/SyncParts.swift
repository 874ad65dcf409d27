import Foundation
import Synchronization

/// The parts of one store's sync, wired together: those with state of their own made once, the
/// others made when asked for (each a small value over the context and the parts below it).
/// The ``SyncEngine`` holds one; every part reaches the engine only through ``host``.
struct SyncParts: Sendable {
    /// What every part works with.
    let context: SyncContext
    /// Missing logs noticed, reported, asked for.
    let healer: Healer
    /// The logs committed and not yet written, and their writing into the container.
    let outbox: Outbox
    /// The container's identity as this device sees it.
    let identities: ContainerIdentities
    /// Finds and reads the container's baselines.
    let baselines: BaselineReader
    /// Watches the container for a reset.
    let monitor: ContainerMonitor
    /// The engine, for the parts that export and import as it does (held weakly: it holds them).
    let host: EngineHost

    init(context: SyncContext, watcher: SyncWatcher) {
        self.context = context
        healer = Healer(context: context)
        outbox = Outbox(context: context)
        identities = ContainerIdentities(context: context)
        baselines = BaselineReader(context: context, identities: identities)
        monitor = ContainerMonitor(context: context, identities: identities, watcher: watcher)
        host = EngineHost()
    }

    /// This device's registration in the sentinel.
    var registrar: Registrar { Registrar(context: context) }
    /// This device's log numbers.
    var numbering: Numbering {
        Numbering(
            context: context,
            identities: identities,
            baselines: baselines,
            acknowledger: acknowledger,
            registrar: registrar
        )
    }
    /// The logs this store wrote under a device id it retired.
    var retiredLogs: RetiredLogs {
        RetiredLogs(context: context, identities: identities, acknowledger: acknowledger)
    }
    /// The merge rules an import applies.
    var merger: RecordMerger { RecordMerger(context: context, duplicates: duplicates) }
    /// Turns each save's changes into this device's next log.
    var exporter: Exporter {
        Exporter(
            context: context,
            identities: identities,
            duplicates: duplicates,
            outbox: outbox,
            numbering: numbering
        )
    }
    /// Brings the store's data into a container.
    var joiner: Joiner {
        Joiner(context: context, duplicates: duplicates, exporter: exporter, compactor: compactor, host: host)
    }
    /// Applies other devices' logs.
    var importer: Importer {
        Importer(
            context: context,
            identities: identities,
            duplicates: duplicates,
            merger: merger,
            healer: healer,
            outbox: outbox,
            baselines: baselines,
            numbering: numbering,
            registrar: registrar,
            acknowledger: acknowledger,
            lostLogs: lostLogs
        )
    }
    /// How this device joins a container.
    var containerJoin: ContainerJoin {
        ContainerJoin(
            context: context,
            identities: identities,
            numbering: numbering,
            registrar: registrar,
            acknowledger: acknowledger,
            retiredLogs: retiredLogs,
            importer: importer,
            joiner: joiner,
            host: host
        )
    }
    /// This device's lost logs, published again or stood in for.
    var lostLogs: LostLogs {
        LostLogs(
            context: context,
            outbox: outbox,
            numbering: numbering,
            healer: healer,
            identities: identities,
            baselines: baselines,
            acknowledger: acknowledger,
            compactor: compactor,
            exporter: exporter,
            retiredLogs: retiredLogs,
            host: host
        )
    }
    /// What devices say they applied (acknowledgements).
    var acknowledger: Acknowledger { Acknowledger(context: context, identities: identities) }
    /// Baselines written, logs and tombstones removed.
    var compactor: Compactor {
        Compactor(context: context, identities: identities, baselines: baselines, acknowledger: acknowledger)
    }

    /// The duplicates this device removed, and how a removal is undone.
    var duplicates: DuplicateLedger { DuplicateLedger(context: context) }
}

/// The engine as its parts see it: a weak reference to the ``SyncEngine``, which holds the parts.
final class EngineHost: JoinHost, Sendable {
    private struct Held: Sendable {
        weak var engine: SyncEngine?
    }

    private let held = Mutex(Held())

    /// Points the parts at `engine` (once, as it is set up).
    func attach(_ engine: SyncEngine) { held.withLock { $0.engine = engine } }

    private func engine() throws -> SyncEngine {
        guard let engine = held.withLock({ $0.engine }) else {
            throw SyncError(.invalidState, "sync of this store was released")
        }
        return engine
    }

    @discardableResult
    func exportPending(holding permit: SyncLock.Permit?, containerChecked: Bool) throws -> Int {
        try engine().exportPending(holding: permit, containerChecked: containerChecked)
    }

    func importAvailable(
        batchSize: Int,
        includingOwnLogs: Bool,
        holding permit: SyncLock.Permit?
    ) throws
        -> ImportReport
    {
        try engine().importAvailable(batchSize: batchSize, includingOwnLogs: includingOwnLogs, holding: permit)
    }
}
