import Foundation
import Persistence

/// An attribute value with the timestamp of the write that set it.
public struct ClockedValue: Codable, Sendable, Hashable {
    /// The value.
    public var value: Value
    /// When it was written.
    public var clock: SyncClock

    /// `value`, written at `clock`.
    public init(value: Value, clock: SyncClock) {
        self.value = value
        self.clock = clock
    }
}

/// An owning to-one relationship's target (or none) with the timestamp of the write.
public struct ClockedReference: Codable, Sendable, Hashable {
    /// The target, `nil` for none.
    public var target: ObjectID?
    /// When it was written.
    public var clock: SyncClock

    /// `target`, written at `clock`.
    public init(target: ObjectID?, clock: SyncClock) {
        self.target = target
        self.clock = clock
    }
}

/// One element of an owning to-many relationship added or removed, with its timestamp.
public struct ClockedMember: Codable, Sendable, Hashable {
    /// The element.
    public var target: ObjectID
    /// Whether it was added (or removed).
    public var present: Bool
    /// When.
    public var clock: SyncClock

    /// `target` added (`present`) or removed at `clock`.
    public init(target: ObjectID, present: Bool, clock: SyncClock) {
        self.target = target
        self.present = present
        self.clock = clock
    }
}

/// What one save did to one record, as a log carries it. Only owning relationship sides are
/// carried (see `Schema.ownsRelationship(entity:_:)`); the other sides are derived on import.
public struct SyncChange: Codable, Sendable, Hashable {
    /// The record.
    public var id: ObjectID
    /// Set when the save created the record: every attribute is in `values`.
    public var created: SyncClock?
    /// Set when the save deleted the record.
    public var deleted: SyncClock?
    /// Attributes written.
    public var values: [String: ClockedValue] = [:]
    /// Owning to-one relationships written.
    public var references: [String: ClockedReference] = [:]
    /// Owning to-many relationships' elements added or removed.
    public var members: [String: [ClockedMember]] = [:]

    /// A change of `id`.
    public init(id: ObjectID) { self.id = id }
}

/// The payload of one log: the changes of one or more local saves, in order, and what its device
/// had applied when it wrote them.
public struct SyncPayload: Codable, Sendable, Hashable {
    /// The changes.
    public var changes: [SyncChange]
    /// For each other device, the sequence up to which (without a gap) the writing device had
    /// applied its logs when it wrote this one: this log is applied only after those (causal
    /// delivery). The writer's own earlier logs come first as well, by their numbers. Empty in
    /// logs of format versions 1 and 2, which carry none.
    public var dependencies: [String: UInt64]
    /// For each record the changes write (without creating it) or point at, the creation the
    /// writing device knew it by: which of two records made under one id (a creation
    /// conflict, kept as two records) the change means. Only random (version 4) ids are
    /// listed, and not those the log creates. Empty in logs before format 6.
    public var incarnations: [ObjectID: SyncClock]

    /// A payload.
    public init(
        changes: [SyncChange],
        dependencies: [String: UInt64] = [:],
        incarnations: [ObjectID: SyncClock] = [:]
    ) {
        self.changes = changes
        self.dependencies = dependencies
        self.incarnations = incarnations
    }

    private enum CodingKeys: String, CodingKey { case changes, dependencies, incarnations }

    /// Decodes a payload; one without dependencies (format 1) has none.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        changes = try container.decode([SyncChange].self, forKey: .changes)
        dependencies = try container.decodeIfPresent([String: UInt64].self, forKey: .dependencies) ?? [:]
        incarnations = try container.decodeIfPresent([ObjectID: SyncClock].self, forKey: .incarnations) ?? [:]
    }

    /// Encodes the changes, and the dependencies and incarnations when there are any.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(changes, forKey: .changes)
        if !dependencies.isEmpty { try container.encode(dependencies, forKey: .dependencies) }
        if !incarnations.isEmpty { try container.encode(incarnations, forKey: .incarnations) }
    }
}

