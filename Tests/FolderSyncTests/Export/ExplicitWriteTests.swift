import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// A field the app sets in a save is a write with that save's clock, even when the value equals
/// what the device's (possibly stale) store holds: the device the user used last wins. An update
/// built from a whole record writes only what differs, so whole-form saves keep per-field merging.
@Suite("Explicit writes")
struct ExplicitWriteTests {
    /// alpha makes a note with a folder and a tag (folder "A", tag "red"), another folder "B" and
    /// tag "blue"; beta receives it all.
    func start(_ bench: SyncTestBench) throws -> (note: ObjectID, folders: [ObjectID], tags: [ObjectID]) {
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        var ids: (note: ObjectID, folders: [ObjectID], tags: [ObjectID])?
        try bench.edit("alpha") { context in
            let folders = try ["A", "B"].map { try context.insert(entity: "Folder", values: ["name": .string($0)]).id }
            let tags = try ["red", "blue"].map { try context.insert(entity: "Tag", values: ["label": .string($0)]).id }
            var note = try context.insert(entity: "Note", values: ["title": "n", "pinned": false])
            note.toOne["folder"] = folders[0]
            note.toMany["tags"] = [tags[0]]
            try context.update(note)
            ids = (note.id, folders, tags)
        }
        try bench.deliverEverything()
        _ = try bench.importOn("beta")
        return try #require(ids)
    }

    func note(_ bench: SyncTestBench, _ device: String, _ id: ObjectID) throws -> Record {
        try #require(try bench.contents(device).first { $0.id == id })
    }

    func exchange(_ bench: SyncTestBench) throws {
        try bench.deliverEverything()
        _ = try bench.importOn("alpha")
        _ = try bench.importOn("beta")
    }

    @Test("a stale device that sets an attribute to the value its store holds wins over an older write of another")
    func attributeWriteOfStoredValueWins() throws {
        let bench = SyncTestBench()
        let ids = try start(bench)
        // beta pins; alpha, which has not seen it, unpins later (its store says unpinned already).
        try bench.edit("beta") { try $0.setValue(true, forKey: "pinned", of: ids.note) }
        try bench.edit("alpha") { try $0.setValue(false, forKey: "pinned", of: ids.note) }
        try exchange(bench)
        for device in ["alpha", "beta"] {
            #expect(try note(bench, device, ids.note)["pinned"] == false, "\(device) keeps the older pin")
        }
    }

    @Test("a whole-record update writes only what differs: an unchanged field keeps the other device's write")
    func wholeRecordUpdateWritesOnlyDifferences() throws {
        let bench = SyncTestBench()
        let ids = try start(bench)
        try bench.edit("beta") { try $0.setValue(true, forKey: "pinned", of: ids.note) }
        // alpha saves the whole form with a new title; the pin it shows is unchanged.
        try bench.update("alpha", ids.note, ["title": "renamed"])
        try exchange(bench)
        for device in ["alpha", "beta"] {
            let record = try note(bench, device, ids.note)
            #expect(record["pinned"] == true && record["title"] == "renamed", "\(device): \(record)")
        }
        // Asked to, a whole-record update writes the named fields too.
        try bench.edit("beta") { try $0.setValue(false, forKey: "pinned", of: ids.note) }
        try bench.edit("alpha") { context in
            var record = try #require(try context.record(with: ids.note))
            record["title"] = "again"
            try context.update(record, writing: ["title", "pinned"])
        }
        try exchange(bench)
        for device in ["alpha", "beta"] {
            let record = try note(bench, device, ids.note)
            #expect(record["pinned"] == true && record["title"] == "again", "\(device): \(record)")
        }
    }

    @Test("a move into the folder the stale store already shows wins over an older move elsewhere")
    func toOneWriteOfStoredTargetWins() throws {
        let bench = SyncTestBench()
        let ids = try start(bench)
        try bench.edit("beta") { try $0.setTarget(ids.folders[1], forKey: "folder", of: ids.note) }
        try bench.edit("alpha") { try $0.setTarget(ids.folders[0], forKey: "folder", of: ids.note) }
        try exchange(bench)
        for device in ["alpha", "beta"] {
            #expect(try note(bench, device, ids.note).toOne["folder"] == ids.folders[0], "\(device)")
            let folder = try #require(try bench.contents(device).first { $0.id == ids.folders[0] })
            #expect(folder.toMany["notes"] == [ids.note], "\(device): the folder's side agrees")
        }
    }

