import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

@Suite("Deterministic ids made again after a deletion")
struct RecreationTests {
    @Test("An id created again after its deletion exists everywhere, whatever the order, without the earlier incarnation's writes")
    func recreatedIDConverges() throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["alpha", "beta", "gamma", "delta"] { try shared.addDevice(name) }
        let (alpha, beta, gamma) = (shared.devices[0], shared.devices[1], shared.devices[2])
        let id = ObjectID.deterministic(entity: "Note", name: "welcome")
        func save(on device: Int, _ body: (ObjectContext) throws -> Void) throws {
            shared.time.advance(by: 5)
            let context = ObjectContext(coordinator: shared.devices[device].coordinator)
            try body(context)
            try context.save()
            try shared.devices[device].sync.exportPending()
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
}
