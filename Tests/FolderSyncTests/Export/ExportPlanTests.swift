import Foundation
import Persistence
import SyncTestKit
import Testing

@testable import FolderSync

/// The exporter's decisions alone: what a local save's log carries and which clocks it commits,
/// from the records it changes and the clocks the store holds. No store, no container.
@Suite("Export plan")
struct ExportPlanTests {
    let schema = SyncSimulator.schema
    let stamp = SyncClock(time: 2_000, counter: 0, device: "alpha")
    let earlier = SyncClock(time: 1_000, counter: 0, device: "beta")
    let later = SyncClock(time: 3_000, counter: 0, device: "beta")

    func note(_ title: String, tags: [ObjectID] = []) -> Record {
        var record = Record.new(schema.entity("Note")!)
        record.values["title"] = .string(title)
        if !tags.isEmpty { record.toMany["tags"] = Set(tags) }
        return record
    }

    @Test("an insert of a new id is a creation stamped with the save's clock, carrying every attribute")
    func insertOfANewID() throws {
        var plan = ExportPlan(schema: schema, stamp: stamp)
        let record = note("one")
        plan.insert(record, known: RecordClocks())
        let change = try #require(plan.logged.first)
        #expect(plan.logged.count == 1)
        #expect(change.id == record.id && change.created == stamp && change.deleted == nil)
        #expect(change.values["title"]?.value == .string("one"))
        #expect(plan.clocks[record.id]?.created == stamp)
        #expect(plan.clocks[record.id]?.isAlive == true)
        #expect(plan.reconsidered.isEmpty)
        #expect(plan.writtenWithoutCreation.isEmpty)
    }

    @Test(
        "an id made again after its deletion keeps the deletion's clock: the new one lives, the old one's late writes stay ruled out"
    )
    func insertAfterDeletionKeepsTheDeletion() throws {
        var plan = ExportPlan(schema: schema, stamp: stamp)
        let record = note("again")
        plan.insert(record, known: RecordClocks(created: earlier, deleted: earlier))
        let clocks = try #require(plan.clocks[record.id])
        #expect(clocks.deleted == earlier)
        #expect(clocks.created == stamp)
        #expect(clocks.isAlive)
    }

    @Test(
        "members the id's earlier version owned and the new one lacks go out removed, newer than their additions; those added after a deletion-free history only"
    )
    func insertRemovesMembersOfTheEarlierVersion() throws {
        var plan = ExportPlan(schema: schema, stamp: stamp)
        let kept = ObjectID.random(entity: "Tag")
        let dropped = ObjectID.random(entity: "Tag")
        let record = note("tagged", tags: [kept])
        var known = RecordClocks()
        known.members["tags"] = [
            kept.description: .init(present: true, clock: earlier),
            dropped.description: .init(present: true, clock: earlier),
        ]
        plan.insert(record, known: known)
        let change = try #require(plan.logged.first)
        let removed = (change.members["tags"] ?? []).filter { !$0.present }
        #expect(removed == [ClockedMember(target: dropped, present: false, clock: stamp)])
        #expect(plan.clocks[record.id]?.members["tags"]?[dropped.description] == .init(present: false, clock: stamp))
        #expect(plan.clocks[record.id]?.members["tags"]?[kept.description]?.present == true)
    }

    @Test("members added before a deletion that the earlier version had are not removed again")
    func insertLeavesMembersOlderThanTheDeletion() throws {
        var plan = ExportPlan(schema: schema, stamp: stamp)
        let old = ObjectID.random(entity: "Tag")
        var known = RecordClocks(created: earlier, deleted: later)
        known.members["tags"] = [old.description: .init(present: true, clock: earlier)]
        plan.insert(note("fresh"), known: known)
        let change = try #require(plan.logged.first)
        let removals = (change.members["tags"] ?? []).filter { !$0.present }
        #expect(removals.isEmpty)
    }

    @Test("an id made again after this device removed it as a duplicate has its winner decided again")
    func insertOfARemovedDuplicateReconsidersItsWinner() {
        var plan = ExportPlan(schema: schema, stamp: stamp)
        let winner = ObjectID.random(entity: "Note")
        var known = RecordClocks(created: earlier)
        known.removedAsDuplicate = .init(winner: winner, newest: earlier)
        plan.insert(note("loser again"), known: known)
        #expect(plan.reconsidered == [winner])
    }

    @Test(
        "a deletion is stamped with the save's clock over the clocks the record had; one of a removed duplicate reconsiders its winner, one of a duplicate going with its winner does not"
    )
    func deletions() throws {
        var plan = ExportPlan(schema: schema, stamp: stamp)
        let plain = ObjectID.random(entity: "Note")
        plan.delete(plain, known: RecordClocks(created: earlier, properties: ["title": earlier]))
        let removedWinner = ObjectID.random(entity: "Note")
        var removed = RecordClocks(created: earlier)
        removed.removedAsDuplicate = .init(winner: removedWinner, newest: earlier)
        let loser = ObjectID.random(entity: "Note")
        plan.delete(loser, known: removed)
        let following = ObjectID.random(entity: "Note")
        plan.deleteRemovedDuplicate(following, known: removed)
        #expect(plan.logged.map(\.id) == [plain, loser, following])
        let deletions = plan.logged.filter { $0.deleted == stamp && $0.created == nil }
        #expect(deletions.count == 3)
        #expect(plan.clocks[plain]?.deleted == stamp)
        #expect(plan.clocks[plain]?.properties["title"] == earlier)
        #expect(plan.clocks[plain]?.isAlive == false)
        #expect(plan.reconsidered == [removedWinner])
        #expect(Set(plan.writtenWithoutCreation) == [plain, loser, following])
    }

    @Test("applying the plan writes each record's clocks and a mark per winner decided again, and nothing else")
    func applying() throws {
        var plan = ExportPlan(schema: schema, stamp: stamp)
        let record = note("one")
        plan.insert(record, known: RecordClocks())
        let winner = ObjectID.random(entity: "Note")
        plan.reconsider(winner)
        var changes = StoreChanges()
        try plan.apply(to: &changes)
        #expect(changes.metadataEntries.count == 2)
        #expect(changes.written(SyncMetadata.recordClocks(record.id)) == .some(plan.clocks[record.id]))
        #expect(changes.metadataEntries[SyncMetadata.reconsider(winner).name] != nil)
        #expect(changes.inserts.isEmpty && changes.updates.isEmpty && changes.deletes.isEmpty)
    }
}