    @Test("a move written from the folder's side counts as a write of the note's folder")
    func derivedSideWriteWritesTheOwningSide() throws {
        let bench = SyncTestBench()
        let ids = try start(bench)
        try bench.edit("beta") { try $0.setTarget(ids.folders[1], forKey: "folder", of: ids.note) }
        try bench.edit("alpha") { try $0.addTargets([ids.note], forKey: "notes", of: ids.folders[0]) }
        try exchange(bench)
        for device in ["alpha", "beta"] {
            #expect(try note(bench, device, ids.note).toOne["folder"] == ids.folders[0], "\(device)")
        }
    }

    @Test("tagging with a tag the stale store already shows wins over an older untagging; other tags are untouched")
    func toManyElementWritesWin() throws {
        let bench = SyncTestBench()
        let ids = try start(bench)
        // beta untags red and tags blue; alpha, stale, tags red again (already shown there).
        try bench.edit("beta") { context in
            try context.removeTargets([ids.tags[0]], forKey: "tags", of: ids.note)
            try context.addTargets([ids.tags[1]], forKey: "tags", of: ids.note)
        }
        try bench.edit("alpha") { try $0.addTargets([ids.tags[0]], forKey: "tags", of: ids.note) }
        try exchange(bench)
        for device in ["alpha", "beta"] {
            #expect(try note(bench, device, ids.note).toMany["tags"] == Set(ids.tags), "\(device)")
        }
        // An explicit removal of a tag the stale store already lacks wins the same way: alpha
        // untags blue; beta, which has not seen that, tags blue (it shows it already); alpha
        // untags blue again, later.
        try bench.edit("alpha") { try $0.removeTargets([ids.tags[1]], forKey: "tags", of: ids.note) }
        try bench.edit("beta") { try $0.addTargets([ids.tags[1]], forKey: "tags", of: ids.note) }
        try bench.edit("alpha") { try $0.removeTargets([ids.tags[1]], forKey: "tags", of: ids.note) }
        try exchange(bench)
        for device in ["alpha", "beta"] {
            #expect(try note(bench, device, ids.note).toMany["tags"] == [ids.tags[0]], "\(device)")
        }
    }

    @Test("tagging from a stale read, with a tag another writer of the same store untagged since, tags (seed 143)")
    func toManyElementWriteOverStaleReadWins() throws {
        let bench = SyncTestBench()
        let ids = try start(bench)
        // A context reads the note (tagged red); another untags red and saves; the first, stale,
        // tags red (already shown) and untags blue (already not shown), and the saves's log must
        // say so, not the opposite.
        let stale = ObjectContext(coordinator: bench["alpha"].coordinator, origin: .local, name: "stale")
        _ = try stale.fetch(FetchRequest(entity: "Note"))
        try bench.edit("alpha") { context in
            try context.removeTargets([ids.tags[0]], forKey: "tags", of: ids.note)
            try context.addTargets([ids.tags[1]], forKey: "tags", of: ids.note)
        }
        bench.time.advance(by: 5)
        try stale.addTargets([ids.tags[0]], forKey: "tags", of: ids.note)
        try stale.removeTargets([ids.tags[1]], forKey: "tags", of: ids.note)
        try stale.save()
        try bench["alpha"].sync.exportPending()
        try exchange(bench)
        for device in ["alpha", "beta"] {
            #expect(try note(bench, device, ids.note).toMany["tags"] == [ids.tags[0]], "\(device)")
        }
    }

    @Test("the change set names an explicitly written field; a write to a property the entity lacks is refused")
    func changeSetAndRefusals() throws {
        let bench = SyncTestBench()
        let ids = try start(bench)
        let context = ObjectContext(coordinator: bench["alpha"].coordinator, origin: .local)
        try context.setValue(false, forKey: "pinned", of: ids.note)
        #expect(context.hasChanges)
        let changes = try context.save()
        #expect(changes.updatedKeys[ids.note] == ["pinned"], "\(changes.updatedKeys)")
        #expect(throws: PersistenceError.self) { try context.setValue(1, forKey: "nope", of: ids.note) }
        #expect(throws: PersistenceError.self) { try context.setTarget(nil, forKey: "tags", of: ids.note) }
        #expect(throws: PersistenceError.self) {
            try context.setValue(1, forKey: "rank", of: ObjectID(entity: "Note", uuid: UUID()))
        }
        #expect(!context.hasChanges, "a refused write changes nothing")
    }
}
