import Foundation
import Synchronization

// MARK: - Validation repair

/// How an entity repairs its records when a save fails validation. Every method has a
/// do-nothing default; adopt it for the entities whose rules can be broken by edits that are
/// each valid but clash once merged (two devices filling one required to-one slot, say).
///
/// Validation never runs while `.import` changes are applied: it runs at the next local save.
/// When that save fails, each invalid record's policy gets its violations and may repair it by
/// ordinary edits through the context (delete it, relink it, fill a value); the context
/// validates again, up to ``ObjectContext/maximumRepairPasses`` times, then fails with every
/// remaining violation. Repairs are local changes like any other, and are synced as such.
public protocol ValidationRepairPolicy: Sendable {
    /// The entity whose invalid records this policy repairs.
    var entityName: String { get }
    /// Repairs `record`, which breaks `violations`; returns whether it changed anything.
    func repair(_ record: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool
}

extension ValidationRepairPolicy {
    /// Repairs nothing: returns `false`.
    public func repair(_ record: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
        false
    }
}

/// The common repair in one line: delete the invalid records of an entity (for example the
/// object left over after two devices each filled the same required to-one slot).
public struct DeleteInvalidRecords: ValidationRepairPolicy {
    /// The entity whose invalid records are deleted.
    public let entityName: String
    /// Deletes invalid records of `entityName` after a failed save.
    public init(_ entityName: String) { self.entityName = entityName }

    /// Deletes `record` (with its delete rules) if it still exists; returns whether it did.
    public func repair(_ record: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
        guard try context.record(with: record.id) != nil else { return false }
        try context.delete(record.id)
        return true
    }
}

// MARK: - Singletons and duplicates

/// What makes two records of an entity the same record, for ``UniquenessPolicy``.
public enum Uniqueness: Sendable {
    /// There is one record of the entity (app settings, say).
    case singleton
    /// Records with equal values of these attributes are duplicates (`null` included).
    case key([String])
    /// Records for which this function returns equal keys are duplicates; `nil` means "unique".
    /// It must be a pure function of the record's values, the same on every device.
    case custom(@Sendable (Record) -> [Value]?)
}

/// How an entity's duplicates are resolved: which records count as one, which one wins, and
/// how the losers' data is folded into the winner. The framework runs it after every import
/// (the save of an `.import` context) and whenever ``ObjectContext/resolveDuplicates(of:)`` is
/// called, with the same outcome on every device that holds the same records:
///
/// 1. the records of each group of duplicates are ordered by ``creationStampAttribute`` (when
///    set; `null` last) and then by id (``ObjectID``'s byte order), and the first wins;
/// 2. for each loser, in that order, ``merge(_:into:in:)`` may copy values into the winner;
/// 3. the loser's relationships move to the winner (to-many relationships are united; a to-one
///    relationship the winner leaves empty takes the loser's; the winner's own references to the
///    loser end first), and the loser is deleted.
///
/// Groups of duplicates are resolved in the order of their winners' ids.
///
/// An import resolves an entity's duplicates when it inserts records of the entity or changes
/// what the policy reads (the key's attributes, the creation stamp; anything, for a custom
/// uniqueness), when a local save did so since the last resolution, and when the store has not
/// been resolved under this policy and schema version yet. (A resolution reads every record of
/// the entity; other imports leave them be.)
public protocol UniquenessPolicy: Sendable {
    /// The entity whose duplicates this policy resolves.
    var entityName: String { get }
    /// What makes two records duplicates.
    var uniqueness: Uniqueness { get }
    /// A date or number attribute that orders candidates (earliest first) before their ids;
    /// `nil` (the default) orders by id alone.
    var creationStampAttribute: String? { get }
    /// Folds a loser's values into the winner before the loser is deleted (default: nothing;
    /// the winner keeps its own values). Must be deterministic.
    func merge(_ loser: Record, into winner: inout Record, in context: ObjectContext) throws
}

extension UniquenessPolicy {
    /// No stamp: the smallest id wins.
    public var creationStampAttribute: String? { nil }
    /// Copies nothing: the winner keeps its values.
    public func merge(_ loser: Record, into winner: inout Record, in context: ObjectContext) throws {}
}

/// A ready-made ``UniquenessPolicy``: `Deduplicate("Settings", .singleton)` or
/// `Deduplicate("Tag", .key(["label"]), stampedBy: "created")`.
public struct Deduplicate: UniquenessPolicy {
    /// The entity whose duplicates are resolved.
    public let entityName: String
    /// What makes two of its records the same record.
    public let uniqueness: Uniqueness
    /// The attribute whose earliest value wins, or `nil` for the smallest id.
    public let creationStampAttribute: String?

