import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Synchronization
import Testing

/// Two devices that create a record under one random id (a device whose random source failed, a
/// store copied before it made the record) made two records: both are kept, on every device,
/// with the writes and references each writer meant.
@Suite("Creation conflicts")
struct CreationConflictTests {
    /// Keeps the creation conflicts `sync` posts.
    final class ConflictRecorder: Sendable {
        final class Box: Sendable {
            let seen = Mutex<[CreationConflict]>([])
        }
        private let box = Box()
        nonisolated(unsafe) private var token: (any NSObjectProtocol)?

        init(_ sync: FolderSync) {
            token = NotificationCenter.default.addObserver(
                forName: .concordSyncCreationConflict,
                object: sync,
                queue: nil
            ) { [box] notification in
                guard let conflict = notification.userInfo?["conflict"] as? CreationConflict else { return }
                box.seen.withLock { $0.append(conflict) }
            }
        }

        /// The conflicts posted so far.
        var seen: [CreationConflict] { box.seen.withLock { $0 } }

        deinit {
            if let token { NotificationCenter.default.removeObserver(token) }
        }
    }

    @Test(
        "Two creations under one id are both kept, whatever order each device meets them in; writes and references go to the record their writer meant",
        arguments: ["Folder", "Tag"]
    )
    func bothCreationsAreKept(entity: String) throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["alpha", "beta", "gamma", "delta"] { try shared.addDevice(name) }
        let (beta, gamma) = (shared.devices[1], shared.devices[2])
        let recorders = shared.devices.map { ConflictRecorder($0.sync) }
        let id = ObjectID(entity: entity, uuid: UUID())
        let key = entity == "Folder" ? "name" : "label"
        func point(_ note: inout Record, at target: ObjectID) {
            if entity == "Folder" { note.toOne["folder"] = target } else { note.toMany["tags"] = [target] }
        }
        func target(of note: ObjectID, on index: Int) throws -> ObjectID? {
            let record = try shared.devices[index].store.records(with: [note]).first
            return entity == "Folder" ? record?.toOne["folder"] : record?.toMany["tags"]?.first
        }
        func edit(_ record: ObjectID, on index: Int, to text: String, export: Bool = true) throws {
            shared.time.advance(by: 5)
            let context = ObjectContext(coordinator: shared.devices[index].coordinator)
            var edited = try #require(try context.record(with: record))
            edited[key] = .string(text)
            try context.update(edited)
            try context.save()
            if export { try shared.devices[index].sync.exportPending() }
        }

        // beta creates the record first (the earlier timestamp) with a note in it, and keeps
        // its log to itself for now.
        shared.time.advance(by: 5)
        let (betaNote, alphaNote) = (ObjectID.random(entity: "Note"), ObjectID.random(entity: "Note"))
        let betaContext = ObjectContext(coordinator: beta.coordinator)
        try betaContext.insert(entity: entity, id: id, values: [key: "beta's"])
        var note = try betaContext.insert(entity: "Note", id: betaNote, values: ["title": "beta's note"])
        point(&note, at: id)
        try betaContext.update(note)
        try betaContext.save()
        // alpha creates "the same" id later, with a note of its own; gamma hears of it first.
        try RecreationTests.save(shared, on: 0) { context in
            try context.insert(entity: entity, id: id, values: [key: "alpha's"])
            var note = try context.insert(entity: "Note", id: alphaNote, values: ["title": "alpha's note"])
            point(&note, at: id)
            try context.update(note)
        }
        try gamma.sync.importAvailable()
        // Each edits its own record before hearing of the other's (alpha later: were its edit
        // applied to beta's record, it would win there).
        try edit(id, on: 1, to: "beta's, edited", export: false)
        try edit(id, on: 0, to: "alpha's, edited")
        try gamma.sync.importAvailable()
        try beta.sync.exportPending()

        // Everyone meets everything: gamma moves alpha's record when beta's earlier creation
        // arrives, alpha moves its own, beta keeps its own, delta meets both at once.
        for _ in 0..<2 { for device in shared.devices { try device.sync.importAvailable() } }
        let found = recorders.map(\.seen)
        for (index, conflicts) in found.enumerated() {
            #expect(conflicts.count == 1, "device \(index) told of \(conflicts.count) conflicts")
        }
        let conflict = try #require(found[0].first)
        #expect(conflict.id == id)
        #expect(conflict.kept < conflict.moved)
        #expect(conflict.kept.device == "beta" && conflict.moved.device == "alpha")
        #expect(found.allSatisfy { $0 == [conflict] }, "every device moves the same record")
        let moved = conflict.movedTo
        #expect(moved != id)
        for index in shared.devices.indices {
            let records = try shared.devices[index].store.records(with: [id, moved])
            #expect(records.first { $0.id == id }?[key] == "beta's, edited", "device \(index)")
            #expect(records.first { $0.id == moved }?[key] == "alpha's, edited", "device \(index)")
        }

