import Persistence

/// What a local save logs, decided from what it changes and from the clocks the store holds for
/// those records: the changes its log carries, the clocks committed with them, and the winners
/// whose removed duplicates the next import decides again. A value with no I/O: the exporter
/// reads what it needs, hands it over, and commits what the plan says
/// (``apply(to:)``), all in the save's commit under the sync lock.
struct ExportPlan: Sendable {
    /// The schema the records follow.
    let schema: Schema
    /// The save's clock: every change it logs is stamped with it.
    let stamp: SyncClock
    /// The changes the log carries, in the order they were planned.
    private(set) var logged: [SyncChange] = []
    /// The clocks committed with the log, by record.
    private(set) var clocks: [ObjectID: RecordClocks] = [:]
    /// Winners whose removed duplicates the next import puts back and decides again.
    private(set) var reconsidered: Set<ObjectID> = []
    /// Elements the save wrote that stand here for the winner of their removed duplicate, each
    /// with its record: noted as an import notes them (``SyncMetadata/relinked(target:record:)``),
    /// so that undoing the removal takes them back.
    private(set) var relinked: [(target: ObjectID, record: ObjectID)] = []

    init(schema: Schema, stamp: SyncClock) {
        self.schema = schema
        self.stamp = stamp
    }

    /// Whether the log carries nothing.
    var isEmpty: Bool { logged.isEmpty }

    /// An insert of `record`, whose id the store knows with `known` (empty for a new id): its
    /// creation, with every attribute and owning relationship.
    ///
    /// - An id made again after its deletion (a deterministic id) keeps the deletion's clock:
    ///   the new incarnation is newer than the deletion, which still rules out the old one's late
    ///   writes.
    /// - An id made again after this device removed it as a duplicate: the next import undoes
    ///   the removal and decides again, as every device that removed it does when the creation
    ///   arrives.
    /// - Members the id's earlier version owned (a record this insert replaces, or writes that
    ///   wait for its creation) and this one does not are removed, newer than their additions: a
    ///   creation only adds, so other devices would keep them.
    mutating func insert(_ record: Record, known: RecordClocks) {
        guard let entity = schema.entity(record.id.entity) else { return }
        var (change, clocks) = Self.creation(of: record, entity: entity, schema: schema, stamp: stamp)
        if let removal = known.removedAsDuplicate { reconsidered.insert(removal.winner) }
        clocks.deleted = known.deleted
        for (key, states) in known.members where schema.ownsRelationship(entity: entity.name, key) {
            let now = Set((record.toMany[key] ?? []).map(\.description))
            for (target, state) in states.sorted(by: { $0.key < $1.key })
            where state.present && !now.contains(target) && known.deleted.map({ state.clock > $0 }) ?? true {
                guard let id = ObjectID.parsed(target, entity: nil) else { continue }
                change.members[key, default: []].append(ClockedMember(target: id, present: false, clock: stamp))
                clocks.members[key, default: [:]][target] = .init(present: false, clock: stamp)
            }
        }
        log(change, clocks: clocks)
    }

    /// A change the exporter worked out itself (an update), with the record's clocks after it.
    mutating func log(_ change: SyncChange, clocks: RecordClocks) {
        logged.append(change)
        self.clocks[change.id] = clocks
    }

    /// A deletion of `id`, whose clocks the store holds as `known`. One removed as a duplicate
    /// by another process's import since the deleting context read it: the deletion, a newer
    /// write, undoes the removal at the next import, as on every device that removed it when the
    /// deletion arrives (what a merge moved into the winner goes back).
    mutating func delete(_ id: ObjectID, known: RecordClocks) {
        if let removal = known.removedAsDuplicate { reconsidered.insert(removal.winner) }
        deleteWithoutUndoing(id, known: known)
    }

    /// A duplicate removed here in favour of a record this save deletes: it goes with its
    /// winner (the user deleted what it stood for; otherwise the deletion, a write to the winner,
    /// brings it back).
    mutating func deleteRemovedDuplicate(_ id: ObjectID, known: RecordClocks) {
        deleteWithoutUndoing(id, known: known)
    }

