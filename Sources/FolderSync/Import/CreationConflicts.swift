import Foundation
import Persistence

/// Two records created under one random id by two devices (a device whose random source failed,
/// a store copied before it made a record): both are kept. The earlier creation (by timestamp)
/// keeps the id; the later one's record moves to an id derived from the id and its creation
/// (``movedID(of:created:)``), the same on every device. Changes that do not create a record
/// name the creation they mean in their log's ``SyncPayload/incarnations``, so each lands on
/// the record its writer meant, whichever creation a device met first.
struct CreationConflicts: SyncPart {
    let context: SyncContext

    /// The namespace of moved records' ids.
    static let namespace = UUID(uuidString: "A3F1C52E-7B08-4D6E-9C2A-5E14B8D07F93")!

    /// The id the record created under `id` at `created` takes when an earlier creation keeps
    /// `id`: name-based, so every device derives it alike.
    static func movedID(of id: ObjectID, created: SyncClock) -> ObjectID {
        let name = "\(id.description)\u{0}\(created.time).\(created.counter).\(created.device)"
        return ObjectID(entity: id.entity, uuid: UUID.nameBased(namespace: namespace, name: name))
    }

    /// `changes` (one log's, or a batch of a baseline's) as they apply here: a creation that
    /// meets a record created under its id at another time is kept beside it (the later of the
    /// two moves, see ``CreationConflicts``), and every change, reference and element goes to
    /// the record its writer meant (`incarnations`, and the log's own creations). Conflicts
    /// found are added to `found`. The moves are made in `objects`, with their clocks in
    /// `clocks`; `entries` holds the clocks of the changes' records (those that have any).
    func route(
        _ changes: [SyncChange],
        incarnations: [ObjectID: SyncClock],
        in objects: ObjectContext,
        clocks: inout [ObjectID: RecordClocks],
        entries: SyncMetadataSnapshot,
        found: inout [CreationConflict]
    ) throws -> [SyncChange] {
        let creations = changes.filter { $0.created != nil && $0.id.isRandom }
        guard !creations.isEmpty || !incarnations.isEmpty else { return changes }
        // (The changes' own records were looked up already: `entries` lacks those without clocks.)
        let lookedUp = Set(changes.lazy.map(\.id))
        var read = try unreadClocks(
            of: incarnations.keys.filter { !lookedUp.contains($0) },
            clocks: clocks,
            entries: entries
        )
        func state(_ id: ObjectID) -> RecordClocks? {
            clocks[id] ?? entries[SyncMetadata.recordClocks(id)] ?? read[id]
        }
        // What this log means by each id: its own creations, and the incarnations it lists.
        var meant = incarnations
        for change in creations {
            guard let created = change.created else { continue }
            // (A creation's own entry names the record it replaces: its writer deleted it and made
            // the id again, knowing it. No conflict.)
            let replacing = incarnations[change.id]
            meant[change.id] = created
            guard let known = state(change.id)?.created, known != created, known != replacing else { continue }
            let (kept, moving) = (min(known, created), max(known, created))
            let moved = Self.movedID(of: change.id, created: moving)
            let movedState = try state(moved) ?? readClocks(of: moved, into: &read)
            if movedState?.created == nil {
                found.append(CreationConflict(id: change.id, movedTo: moved, kept: kept, moved: moving))
            }
            // The record held here is the later one: it moves, and the arriving one takes the id.
            if created < known, let held = state(change.id) {
                try move(change.id, to: moved, state: held, in: objects, clocks: &clocks, read: &read, entries: entries)
            }
        }
        // A change goes to a moved record only where there is one: a creation or a write meant
        // for an incarnation this device holds under the id (or for one deleted and made again
        // there, whose writes the merge rules settle) stays with the id.
        var routes: [ObjectID: ObjectID] = [:]
        for (id, created) in meant where id.isRandom {
            guard let known = state(id)?.created, known != created else { continue }
            let moved = Self.movedID(of: id, created: created)
            if try (state(moved) ?? readClocks(of: moved, into: &read))?.created == created
                || found.contains(where: { $0.movedTo == moved })
            {
                routes[id] = moved
            }
        }
        guard !routes.isEmpty else { return changes }
        return changes.map { change in
            var change = change
            change.id = routes[change.id] ?? change.id
            for (key, write) in change.references {
                if let target = write.target, let route = routes[target] { change.references[key]?.target = route }
            }
            for (key, members) in change.members where members.contains(where: { routes[$0.target] != nil }) {
                change.members[key] = members.map {
                    ClockedMember(target: routes[$0.target] ?? $0.target, present: $0.present, clock: $0.clock)
                }
            }
            return change
        }
    }

    /// Tells of `found` (once their import is saved): a warning in the log, the delegate and
    /// a notification.
    func report(_ found: [CreationConflict]) {
        for conflict in found {
            logger.warning(
                "two records were created under one id: both kept",
                metadata: [
                    "concord.record": "\(conflict.id)", "concord.movedTo": "\(conflict.movedTo)",
                    "concord.device": "\(deviceID)",
                ]
            )
            context.events.tell(conflict)
        }
    }