/// What a device knows about one record's history: the timestamps that decide merges. Kept in
/// the store's metadata (``SyncMetadata/recordClocks``), committed with the record's data.
package struct RecordClocks: Codable, Sendable, Hashable {
    package var created: SyncClock?
    package var deleted: SyncClock?
    package var properties: [String: SyncClock] = [:]
    package var members: [String: [String: MemberClock]] = [:]
    /// Writes that arrived before the record's creation did: the record as they describe it.
    /// For a record removed as a duplicate, the record as it was, with the writes since.
    package var ghost: Record?
    /// Set while this device's import holds the record removed as a duplicate (see
    /// ``DuplicateRemoval``).
    package var removedAsDuplicate: DuplicateRemoval?
    /// Owning to-one relationships whose stored target stands for another one: the target the
    /// newest write set was removed as a duplicate, and the store holds its winner. Property name
    /// to the target written.
    package var relinked: [String: ObjectID]?
    /// For a winner of removed duplicates: the attributes a uniqueness policy's
    /// `merge(_:into:in:)` changed, as they were before, each with the clock the attribute had
    /// then. Undoing the removals restores those no write has changed since, and the import
    /// decides (and merges) again: every device ends with the same winner.
    package var premerge: [String: PremergeValue]?
    /// For a winner of removed duplicates: the owning relationships the merge changed (the
    /// policy's `merge(_:into:in:)`, or the framework moving the loser's relationships over), as
    /// they were before, with their clocks then; restored like ``premerge``.
    package var premergeRelationships: [String: PremergeRelationship]?

    /// An attribute's value before a duplicate was merged into its record.
    package struct PremergeValue: Codable, Sendable, Hashable {
        package var value: Value
        package var clock: SyncClock?
    }

    /// An owning relationship before a duplicate was merged into its record: a to-one's target
    /// and clock, or the to-many elements the merge added or took away, each with whether it
    /// was there and its element clock then (a to-one's has no elements, a to-many's no target).
    package struct PremergeRelationship: Codable, Sendable, Hashable {
        package var target: ObjectID?
        package var clock: SyncClock?
        package var elements: [String: PremergeElement] = [:]
    }

    /// A to-many element a merge added (`present` false) or took away (`present` true).
    package struct PremergeElement: Codable, Sendable, Hashable {
        package var present: Bool
        package var clock: SyncClock?
    }

    /// Whether a policy's merge (or the framework's) changed this winner.
    package var hasPremerge: Bool { premerge != nil || premergeRelationships != nil }

    /// Forgets what the merges changed (they were undone, or a write decided it).
    package mutating func clearPremerge() {
        premerge = nil
        premergeRelationships = nil
    }

    /// A duplicate's removal by an import: not a deletion but this device's reading of the
    /// records it holds, so no log carries it and no clock stamps it. Another device may never
    /// hold the two records alike (one was renamed before it saw them both), so a newer write to
    /// the record or to its winner undoes the removal and the next import decides again: every
    /// device ends with the duplicates of the same final data removed.
    package struct DuplicateRemoval: Codable, Sendable, Hashable {
        /// The record the duplicate was folded into.
        package var winner: ObjectID
        /// The newest write the record held when it was removed.
        package var newest: SyncClock?
    }

    package struct MemberClock: Codable, Sendable, Hashable {
        package var present: Bool
        package var clock: SyncClock
    }

    /// Whether the record exists: created, and not deleted since its latest creation.
    package var isAlive: Bool {
        guard let created, removedAsDuplicate == nil else { return false }
        return deleted.map { created > $0 } ?? true
    }

    /// The newest timestamp of the record's creation and writes.
    package var newest: SyncClock? {
        var newest = created
        for clock in properties.values { newest = max(newest ?? clock, clock) }
        for member in members.values.lazy.flatMap(\.values) { newest = max(newest ?? member.clock, member.clock) }
        return newest
    }

    /// The newest timestamp of anything the record's history holds, its deletion included.
    package var latest: SyncClock? {
        guard let deleted else { return newest }
        return max(newest ?? deleted, deleted)
    }

    /// The timestamp a new write to `property` must beat.
    func clock(of property: String) -> SyncClock? { properties[property] ?? created }
}
