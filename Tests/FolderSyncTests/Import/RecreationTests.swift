import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

@Suite("Deterministic ids made again after a deletion")
struct RecreationTests {
    /// One save on a device, a few milliseconds after the last, exported at once.
    static func save(
        _ shared: CompactionTests.SharedContainer,
        on index: Int,
        _ body: (ObjectContext) throws -> Void
    ) throws {
        shared.time.advance(by: 5)
        let context = ObjectContext(coordinator: shared.devices[index].coordinator)
        try body(context)
        try context.save()
        try shared.devices[index].sync.exportPending()
    }

    @Test(
        "An id created again after its deletion exists everywhere, whatever the order, without the earlier incarnation's writes"
    )
    func recreatedIDConverges() throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["alpha", "beta", "gamma", "delta"] { try shared.addDevice(name) }
        let (alpha, beta, gamma) = (shared.devices[0], shared.devices[1], shared.devices[2])
        let id = ObjectID.deterministic(entity: "Note", name: "welcome")
        func save(on index: Int, _ body: (ObjectContext) throws -> Void) throws {
            try RecreationTests.save(shared, on: index, body)
        }

        let tag = ObjectID.random(entity: "Tag")
        try save(on: 0) { context in
            try context.insert(entity: "Tag", id: tag, values: ["label": "first"])
            var note = try context.insert(entity: "Note", id: id, values: ["title": "first incarnation", "rank": 1])
            note.toMany["tags"] = [tag]
            try context.update(note)
        }
        try gamma.sync.importAvailable()  // gamma has the first incarnation
        try beta.sync.importAvailable()
        // beta edits the first incarnation before it hears of the deletion; its log goes out late.
        let betaEdit = ObjectContext(coordinator: beta.coordinator)
        var edited = try #require(try betaEdit.record(with: id))
        edited["rank"] = 7
        shared.time.advance(by: 5)
        try betaEdit.update(edited)
        try betaEdit.save()
        // alpha deletes the note and makes it again, with the same id, without the tag.
        try save(on: 0) { try $0.delete(id) }
        try save(on: 0) { try $0.insert(entity: "Note", id: id, values: ["title": "second incarnation"]) }
        try beta.sync.exportPending()