    /// The clocks of `ids` that neither `clocks` nor `entries` holds, read in one go.
    private func unreadClocks(
        of ids: some Sequence<ObjectID>,
        clocks: [ObjectID: RecordClocks],
        entries: SyncMetadataSnapshot
    ) throws -> [ObjectID: RecordClocks] {
        let unread = Set(ids).filter { clocks[$0] == nil && !entries.contains(SyncMetadata.recordClocks($0)) }
        guard !unread.isEmpty else { return [:] }
        let snapshot = try store.syncMetadata(unread.map { SyncMetadata.recordClocks($0) as any SyncMetadataNamed })
        var read: [ObjectID: RecordClocks] = [:]
        for id in unread { read[id] = snapshot[SyncMetadata.recordClocks(id)] }
        return read
    }

    /// The clocks of `id`, read from the store into `read`.
    private func readClocks(of id: ObjectID, into read: inout [ObjectID: RecordClocks]) throws -> RecordClocks? {
        let clocks = try store.syncMetadataValue(SyncMetadata.recordClocks(id))
        read[id] = clocks
        return clocks
    }

    /// Moves the record `id` (with its clocks `state`) to `moved`: every reference to it here
    /// meant it (no log that knew the other creation has been applied: it follows that
    /// creation's log), so the owning relationships that point at it point at `moved`, with the
    /// clocks they had. `id` is left without history, for the arriving creation.
    private func move(
        _ id: ObjectID,
        to moved: ObjectID,
        state: RecordClocks,
        in objects: ObjectContext,
        clocks: inout [ObjectID: RecordClocks],
        read: inout [ObjectID: RecordClocks],
        entries: SyncMetadataSnapshot
    ) throws {
        let schema = coordinator.schema
        clocks[moved] = state
        clocks[id] = RecordClocks()
        guard let entity = schema.entity(id.entity), let existing = try objects.record(with: id) else { return }
        var record = existing
        record.id = moved
        // Owners that point at it, found through its derived sides (which the owners' new
        // references fill again).
        var owners: [(owner: ObjectID, key: String, toMany: Bool)] = []
        for relationship in entity.relationships {
            let name = relationship.name
            if schema.ownsRelationship(entity: entity.name, name) {
                if relationship.isToMany, record.toMany[name]?.remove(id) != nil { record.toMany[name]?.insert(moved) }
                if !relationship.isToMany, record.toOne[name] == id { record.toOne[name] = moved }
                continue
            }
            let inverse = schema.entity(relationship.destination)?.relationship(relationship.inverse)
            let held = relationship.isToMany ? existing.toMany[name] ?? [] : existing.toOne[name].map { [$0] } ?? []
            for owner in held.sorted() where owner != id {
                owners.append((owner, relationship.inverse, inverse?.isToMany == true))
            }
            record.toMany[name] = nil
            record.toOne[name] = nil
        }
        try objects.deleteWithoutRules(id)
        try objects.insert(record)
        for (owner, key, toMany) in owners {
            guard var other = try objects.record(with: owner) else { continue }
            if toMany {
                guard other.toMany[key]?.remove(id) != nil else { continue }
                other.toMany[key]?.insert(moved)
                // The element's clock goes with it.
                if var ownerState = try clocks[owner] ?? entries[SyncMetadata.recordClocks(owner)] ?? read[owner]
                    ?? readClocks(of: owner, into: &read),
                    let clock = ownerState.members[key]?.removeValue(forKey: id.description)
                {
                    ownerState.members[key]?[moved.description] = clock
                    clocks[owner] = ownerState
                }
            } else {
                guard other.toOne[key] == id else { continue }
                other.toOne[key] = moved
            }
            try objects.update(other)
        }
    }
}

/// Two records created under one id on two devices, both kept (see
/// ``FolderSyncDelegate/folderSync(_:didKeepBothCreations:)``): every device finds the same
/// conflict and moves the same record.
public struct CreationConflict: Sendable, Hashable, CustomStringConvertible {
    /// The id both records were created under; the earlier creation keeps it.
    public var id: ObjectID
    /// The id of the record created later, the same on every device.
    public var movedTo: ObjectID
    /// When the record that kept the id was created.
    public var kept: SyncClock
    /// When the moved record was created.
    public var moved: SyncClock

    /// A conflict: the record created at `moved` under `id` now has the id `movedTo`.
    public init(id: ObjectID, movedTo: ObjectID, kept: SyncClock, moved: SyncClock) {
        self.id = id
        self.movedTo = movedTo
        self.kept = kept
        self.moved = moved
    }

    /// The conflict in words.
    public var description: String {
        "two records were created as \(id) (at \(kept) and \(moved)): both kept, the later one as \(movedTo)"
    }
}

extension ObjectID {
    /// Whether the id is a random (version 4) UUID, as ``ObjectID/random(entity:)`` makes: two
    /// creations of it are two records. Other ids (name-based, or made by the app) may be made
    /// on purpose by several devices, and their creations merge.
    var isRandom: Bool { uuid.uuid.6 >> 4 == 4 }
}