    private mutating func deleteWithoutUndoing(_ id: ObjectID, known: RecordClocks) {
        var change = SyncChange(id: id)
        change.deleted = stamp
        var clocks = known
        clocks.deleted = stamp
        log(change, clocks: clocks)
    }

    /// A removed duplicate's update logged as a write (it undoes the removal, newer than it):
    /// the winner it was folded into is decided again at the next import.
    mutating func reconsider(_ winner: ObjectID) { reconsidered.insert(winner) }

    /// Notes that `record`'s element `target`, which the save wrote, stands here for its winner.
    mutating func noteRelinked(_ target: ObjectID, in record: ObjectID) { relinked.append((target, record)) }

    /// The records the log writes or deletes without creating them.
    var writtenWithoutCreation: [ObjectID] { logged.filter { $0.created == nil }.map(\.id) }

    /// Puts the plan's clocks and marks into `changes`.
    func apply(to changes: inout StoreChanges) throws {
        for (id, clocks) in clocks { try changes.set(SyncMetadata.recordClocks(id), clocks) }
        for winner in reconsidered { changes.mark(SyncMetadata.reconsider(winner)) }
        for (target, record) in relinked { changes.mark(SyncMetadata.relinked(target: target, record: record)) }
    }

    /// The change and the clocks of a save that creates `record` at `stamp`: every attribute,
    /// and the owning sides of its relationships (the importer derives the others). With
    /// `history` (the record's clocks where it synced before), the creation and each write keep
    /// the clock they had (none older than the creation: an earlier incarnation's writes are
    /// not this one's), and the members it removed from its to-many relationships go as
    /// removals with theirs, so the record goes into another container as old as it is.
    static func creation(
        of record: Record,
        entity: EntityDescription,
        schema: Schema,
        stamp: SyncClock,
        history: RecordClocks? = nil
    ) -> (SyncChange, RecordClocks) {
        let created = history?.created ?? stamp
        func written(_ clock: SyncClock?) -> SyncClock { max(clock ?? created, created) }
        var change = SyncChange(id: record.id)
        change.created = created
        var clocks = RecordClocks(created: created)
        for attribute in entity.attributes {
            let clock = written(history?.properties[attribute.name])
            change.values[attribute.name] = ClockedValue(value: record[attribute.name], clock: clock)
            if clock != created { clocks.properties[attribute.name] = clock }
        }
        for relationship in entity.relationships where schema.ownsRelationship(entity: entity.name, relationship.name) {
            if relationship.isToMany {
                let targets = (record.toMany[relationship.name] ?? []).sorted()
                var elements = targets.map { target in
                    let kept = history?.members[relationship.name]?[target.description]
                    return (target: target, present: true, clock: written(kept?.present == true ? kept?.clock : nil))
                }
                // Removals this incarnation made go too, with their clocks: a member added
                // elsewhere before one is gone again there, and one added since stays.
                let members = history?.members[relationship.name] ?? [:]
                for (key, kept) in members.sorted(by: { $0.key < $1.key }) where !kept.present && kept.clock >= created
                {
                    guard let target = ObjectID.parsed(key, entity: relationship.destination), !targets.contains(target)
                    else { continue }
                    elements.append((target: target, present: false, clock: kept.clock))
                }
                if !elements.isEmpty {
                    change.members[relationship.name] = elements.map {
                        ClockedMember(target: $0.target, present: $0.present, clock: $0.clock)
                    }
                    clocks.members[relationship.name] = Dictionary(
                        uniqueKeysWithValues: elements.map {
                            ($0.target.description, RecordClocks.MemberClock(present: $0.present, clock: $0.clock))
                        }
                    )
                }
            } else {
                let clock = written(history?.properties[relationship.name])
                // A target removed here as a duplicate goes as it was written, with the clock of
                // that write (the winner it stands for is this device's reading): the same write
                // carrying two targets would leave devices that met them in different orders
                // different for good.
                let original = history?.relinked?[relationship.name]
                change.references[relationship.name] = ClockedReference(
                    target: original ?? record.toOne[relationship.name],
                    clock: clock
                )
                if let original {
                    clocks.relinked = (clocks.relinked ?? [:]).merging([relationship.name: original]) { $1 }
                }
                if clock != created { clocks.properties[relationship.name] = clock }
            }
        }
        return (change, clocks)
    }
}