        // gamma and beta apply it all in one import, delta starts from nothing; alpha then gets
        // beta's late edit of the first incarnation.
        for device in shared.devices { try device.sync.importAvailable() }
        for device in shared.devices { try device.sync.importAvailable() }
        let reference = try #require(try alpha.store.records(with: [id]).first)
        #expect(reference["title"] == "second incarnation")
        #expect(reference["rank"] == 0)  // the default, not the first incarnation's 1 or beta's 7
        #expect(reference.toMany["tags"] == nil)
        for index in 1..<shared.devices.count {
            #expect(try shared.contents(index) == shared.contents(0), "device \(index) differs")
        }
        // The first incarnation's tag no longer lists the note on any device.
        for device in shared.devices {
            #expect(try device.store.records(with: [tag]).first?.toMany["notes"] == nil)
        }
    }

    @Test(
        "A local insert that replaces a record of its id (deleted first in the same context: a plain insert of a held id is refused) drops the earlier version's elements on every device"
    )
    func replacingInsertRemovesElementsEverywhere() throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["alpha", "beta"] { try shared.addDevice(name) }
        let (alpha, beta) = (shared.devices[0], shared.devices[1])
        let id = ObjectID.deterministic(entity: "Note", name: "welcome")
        let tag = ObjectID.random(entity: "Tag")
        let first = ObjectContext(coordinator: alpha.coordinator)
        try first.insert(entity: "Tag", id: tag, values: ["label": "kept apart"])
        var note = try first.insert(entity: "Note", id: id, values: ["title": "first"])
        note.toMany["tags"] = [tag]
        try first.update(note)
        try first.save()
        try alpha.sync.exportPending()
        try beta.sync.importAvailable()
        shared.time.advance(by: 5)
        let replacing = ObjectContext(coordinator: alpha.coordinator)
        #expect(throws: PersistenceError.self, "never a silent replace") {
            try replacing.insert(entity: "Note", id: id, values: ["title": "replaced"])
        }
        try replacing.delete(id)
        try replacing.insert(entity: "Note", id: id, values: ["title": "replaced"])
        try replacing.save()
        try alpha.sync.exportPending()
        try beta.sync.importAvailable()
        #expect(try beta.store.records(with: [id]).first?.toMany["tags"] == nil)
        #expect(try beta.store.records(with: [id]).first?["title"] == "replaced")
        let (mine, theirs) = (try shared.contents(0), try shared.contents(1))
        #expect(theirs == mine, "\(mine) vs \(theirs)")
    }

    @Test("A duplicate an import removes stays removed when a later write to it arrives")
    func duplicateRemovedOnImportStaysRemoved() throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["p", "q", "a", "b"] { try shared.addDevice(name) }
        for device in shared.devices { device.coordinator.policies.register(Deduplicate("Note", .key(["title"]))) }
        // The winner orders first by id: `kept` wins, `loser` goes.
        let kept = ObjectID(entity: "Note", uuid: UUID(uuidString: "00000000-0000-4000-8000-000000000001")!)
        let loser = ObjectID(entity: "Note", uuid: UUID(uuidString: "ffffffff-0000-4000-8000-000000000001")!)
        func save(on index: Int, _ body: (ObjectContext) throws -> Void) throws {
            try RecreationTests.save(shared, on: index, body)
        }
        try save(on: 0) { try $0.insert(entity: "Note", id: loser, values: ["title": "same"]) }
        try save(on: 1) { try $0.insert(entity: "Note", id: kept, values: ["title": "same"]) }
        try shared.devices[2].sync.importAvailable()  // a: both creations in one import; the loser goes
        #expect(try shared.devices[2].store.records(with: [loser]).isEmpty)
        // p has not heard of the duplicate yet, and edits its note.
        try save(on: 0) { context in
            var note = try #require(try context.record(with: loser))
            note["rank"] = 5
            try context.update(note)
        }
        for index in [2, 3] { try shared.devices[index].sync.importAvailable() }
        for index in [0, 1] { try shared.devices[index].sync.importAvailable() }
        for index in shared.devices.indices {
            let contents = try shared.contents(index)
            #expect(!contents.contains { $0.id == loser }, "device \(index) has the loser: \(contents)")
            #expect(try shared.contents(index) == shared.contents(3), "device \(index) differs")
        }
    }

    @Test(
        "A record made again locally under its deterministic id holds the owners that kept pointing at it, as on the devices that import it"
    )
    func madeAgainLocallyKeepsItsOwners() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        let tag = ObjectID.deterministic(entity: "Tag", name: "shared")
        try bench.edit("alpha") { context in  // 1
            _ = try context.insert(entity: "Tag", id: tag, values: ["label": .string("shared")])
        }
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        // Beta tags a new note while alpha deletes the tag: the note keeps pointing at it.
        let note = try #require(
            try bench.edit("beta") { context in
                var note = try context.insert(entity: "Note", values: ["title": .string("tagged")])
                note.toMany["tags"] = [tag]
                try context.update(note)
            }.first
        )
        try bench.edit("alpha") { context in try context.delete(tag) }  // 2
        try bench.deliver("beta", [1], to: "alpha")
        try bench.importOn("alpha")
        // Alpha makes the tag again (its deterministic id): the note that points at it is its own.
        try bench.edit("alpha") { context in  // 3
            _ = try context.insert(entity: "Tag", id: tag, values: ["label": .string("shared")])
        }
        #expect(try bench["alpha"].store.records(with: [tag]).first?.toMany["notes"] == [note.id])
        try bench.deliverEverything()
        for name in ["alpha", "beta"] { try bench.importOn(name) }
        #expect(try bench["beta"].store.records(with: [tag]).first?.toMany["notes"] == [note.id])
        #expect(try bench.contents("alpha") == bench.contents("beta"))
    }
}
