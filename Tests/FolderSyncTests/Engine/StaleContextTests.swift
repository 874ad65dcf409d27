import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

@Suite("A local context that read a record before an import changed it")
struct StaleContextTests {
    @Test(
        "It commits its own additions to a to-many set on top of the import's: an element another device added meanwhile stays, on every device"
    )
    func importedAdditionSurvivesStaleSave() throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["alpha", "beta"] { try shared.addDevice(name) }
        let (alpha, beta) = (shared.devices[0], shared.devices[1])
        let note = ObjectID.random(entity: "Note")
        let tags = [ObjectID.random(entity: "Tag"), ObjectID.random(entity: "Tag")]
        try RecreationTests.save(shared, on: 0) { context in
            for (index, tag) in tags.enumerated() {
                try context.insert(entity: "Tag", id: tag, values: ["label": .string("tag \(index)")])
            }
            try context.insert(entity: "Note", id: note, values: ["title": "draft"])
        }
        try beta.sync.importAvailable()

        // An app's context on alpha holds the note, with an edit pending.
        let stale = ObjectContext(coordinator: alpha.coordinator)
        var held = try #require(try stale.record(with: note))
        held["title"] = "edited on alpha"
        try stale.update(held)
        // beta tags the note; alpha imports it while its context still holds the old version.
        try RecreationTests.save(shared, on: 1) { context in
            var record = try #require(try context.record(with: note))
            record.toMany["tags"] = [tags[0]]
            try context.update(record)
        }
        try alpha.sync.importAvailable()
        #expect(try alpha.store.records(with: [note]).first?.toMany["tags"] == [tags[0]])

        // The stale context adds the other tag and saves.
        shared.time.advance(by: 5)
        held = try #require(try stale.record(with: note))
        held.toMany["tags", default: []].insert(tags[1])
        try stale.update(held)
        try stale.save()
        try alpha.sync.exportPending()
        try beta.sync.importAvailable()

        for (name, device) in zip(["alpha", "beta"], shared.devices) {
            let stored = try #require(try device.store.records(with: [note]).first)
            #expect(stored.toMany["tags"] == Set(tags), "\(name)")
            #expect(stored["title"] == "edited on alpha", "\(name)")
            for tag in try device.store.records(with: tags) {
                #expect(tag.toMany["notes"] == [note], "\(name): \(tag.id)")
            }
        }
        #expect(try shared.contents(1) == shared.contents(0))
    }
}
