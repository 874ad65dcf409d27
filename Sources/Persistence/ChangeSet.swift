import Foundation

/// Where the changes a context holds came from.
public enum ChangeOrigin: String, Sendable, Hashable, Codable {
    /// The app's own edits.
    case local
    /// Changes arriving from elsewhere (another device's log, a migration): applied as plain
    /// values; hooks are told so they can skip side effects meant for local edits; validation is
    /// deferred to the next local save.
    case `import`
}

/// What one save changed, as published after the commit.
public struct ChangeSet: Sendable, Hashable {
    /// Where the changes came from.
    public var origin: ChangeOrigin
    /// The name of the context that saved, if it has one.
    public var contextName: String?
    /// Records inserted, as committed, in id order.
    public var inserted: [Record]
    /// Records updated, as they are after the save, in id order.
    public var updated: [Record]
    /// For each updated record, the properties the save changed.
    public var updatedKeys: [ObjectID: Set<String>]
    /// Ids of the records deleted, in order.
    public var deleted: [ObjectID]

    /// A change set.
    public init(
        origin: ChangeOrigin,
        contextName: String? = nil,
        inserted: [Record] = [],
        updated: [Record] = [],
        updatedKeys: [ObjectID: Set<String>] = [:],
        deleted: [ObjectID] = []
    ) {
        self.origin = origin
        self.contextName = contextName
        self.inserted = inserted
        self.updated = updated
        self.updatedKeys = updatedKeys
        self.deleted = deleted
    }

    /// Whether the save changed nothing.
    public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }

    /// Every id the save touched.
    public var objectIDs: Set<ObjectID> {
        Set(inserted.map(\.id)).union(updated.map(\.id)).union(deleted)
    }
}

extension Notification.Name {
    /// Posted after every successful save of an ``ObjectContext`` (the notification's object);
    /// `userInfo["changes"]` holds the ``ChangeSet``.
    public static let concordContextDidSave = Notification.Name("ConcordContextDidSave")
}

/// What kind of change a hook is told about.
public enum RecordChangeKind: String, Sendable, Hashable {
    /// Inserted, updated, deleted.
    case insert, update, delete
}

/// Per-entity hooks an app implements (every method has a do-nothing default): the places for
/// defaults, derived values and side effects. Each is told the ``ChangeOrigin``: code with side
/// effects (creating or deleting other records) should run for `.local` only, because imported
/// changes already carry the side effects their device made.
///
/// Hooks run on the thread that called the context, never while a lock is held, and may use
/// the context (insert or fetch other records).
public protocol EntityHooks: Sendable {
    /// The entity whose records these hooks see.
    var entityName: String { get }
    /// After a record is inserted into a context (not for records fetched from a store).
    func didInsert(_ record: inout Record, origin: ChangeOrigin, context: ObjectContext) throws
    /// Before a save validates and commits an inserted or updated record.
    func willSave(_ record: inout Record, change: RecordChangeKind, origin: ChangeOrigin, context: ObjectContext) throws
    /// Before a record is deleted (throwing refuses the deletion).
    func willDelete(_ record: Record, origin: ChangeOrigin, context: ObjectContext) throws
    /// After a save committed a change of a record.
    func didSave(_ record: Record, change: RecordChangeKind, origin: ChangeOrigin, context: ObjectContext)
    /// After a record was inserted, updated or deleted in a `.local` context, never for
    /// `.import`: the one place for side effects that create, change or delete other records
    /// to keep the graph valid during normal use. Imported changes already carry the side
    /// effects their device made; running them again would duplicate or undo them. (The pattern
    /// Core Data apps learned the hard way: keep setters plain, put side effects in a separate
    /// method.)
    func didChangeLocally(_ record: Record, change: RecordChangeKind, context: ObjectContext) throws
}

/// Do-nothing defaults: an entity's hooks implement only what they need.
extension EntityHooks {
    /// Does nothing.
    public func didInsert(_ record: inout Record, origin: ChangeOrigin, context: ObjectContext) throws {}
    /// Does nothing.
    public func willSave(
        _ record: inout Record,
        change: RecordChangeKind,
        origin: ChangeOrigin,
        context: ObjectContext
    ) throws {}
    /// Does nothing.
    public func willDelete(_ record: Record, origin: ChangeOrigin, context: ObjectContext) throws {}
    /// Does nothing.
    public func didSave(_ record: Record, change: RecordChangeKind, origin: ChangeOrigin, context: ObjectContext) {}
    /// Does nothing.
    public func didChangeLocally(_ record: Record, change: RecordChangeKind, context: ObjectContext) throws {}
}

/// The seam in the save pipeline where validation repair plugs in: when a save's records break
/// the schema's rules, the context hands the violations to its repairer, which may change the
/// context (delete a record, relink it, fill a value) and says whether it did; the context then
/// validates again, up to ``ObjectContext/maximumRepairPasses`` times.
public protocol ValidationRepairing: Sendable {
    /// Repairs what it can of `violations` in `context`; returns whether it changed anything.
    func repair(_ violations: [ValidationViolation], in context: ObjectContext) throws -> Bool
}