    /// Resolves duplicates of `entityName` as `uniqueness` says, oldest `stamp` first.
    public init(_ entityName: String, _ uniqueness: Uniqueness, stampedBy stamp: String? = nil) {
        self.entityName = entityName
        self.uniqueness = uniqueness
        self.creationStampAttribute = stamp
    }
}

// MARK: - Merge policies

/// One object two writers changed: what this context read, what it wants, what the store now
/// holds, and the properties both changed.
public struct MergeConflict: Sendable, Hashable {
    /// The record as this context first read it.
    public var base: Record
    /// The record as this context wants it.
    public var mine: Record
    /// The record as the store holds it now; `nil` if another writer deleted it.
    public var stored: Record?
    /// The properties changed both here and in the store since `base`.
    public var conflictingKeys: Set<String>
}

/// Decides a conflict your own way: return the record to store (`nil` to leave it deleted, or
/// to delete it).
public protocol MergeConflictResolver: Sendable {
    /// The record that should be stored for `conflict`.
    func resolve(_ conflict: MergeConflict) throws -> Record?
}

/// What a save does when another context or process changed the same record since this
/// context read it. Property-level in every case: properties only one side changed keep that
/// side's value.
///
/// A merge policy settles each object on its own; it does not promise a valid object graph
/// (two merged edits can leave a required relationship empty). That is what validation repair
/// (``ValidationRepairPolicy``) is for.
///
/// The check and the commit are two steps: a writer in another process that commits between
/// them is treated as having committed just before.
public enum MergePolicy: Sendable {
    /// The properties this context changed win (Core Data's
    /// `NSMergeByPropertyObjectTrumpMergePolicy`); the default.
    ///
    /// A to-many relationship is a set of elements, not one value: the save commits the elements
    /// this context added and removed on top of the set the store holds at the commit, so an
    /// element another writer added or removed meanwhile stays added or removed.
    case mineWins
    /// For properties both changed, the store's value stays
    /// (`NSMergeByPropertyStoreTrumpMergePolicy`).
    case storeWins
    /// Your resolver decides whenever both changed a property, or the record was deleted.
    case custom(any MergeConflictResolver)
}

// MARK: - Registration

/// The policies of a ``StoreCoordinator``'s entities; every context on the coordinator uses them.
public final class EntityPolicies: Sendable {
    private struct State {
        var repair: [String: any ValidationRepairPolicy] = [:]
        var uniqueness: [String: any UniquenessPolicy] = [:]
        var pendingReferenceTimeout: Duration = .seconds(600)
    }

    private let state = Mutex(State())

    /// No policies.
    public init() {}

    /// How long a reference to a record that has not arrived (``MissingTargetState/notArrived``:
    /// nothing says it was deleted; sync may still deliver it) waits before repair policies see
    /// it. Until then such a reference fails no save and is validated again at each one. Ten
    /// minutes by default.
    public var pendingReferenceTimeout: Duration {
        get { state.withLock { $0.pendingReferenceTimeout } }
        set { state.withLock { $0.pendingReferenceTimeout = newValue } }
    }

    /// Adds (or replaces) the repair policy of its entity.
    public func register(_ policy: any ValidationRepairPolicy) {
        state.withLock { $0.repair[policy.entityName] = policy }
    }

    /// Adds (or replaces) the uniqueness policy of its entity.
    public func register(_ policy: any UniquenessPolicy) {
        state.withLock { $0.uniqueness[policy.entityName] = policy }
    }

    /// The repair policy of `entity`.
    public func repairPolicy(for entity: String) -> (any ValidationRepairPolicy)? {
        state.withLock { $0.repair[entity] }
    }

    /// The uniqueness policy of `entity`.
    public func uniquenessPolicy(for entity: String) -> (any UniquenessPolicy)? {
        state.withLock { $0.uniqueness[entity] }
    }

    /// The entities with a uniqueness policy, sorted.
    public var uniqueEntities: [String] { state.withLock { $0.uniqueness.keys.sorted() } }
}

/// The repairer contexts use by default: hands each invalid record to its entity's
/// ``ValidationRepairPolicy``.
struct PolicyRepairer: ValidationRepairing {
    let policies: EntityPolicies

    func repair(_ violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
        var changed = false
        let byObject = Dictionary(grouping: violations, by: \.object)
        for id in byObject.keys.sorted() {
            guard let policy = policies.repairPolicy(for: id.entity), let record = try context.record(with: id) else {
                continue
            }
            if try policy.repair(record, violations: byObject[id]!, in: context) { changed = true }
        }
        return changed
    }
}

/// A repair for the references a merge can leave dangling (a note in a folder another device
/// deleted): clears to-one references and drops to-many elements whose record was deleted. A
/// reference to a record that has not arrived (``MissingTargetState/notArrived``) is left alone.
public struct ClearMissingReferences: ValidationRepairPolicy {
    /// The entity whose records are repaired.
    public let entityName: String
    /// Clears missing references of `entityName`'s records after a failed save.
    public init(_ entityName: String) { self.entityName = entityName }
    /// Clears missing references of `entityName`'s records after a failed save.
    public init(entityName: String) { self.entityName = entityName }

    /// Clears `record`'s references to deleted records; returns whether it changed anything.
    public func repair(_ record: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
        var record = record
        var changed = false
        // Only targets known to be deleted: one that has not arrived yet may still come.
        for violation in violations where violation.rule == .missingDestination && violation.targetState != .notArrived
        {
            if let target = record.toOne[violation.property], try context.record(with: target) == nil {
                record.toOne[violation.property] = nil
                changed = true
            }
            if let targets = record.toMany[violation.property] {
                var kept = Set<ObjectID>()
                for target in targets where try context.record(with: target) != nil { kept.insert(target) }
                if kept != targets {
                    record.toMany[violation.property] = kept.isEmpty ? nil : kept
                    changed = true
                }
            }
        }
        if changed { try context.update(record) }
        return changed
    }
}
