import Foundation
import Logging
import Persistence

/// What every part of sync works with: the store kept in step, where its container is, this
/// device, its clock and the sync lock. Made once by ``FolderSync``; immutable, and shared by
/// the parts (``DuplicateLedger``, ...), none of which needs the façade.
struct SyncContext: Sendable {
    /// This installation's device id.
    let deviceID: String
    /// Where the logs live.
    let layout: ContainerLayout
    /// The path of this device's folder in the container (every save looks there).
    let ownLogFolderPath: String
    /// The store kept in step.
    let store: any PersistentStore
    /// The coordinator whose contexts write the store (its schema, its saves).
    let coordinator: StoreCoordinator
    /// Where sync logs.
    let logger: Logger
    /// This device's hybrid logical clock.
    let clock: HybridClock
    /// The clock's entry in the store as this process last wrote or read it.
    let storedClock: StoredClock
    /// Held across threads and processes for commits, imports, joins and compaction's
    /// bookkeeping (see ``SyncLock``).
    let syncLock: SyncLock
    /// The record of which devices take part.
    let sentinel: any SyncSentinel
    /// Lists and reads the container's logs.
    let scanner: LogScanner
    /// The time now (injectable for tests).
    let now: @Sendable () -> Date
    /// Where events go.
    let events: SyncEvents
}

/// A part of sync: a type that works on a ``SyncContext`` (and on state of its own), never on
/// the façade. The members below name the context's pieces, so a part reads `store` and
/// `layout` as the engine does.
protocol SyncPart {
    /// What the part works with.
    var context: SyncContext { get }
}

extension SyncPart {
    var deviceID: String { context.deviceID }
    var layout: ContainerLayout { context.layout }
    var store: any PersistentStore { context.store }
    var coordinator: StoreCoordinator { context.coordinator }
    var logger: Logger { context.logger }
    var clock: HybridClock { context.clock }
    var storedClock: StoredClock { context.storedClock }
    var syncLock: SyncLock { context.syncLock }
    var sentinel: any SyncSentinel { context.sentinel }
    var scanner: LogScanner { context.scanner }
    var now: @Sendable () -> Date { context.now }

    /// Sends `event` to the app (see ``SyncEvents``).
    func emit(_ event: SyncEvent) { context.events.emit(event) }
    var ownLogFolderPath: String { context.ownLogFolderPath }

    /// `Entity/uuid` back into an id (of `entity`, when given).
    static func objectID(_ text: String, entity: String?) -> ObjectID? { ObjectID.parsed(text, entity: entity) }

    /// A record's clocks in `entries` (empty when it has none).
    static func clocks(of id: ObjectID, in entries: SyncMetadataSnapshot) -> RecordClocks {
        entries[SyncMetadata.recordClocks(id)] ?? RecordClocks()
    }

    func reportSentinelProblems(_ problems: [SyncError]) {
        for problem in problems {
            let key = (problem.url?.path ?? "") + "|" + problem.message
            guard context.events.isFirstReport(of: key) else { continue }
            logger.warning(
                "a sentinel file cannot be read",
                metadata: ["concord.file": "\(problem.url?.path ?? "?")", "concord.error": "\(problem)"]
            )
            emit(.corruptSentinel(problem))
        }
    }
}

extension ObjectID {
    /// `Entity/uuid` (an id's description) back into an id; `nil` when it is not one, or names
    /// another entity than `entity` (when given).
    static func parsed(_ text: String, entity: String?) -> ObjectID? {
        let parts = text.split(separator: "/", maxSplits: 1)
        guard parts.count == 2, let uuid = UUID(uuidString: String(parts[1])) else { return nil }
        if let entity, entity != String(parts[0]) { return nil }
        return ObjectID(entity: String(parts[0]), uuid: uuid)
    }
}