        // Each keeps writing to its own record after the conflict.
        try edit(moved, on: 0, to: "alpha's, after")
        try edit(id, on: 1, to: "beta's, after")
        for _ in 0..<2 { for device in shared.devices { try device.sync.importAvailable() } }
        for index in shared.devices.indices {
            let records = try shared.devices[index].store.records(with: [id, moved])
            let kept = records.first { $0.id == id }
            let other = records.first { $0.id == moved }
            #expect(kept?[key] == "beta's, after", "device \(index)")
            #expect(other?[key] == "alpha's, after", "device \(index)")
            #expect(try target(of: betaNote, on: index) == id, "device \(index)")
            #expect(try target(of: alphaNote, on: index) == moved, "device \(index)")
            #expect(kept?.toMany["notes"] == [betaNote], "device \(index)")
            #expect(other?.toMany["notes"] == [alphaNote], "device \(index)")
            #expect(try shared.contents(index) == shared.contents(0), "device \(index) differs")
        }
        // No more conflicts were told of.
        #expect(recorders.allSatisfy { $0.seen.count == 1 })
    }

    @Test(
        "A deletion its writer made before it heard of the other creation deletes the record it meant, on every device"
    )
    func deletionGoesToTheRecordMeant() throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["alpha", "beta", "gamma"] { try shared.addDevice(name) }
        let recorders = shared.devices.map { ConflictRecorder($0.sync) }
        let id = ObjectID(entity: "Tag", uuid: UUID())
        // beta's creation is the earlier; alpha's the later, which alpha deletes before it hears
        // of beta's. gamma meets alpha's creation and deletion first.
        shared.time.advance(by: 5)
        let betaContext = ObjectContext(coordinator: shared.devices[1].coordinator)
        try betaContext.insert(entity: "Tag", id: id, values: ["label": "beta's"])
        try betaContext.save()
        try RecreationTests.save(shared, on: 0) { try $0.insert(entity: "Tag", id: id, values: ["label": "alpha's"]) }
        try RecreationTests.save(shared, on: 0) { try $0.delete(id) }
        try shared.devices[2].sync.importAvailable()
        try shared.devices[1].sync.exportPending()
        for _ in 0..<2 { for device in shared.devices { try device.sync.importAvailable() } }

        let conflict = try #require(recorders[1].seen.first)
        #expect(recorders.allSatisfy { $0.seen == [conflict] })
        for index in shared.devices.indices {
            let records = try shared.devices[index].store.records(with: [id, conflict.movedTo])
            #expect(records.map(\.id) == [id], "device \(index)")
            #expect(records.first?["label"] == "beta's", "device \(index)")
            #expect(try shared.contents(index) == shared.contents(0), "device \(index) differs")
        }
    }

    @Test(
        "A device that made a record under an id a baseline holds keeps both when it starts from the baseline, and so does everyone"
    )
    func baselineCreationIsKeptBeside() throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["alpha", "beta"] { try shared.addDevice(name) }
        let id = ObjectID(entity: "Tag", uuid: UUID())
        let (betaNote, deltaNote) = (ObjectID.random(entity: "Note"), ObjectID.random(entity: "Note"))
        try RecreationTests.save(shared, on: 1) { context in
            try context.insert(entity: "Tag", id: id, values: ["label": "beta's"])
            var note = try context.insert(entity: "Note", id: betaNote, values: ["title": "beta's note"])
            note.toMany["tags"] = [id]
            try context.update(note)
        }
        for device in shared.devices { try device.sync.importAvailable() }
        for device in shared.devices { try device.sync.publishAcknowledgement() }
        var removed = 0
        for device in shared.devices { removed += try device.sync.compact() }
        #expect(removed > 0, "beta's log was folded into a baseline and removed")

        // delta makes "the same" tag (later) with a note of its own, then starts from the baseline.
        let delta = try shared.addDevice("delta")
        let recorders = shared.devices.map { ConflictRecorder($0.sync) }
        try RecreationTests.save(shared, on: delta) { context in
            try context.insert(entity: "Tag", id: id, values: ["label": "delta's"])
            var note = try context.insert(entity: "Note", id: deltaNote, values: ["title": "delta's note"])
            note.toMany["tags"] = [id]
            try context.update(note)
        }
        #expect(try shared.devices[delta].sync.startFromBaseline() > 0)
        for _ in 0..<2 { for device in shared.devices { try device.sync.importAvailable() } }

        let conflict = try #require(recorders[delta].seen.first)
        #expect(conflict.id == id && conflict.moved.device == "delta")
        #expect(recorders.allSatisfy { $0.seen == [conflict] })
        for index in shared.devices.indices {
            let records = try shared.devices[index].store.records(with: [id, conflict.movedTo])
            #expect(records.first { $0.id == id }?["label"] == "beta's", "device \(index)")
            #expect(records.first { $0.id == conflict.movedTo }?["label"] == "delta's", "device \(index)")
            let notes = try shared.devices[index].store.records(with: [betaNote, deltaNote])
            #expect(notes.first { $0.id == betaNote }?.toMany["tags"] == [id], "device \(index)")
            #expect(notes.first { $0.id == deltaNote }?.toMany["tags"] == [conflict.movedTo], "device \(index)")
            #expect(try shared.contents(index) == shared.contents(0), "device \(index) differs")
        }
    }

    @Test(
        "A record deleted and made again under its random id in one save replaces it on every device: no conflict, one record"
    )
    func replacementIsNoConflict() throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["alpha", "beta", "gamma"] { try shared.addDevice(name) }
        let recorders = shared.devices.map { ConflictRecorder($0.sync) }
        let id = ObjectID.random(entity: "Note")
        try RecreationTests.save(shared, on: 0) { try $0.insert(entity: "Note", id: id, values: ["title": "first"]) }
        try shared.devices[1].sync.importAvailable()
        // An app replaces the record on purpose: deleted first, in the same context.
        try RecreationTests.save(shared, on: 0) { context in
            try context.delete(id)
            try context.insert(entity: "Note", id: id, values: ["title": "second"])
        }
        for _ in 0..<2 { for device in shared.devices { try device.sync.importAvailable() } }
        #expect(recorders.allSatisfy { $0.seen.isEmpty })
        for index in shared.devices.indices {
            let notes = try shared.devices[index].store.fetch(FetchRequest(entity: "Note"))
            #expect(notes.map(\.id) == [id], "device \(index)")
            #expect(notes.first?["title"] == "second", "device \(index)")
        }
    }

    @Test("A log names the creation each change means only when it has to, in format 6; others stay in format 4")
    func incarnationsGoInFormatSix() throws {
        let shared = CompactionTests.SharedContainer()
        try shared.addDevice("alpha")
        let tag = ObjectID.random(entity: "Tag")
        let inbox = ObjectID.deterministic(entity: "Folder", name: "Inbox")
        try RecreationTests.save(shared, on: 0) { context in
            try context.insert(entity: "Tag", id: tag, values: ["label": "first"])
            try context.insert(entity: "Folder", id: inbox, values: ["name": "Inbox"])
        }
        // A note tagged with the existing tag, in the name-based Inbox (which needs no incarnation).
        let note = ObjectID.random(entity: "Note")
        try RecreationTests.save(shared, on: 0) { context in
            var record = try context.insert(entity: "Note", id: note, values: ["title": "n"])
            record.toMany["tags"] = [tag]
            record.toOne["folder"] = inbox
            try context.update(record)
        }
        let layout = ContainerLayout(container: shared.container, storeName: "notes")
        func log(_ sequence: UInt64) throws -> (LogFile, SyncPayload) {
            let url = layout.logURL(device: "alpha", sequence: sequence)
            let file = try LogFile.decode(Data(contentsOf: url), url: url)
            return (file, try SyncPayload.decode(from: file))
        }
        let (first, firstPayload) = try log(1)
        #expect(first.formatVersion == LogFile.formatVersion)
        #expect(firstPayload.incarnations.isEmpty)
        let (second, secondPayload) = try log(2)
        #expect(second.formatVersion == LogFile.incarnationsVersion)
        let created = try #require(firstPayload.changes.first { $0.id == tag }?.created)
        #expect(secondPayload.incarnations == [tag: created])
        // The payload reads back as written.
        let again = try SyncPayload.decode(
            from: LogFile(
                device: "alpha",
                sequence: 9,
                schemaVersion: 1,
                created: Date(),
                payload: secondPayload.encoded(formatVersion: LogFile.incarnationsVersion),
                formatVersion: LogFile.incarnationsVersion
            )
        )
        #expect(again == secondPayload)
    }
}
